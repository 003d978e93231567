# Reference values for non-estimable marginal means (stats/adjust.py; issue 15 item 6).
# Regenerate from the repository root:
#   Rscript tests/r/emmeans_nonest.R        -> tests/r/emmeans_nonest.csv
# R 4.2.2, emmeans 1.8.4-1, estimability 1.4.1 (the data depend on R's RNG: R >= 3.6).
#
# Data: simulated here (set.seed(15); written to tests/r/data/emmeans_nonest.csv so R and
# Python read the same rows): 1,500 positives at 12 sites, detection depending on phase,
# age_group, sex and tumour size, then the delayed-phase scans of patients under 40 removed,
# so the phase x age_group interaction has an empty cell.
# Model: glm(detected ~ phase * age_group + sex + log(tumor_size_mm), binomial) with
# epsilon = 1e-10 (glm.fit's QR rank tolerance is min(1e-7, epsilon / 1000): at 1e-14 it no
# longer sees the aliased column and the fit diverges), fitted under two choices of reference levels (venous/<40 and delayed/75+):
# R drops a different aliased column each time.
#   kind "emmeans":      emmeans(g, ~spec, type = "response"): prob, SE, asymp.LCL/UCL
#                        (NA where emmeans reports "nonEst").
#   kind "standardized": g-computation, mean over the fitted rows of predict(type =
#                        "response") with spec set to the level; NA when any of those
#                        rows is not estimable (estimability::is.estble on nonest.basis).
# Long format: reference, spec, kind, level, quantity, value.
suppressMessages({library(emmeans); library(estimability)})
options(digits = 15)
set.seed(15)
n <- 1500
PH <- c("venous", "arterial", "delayed", "non_contrast"); AG <- c("<40", "40-59", "60-74", "75+")
sim <- data.frame(case_id = sprintf("C%04d", 1:n), site = sprintf("site_%02d", sample(12, n, TRUE)),
                  phase = sample(PH, n, TRUE, c(0.4, 0.2, 0.15, 0.25)),
                  age_group = sample(AG, n, TRUE, c(0.15, 0.35, 0.3, 0.2)),
                  sex = sample(c("F", "M"), n, TRUE), tumor_size_mm = round(exp(rnorm(n, 3, 0.6)), 3))
eta <- 0.8 + c(0, -0.8, -0.3, -1.2)[match(sim$phase, PH)] + c(-0.6, 0, 0.2, 0.1)[match(sim$age_group, AG)] +
  0.2 * (sim$sex == "M") + 0.5 * (log(sim$tumor_size_mm) - 3)
sim$detected <- rbinom(n, 1, plogis(eta))
sim <- sim[!(sim$phase == "delayed" & sim$age_group == "<40"), ]
write.csv(sim, "tests/r/data/emmeans_nonest.csv", row.names = FALSE)
pos <- sim
f <- detected ~ phase * age_group + sex + log(tumor_size_mm)
refs <- list(venous = list(phase = c("venous", "arterial", "delayed", "non_contrast"),
                           age_group = c("<40", "40-59", "60-74", "75+")),
             delayed = list(phase = c("delayed", "venous", "arterial", "non_contrast"),
                            age_group = c("75+", "<40", "40-59", "60-74")))
out <- list()
add <- function(...) out[[length(out) + 1]] <<- data.frame(...)
for (r in names(refs)) {
  dd <- pos
  dd$phase <- factor(dd$phase, levels = refs[[r]]$phase)
  dd$age_group <- factor(dd$age_group, levels = refs[[r]]$age_group)
  dd$sex <- factor(dd$sex, levels = c("F", "M"))
  g <- glm(f, family = binomial, data = dd, control = glm.control(epsilon = 1e-10, maxit = 100))
  add(reference = r, spec = "fit", kind = "glm", level = "", quantity = "aliased",
      value = sum(is.na(coef(g))))
  nb <- nonest.basis(g)
  for (spec in c("phase", "age_group")) {
    em <- as.data.frame(emmeans(g, as.formula(paste("~", spec)), type = "response"))
    for (q in c("prob", "SE", "asymp.LCL", "asymp.UCL"))
      add(reference = r, spec = spec, kind = "emmeans", level = as.character(em[[spec]]),
          quantity = q, value = em[[q]])
    for (lv in levels(dd[[spec]])) {
      nd <- dd
      nd[[spec]] <- factor(lv, levels = levels(dd[[spec]]))
      X <- model.matrix(delete.response(terms(g)), nd)
      ok <- all(is.estble(X, nb))
      p <- if (ok) mean(suppressWarnings(predict(g, nd, type = "response"))) else NA
      add(reference = r, spec = spec, kind = "standardized", level = lv, quantity = "prob",
          value = p)
    }
  }
}
write.csv(do.call(rbind, out), "tests/r/emmeans_nonest.csv", row.names = FALSE)
