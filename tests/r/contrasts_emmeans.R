# Reference values for Fit.contrasts (stats.adjust.contrasts): pairwise odds ratios of
# adjusted levels, emmeans' pairs(emmeans(fit, ~ by, type = "response"), adjust = "holm").
# Regenerate with (from the repository root; the data from tests/r/nested_data.py)
#   Rscript tests/r/contrasts_emmeans.R
# R 4.2.2, lme4 1.1-31, geepack 1.3.9, emmeans 1.8.4-1. Writes tests/r/contrasts_emmeans.csv
# (long: fit, by, quantity, term, value; term = "<stratum>|<contrast>").
# Fits on model_A's positives of tests/r/data/glmer_nested.csv,
#   detected ~ phase + age_group + sex + race + log(tumor_size_mm):
#   glm      glm(), no clusters: emmeans uses the model-based covariance;
#   geeglm   geeglm(id = site, corstr = "exchangeable"): the sandwich (vbeta), z tests;
#   glmer    glmer(+ (1 | site)), converged controls;
#   nested   glmer(+ (1 | site/patient_id)), converged controls; also ~ phase | sex.
# Limits: confint(adjust = "none") (per comparison).
suppressMessages({library(lme4); library(geepack); library(emmeans)})
options(digits = 15)
out <- list()
add <- function(fit, by, quantity, term, value)
  out[[length(out) + 1]] <<- data.frame(fit = fit, by = by, quantity = quantity, term = term,
                                        value = as.numeric(value))
d <- read.csv("tests/r/data/glmer_nested.csv", stringsAsFactors = FALSE)
d <- d[d$model == "model_A" & d$label == 1, ]
d$detected <- d$pred
d$phase <- factor(d$phase, levels = c("venous", "arterial", "delayed", "non_contrast"))
d$age_group <- factor(d$age_group, levels = c("<40", "40-59", "60-74", "75+"))
d$sex <- factor(d$sex, levels = c("F", "M"))
d$race <- factor(d$race, levels = c("White", "Black", "Asian", "Other", "Unknown"))
d$site <- factor(d$site)
d <- d[order(d$site), ]
f <- detected ~ phase + age_group + sex + race + log(tumor_size_mm)
tight <- glmerControl(tolPwrss = 1e-12, optimizer = "bobyqa", optCtrl = list(rhoend = 1e-10))
add_pairs <- function(fit, by, g, spec) {
  pr <- pairs(emmeans(g, spec, type = "response"), adjust = "holm")
  s <- as.data.frame(summary(pr))
  ci <- as.data.frame(confint(pr, adjust = "none"))
  st <- if ("sex" %in% names(s) && by != "sex") as.character(s$sex) else ""
  lv <- paste(st, s$contrast, sep = "|")
  add(fit, by, "odds_ratio", lv, s$odds.ratio)
  add(fit, by, "se", lv, s$SE)
  add(fit, by, "z", lv, s$z.ratio)
  add(fit, by, "p_holm", lv, s$p.value)
  add(fit, by, "lcl", lv, ci$asymp.LCL)
  add(fit, by, "ucl", lv, ci$asymp.UCL)
  pn <- as.data.frame(summary(pairs(emmeans(g, spec, type = "response"), adjust = "none")))
  add(fit, by, "p_value", lv, pn$p.value)
}
g <- glm(f, family = binomial, data = d, control = glm.control(epsilon = 1e-14, maxit = 100))
add_pairs("glm", "phase", g, ~ phase)
add_pairs("glm", "age_group", g, ~ age_group)
ge <- geeglm(f, family = binomial, data = d, id = site, corstr = "exchangeable",
             control = geese.control(epsilon = 1e-12, maxit = 100))
add_pairs("geeglm", "phase", ge, ~ phase)
gm <- glmer(update(f, . ~ . + (1 | site)), family = binomial, data = d, control = tight)
add_pairs("glmer", "phase", gm, ~ phase)
gn <- glmer(update(f, . ~ . + (1 | site/patient_id)), family = binomial, data = d, control = tight)
add_pairs("nested", "phase", gn, ~ phase)
add_pairs("nested", "age_group", gn, ~ age_group)
add_pairs("nested", "phase|sex", gn, ~ phase | sex)
write.csv(do.call(rbind, out), "tests/r/contrasts_emmeans.csv", row.names = FALSE)
