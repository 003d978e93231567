# Reference values for stats.variance_partition (Nakagawa & Schielzeth latent-scale
# decomposition). Regenerate with (from the repository root; data from
# tests/r/nested_data.py)
#   Rscript tests/r/variance_partition.R
# R 4.2.2, lme4 1.1-31, performance 0.10.2, insight 0.19.0 (Debian r-cran-performance).
# Writes tests/r/variance_partition.csv (long: fit, quantity, term, value).
# On model_A's positives of tests/r/data/glmer_nested.csv, converged glmer fits of
#   detected ~ phase + age_group + sex + race + log(tumor_size_mm)
# with (1 | site) ("glmer") and (1 | site/patient_id) ("nested"):
#   insight::get_variance: var.fixed, var.random, var.residual, var.intercept per group;
#   performance::r2_nakagawa: marginal and conditional R2;
#   block variances recomputed here: var(X_b beta_b) over the model matrix columns of
#   each block's terms (protocol: phase; demographics: age_group, sex, race; tumour:
#   log(tumor_size_mm)).
suppressMessages({library(lme4); library(performance); library(insight)})
options(digits = 15)
out <- list()
add <- function(fit, quantity, term, value)
  out[[length(out) + 1]] <<- data.frame(fit = fit, quantity = quantity, term = term,
                                        value = as.numeric(value))
d <- read.csv("tests/r/data/glmer_nested.csv", stringsAsFactors = FALSE)
d <- d[d$model == "model_A" & d$label == 1, ]
d$detected <- d$pred
d$phase <- factor(d$phase, levels = c("venous", "arterial", "delayed", "non_contrast"))
d$age_group <- factor(d$age_group, levels = c("<40", "40-59", "60-74", "75+"))
d$sex <- factor(d$sex, levels = c("F", "M"))
d$race <- factor(d$race, levels = c("White", "Black", "Asian", "Other", "Unknown"))
d$site <- factor(d$site)
tight <- glmerControl(tolPwrss = 1e-12, optimizer = "bobyqa", optCtrl = list(rhoend = 1e-10))
f <- detected ~ phase + age_group + sex + race + log(tumor_size_mm)
blocks <- list(protocol = "phase", demographics = c("age_group", "sex", "race"),
               tumour = "log(tumor_size_mm)")
for (spec in list(list(name = "glmer", re = "(1 | site)"),
                  list(name = "nested", re = "(1 | site/patient_id)"))) {
  g <- glmer(as.formula(paste(deparse(f), "+", spec$re)), family = binomial, data = d,
             control = tight)
  v <- get_variance(g)
  add(spec$name, "var_fixed", "", v$var.fixed)
  add(spec$name, "var_random", "", v$var.random)
  add(spec$name, "var_residual", "", v$var.residual)
  add(spec$name, "var_intercept", names(v$var.intercept), v$var.intercept)
  r2 <- r2_nakagawa(g)
  add(spec$name, "r2_marginal", "", r2$R2_marginal)
  add(spec$name, "r2_conditional", "", r2$R2_conditional)
  mm <- model.matrix(g); b <- fixef(g)
  labels <- attr(terms(g), "term.labels"); asg <- attr(mm, "assign")
  for (bn in names(blocks)) {
    cols <- which(asg %in% match(blocks[[bn]], labels))
    add(spec$name, "var_block", bn, var(as.vector(mm[, cols, drop = FALSE] %*% b[cols])))
  }
}
write.csv(do.call(rbind, out), "tests/r/variance_partition.csv", row.names = FALSE)
