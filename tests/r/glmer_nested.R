# Reference values for the nested random-intercept GLMM (stats.models.nested) and the
# interaction tests. Regenerate with (from the repository root)
#   .venv/bin/python tests/r/nested_data.py     # tests/r/data/glmer_nested.csv
#   Rscript tests/r/glmer_nested.R
# R 4.2.2, lme4 1.1-31, emmeans 1.8.4-1. Writes tests/r/glmer_nested.csv (long: dataset,
# model, fit, quantity, term, value).
#
# glmer(detected ~ phase + age_group + sex + race + log(tumor_size_mm) + (1 | site/patient_id))
# by Laplace, per model's positives, twice: R's default controls (fit "<name>") and
# converged (fit "<name>_tight": tolPwrss = 1e-12, bobyqa rhoend = 1e-10). At the defaults
# lme4's PIRLS stops at tolPwrss = 1e-7, so the deviance it differentiates numerically for
# the SEs is noisy; the converged fit's Hessian is the exact Laplace Hessian's
# finite-difference estimate, which the tests compare with.
#   benchx: tests/r/data/models_benchx.csv, model_A (no patient effect: a singular fit).
#   interaction: both models' positives together, phase * model, (1 | site/patient_id);
#     the LRT of phase:model (anova against the fit without it), emmeans of phase | model
#     and pairs(emmeans(~ model | phase), adjust = "holm");
#   interaction_age: model_A, phase * age_group against the main effects.
suppressMessages({library(lme4); library(emmeans)})
options(digits = 15)
out <- list()
add <- function(dataset, model, fit, quantity, term, value)
  out[[length(out) + 1]] <<- data.frame(dataset = dataset, model = model, fit = fit,
                                        quantity = quantity, term = term, value = as.numeric(value))
pyname1 <- function(nm) {  # one R coefficient name part -> patsy
  if (nm == "(Intercept)") return("Intercept")
  if (nm == "log(tumor_size_mm)") return("np.log(tumor_size_mm)")
  for (f in c("phase", "age_group", "sex", "race", "model"))
    if (startsWith(nm, f)) return(paste0(f, "[T.", substring(nm, nchar(f) + 1), "]"))
  nm
}
pyname <- function(nms) vapply(nms, function(nm)
  paste(vapply(strsplit(nm, ":", fixed = TRUE)[[1]], pyname1, ""), collapse = ":"), "")
prep <- function(d) {
  d$phase <- factor(d$phase, levels = c("venous", "arterial", "delayed", "non_contrast"))
  d$age_group <- factor(d$age_group, levels = c("<40", "40-59", "60-74", "75+"))
  d$sex <- factor(d$sex, levels = c("F", "M"))
  d$race <- factor(d$race, levels = c("White", "Black", "Asian", "Other", "Unknown"))
  d$site <- factor(d$site); d$model <- factor(d$model)
  d <- d[d$label == 1, ]
  d$detected <- d$pred
  d
}
add_nested <- function(dataset, model, fitname, g) {
  b <- fixef(g)
  add(dataset, model, fitname, "estimate", pyname(names(b)), b)
  add(dataset, model, fitname, "std_error", pyname(names(b)), sqrt(diag(as.matrix(vcov(g)))))
  th <- getME(g, "theta")   # lme4's order: patient_id:site, site
  add(dataset, model, fitname, "theta", sub("\\.\\(Intercept\\)$", "", names(th)), th)
  h <- g@optinfo$derivs$Hessian   # deviance Hessian in (theta, beta)
  if (!is.null(h)) {
    se <- sqrt(diag(solve(h / 2)))
    add(dataset, model, fitname, "theta_se", sub("\\.\\(Intercept\\)$", "", names(th)),
        se[seq_along(th)])
    add(dataset, model, fitname, "hessian_se", pyname(names(b)), se[-seq_along(th)])
  }
  add(dataset, model, fitname, "loglik", "", logLik(g))
  add(dataset, model, fitname, "singular", "", isSingular(g))
  re <- ranef(g, condVar = TRUE)
  for (lv in names(re)) {
    r <- re[[lv]]
    add(dataset, model, fitname, paste0("re:", lv), rownames(r), r[, 1])
    add(dataset, model, fitname, paste0("re_se:", lv), rownames(r), sqrt(attr(r, "postVar")[1, 1, ]))
  }
}
CONTROLS <- list(list(sfx = "", ctl = glmerControl()),
                 list(sfx = "_tight", ctl = glmerControl(tolPwrss = 1e-12, optimizer = "bobyqa",
                                                         optCtrl = list(rhoend = 1e-10))))
