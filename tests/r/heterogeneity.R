# Reference values for stats.heterogeneity_test (stats/heterogeneity.py; issue 15 item 4).
# Regenerate from the repository root:
#   Rscript tests/r/heterogeneity.R   -> tests/r/heterogeneity.csv, tests/r/data/heterogeneity.csv
# R 4.2.2, survey 4.1-1 (the data depend on R's RNG: R >= 3.6).
#
# Data: simulated here (set.seed(4)): 260 patients with 1 to 4 scans (537 scans), a patient
# random effect (SD 1.5) on the logit of a correct call, two models, phase and age_group.
# For each model, estimand (sensitivity: detected among label 1; specificity: correct
# negative among label 0) and axis (phase, age_group, their intersection "age_group:phase"),
# on the scans of that population with a level (empty levels dropped):
#   pearson:   chisq.test(table(level, outcome), correct = FALSE): statistic, df, p
#   rao-scott: svychisq(~level + outcome, svydesign(ids = ~patient_id, data = .),
#              statistic = "Chisq") (Rao & Scott first-order correction): its statistic
#              (the uncorrected X^2), p, and the design effect mean(diag(Delta)) as
#              X^2 / qchisq(p, df, lower.tail = FALSE);
#   rao-scott-f: svychisq(..., statistic = "F") (survey's default: Rao & Scott's second-order
#              correction with an F reference): F = X^2 / trace(Delta), ndf = d, ddf = d * (K - 1),
#              d = trace(Delta)^2 / trace(Delta^2), p.
# Long format: model, estimand, axis, test, quantity, value.
suppressMessages(library(survey))
options(digits = 15)
set.seed(4)
P <- 260
scans <- sample(1:4, P, TRUE, c(0.4, 0.3, 0.2, 0.1))
pid <- rep(sprintf("P%03d", 1:P), scans)
n <- length(pid)
u <- rep(rnorm(P, 0, 1.5), scans)
age_group <- rep(sample(c("<40", "40-59", "60-74", "75+"), P, TRUE, c(0.1, 0.3, 0.35, 0.25)), scans)
phase <- sample(c("venous", "arterial", "delayed", "non_contrast"), n, TRUE, c(0.45, 0.2, 0.1, 0.25))
label <- rbinom(n, 1, 0.5)
eff <- c(venous = 1.2, arterial = 0.2, delayed = 0.8, non_contrast = -0.2)[phase]
rows <- list()
for (m in c("model_A", "model_B")) {
  shift <- if (m == "model_A") 0 else 0.5
  correct <- rbinom(n, 1, plogis(ifelse(label == 1, eff + shift, 2) + u))
  pred <- ifelse(label == 1, correct, 1 - correct)
  rows[[m]] <- data.frame(case_id = sprintf("C%04d", 1:n), patient_id = pid, model = m,
                          label = label, score = pred * 100, pred = pred, site = "s1",
                          phase = phase, age_group = age_group)
}
d <- do.call(rbind, rows)
write.csv(d, "tests/r/data/heterogeneity.csv", row.names = FALSE)

out <- list()
add <- function(...) out[[length(out) + 1]] <<- data.frame(...)
for (m in unique(d$model)) for (est in c("sensitivity", "specificity")) {
  pop <- d[d$model == m & d$label == (est == "sensitivity"), ]
  pop$outcome <- if (est == "sensitivity") pop$pred else 1 - pop$pred
  for (axis in c("phase", "age_group", "age_group:phase")) {
    pop$level <- droplevels(interaction(pop[, strsplit(axis, ":")[[1]]], sep = ":"))
    pt <- suppressWarnings(chisq.test(table(pop$level, pop$outcome), correct = FALSE))
    add(model = m, estimand = est, axis = axis, test = "pearson",
        quantity = c("statistic", "df", "p_value", "n", "n_levels"),
        value = c(pt$statistic, pt$parameter, pt$p.value, nrow(pop), nlevels(pop$level)))
    des <- svydesign(ids = ~patient_id, data = pop)
    rs <- svychisq(~level + outcome, des, statistic = "Chisq")
    add(model = m, estimand = est, axis = axis, test = "rao-scott",
        quantity = c("pearson_statistic", "df", "p_value", "design_effect", "n_clusters"),
        value = c(rs$statistic, rs$parameter, rs$p.value,
                  rs$statistic / qchisq(rs$p.value, rs$parameter, lower.tail = FALSE),
                  length(unique(pop$patient_id))))
    rf <- svychisq(~level + outcome, des, statistic = "F")
    add(model = m, estimand = est, axis = axis, test = "rao-scott-f",
        quantity = c("statistic", "ndf", "ddf", "p_value"),
        value = c(rf$statistic, rf$parameter[["ndf"]], rf$parameter[["ddf"]], rf$p.value))
  }
}
write.csv(do.call(rbind, out), "tests/r/heterogeneity.csv", row.names = FALSE)