f <- detected ~ phase + age_group + sex + race + log(tumor_size_mm) + (1 | site/patient_id)
d <- prep(read.csv("tests/r/data/glmer_nested.csv", stringsAsFactors = FALSE))
bx <- prep(read.csv("tests/r/data/models_benchx.csv", stringsAsFactors = FALSE))
for (c in CONTROLS) {
  for (m in sort(unique(as.character(d$model)))) {
    g <- glmer(f, family = binomial, data = d[d$model == m, ], control = c$ctl)
    add_nested("nested", m, paste0("glmer_nested", c$sfx), g)
  }
  g <- glmer(f, family = binomial, data = bx[bx$model == "model_A", ], control = c$ctl)
  add_nested("benchx", "model_A", paste0("glmer_nested", c$sfx), g)
  # phase x model: both models' positives in one fit, patients (and sites) as random effects
  fi <- detected ~ phase * model + age_group + sex + race + log(tumor_size_mm) + (1 | site/patient_id)
  gi <- glmer(fi, family = binomial, data = d, control = c$ctl)
  g0 <- update(gi, . ~ . - phase:model)
  a <- anova(gi, g0)
  add("interaction", "pooled", paste0("lrt", c$sfx), "statistic", "phase:model", a$Chisq[2])
  add("interaction", "pooled", paste0("lrt", c$sfx), "df", "phase:model", a$Df[2])
  add("interaction", "pooled", paste0("lrt", c$sfx), "p_value", "phase:model", a[["Pr(>Chisq)"]][2])
  add_nested("interaction", "pooled", paste0("glmer_nested", c$sfx), gi)
  em <- as.data.frame(emmeans(gi, ~ phase | model, type = "response"))
  lv <- paste(em$model, em$phase, sep = ":")
  add("interaction", "pooled", paste0("emmeans", c$sfx), "prob", lv, em$prob)
  add("interaction", "pooled", paste0("emmeans", c$sfx), "se", lv, em$SE)
  pr <- pairs(emmeans(gi, ~ model | phase, type = "response"), adjust = "holm")
  s <- as.data.frame(summary(pr))
  lv <- paste(s$phase, s$contrast, sep = ":")
  add("interaction", "pooled", paste0("pairs", c$sfx), "odds_ratio", lv, s$odds.ratio)
  add("interaction", "pooled", paste0("pairs", c$sfx), "se", lv, s$SE)
  add("interaction", "pooled", paste0("pairs", c$sfx), "z", lv, s$z.ratio)
  add("interaction", "pooled", paste0("pairs", c$sfx), "p_holm", lv, s$p.value)
  # phase x age group within model_A
  fa <- detected ~ phase * age_group + sex + race + log(tumor_size_mm) + (1 | site/patient_id)
  ga <- glmer(fa, family = binomial, data = d[d$model == "model_A", ], control = c$ctl)
  a <- anova(ga, update(ga, . ~ . - phase:age_group))
  add("interaction_age", "model_A", paste0("lrt", c$sfx), "statistic", "phase:age_group", a$Chisq[2])
  add("interaction_age", "model_A", paste0("lrt", c$sfx), "df", "phase:age_group", a$Df[2])
  add("interaction_age", "model_A", paste0("lrt", c$sfx), "p_value", "phase:age_group",
      a[["Pr(>Chisq)"]][2])
}
write.csv(do.call(rbind, out), "tests/r/glmer_nested.csv", row.names = FALSE)
