# Reference values for the cluster-aware proportions of stats.subgroup_metrics(cluster=)
# (stats/clustered.py; issue 15 item 1) and for its Missing / not applicable levels
# (issue 15 item 3). Regenerate from the repository root:
#   Rscript tests/r/clustered.R   -> tests/r/clustered.csv, tests/r/data/clustered.csv
# R 4.2.2, survey 4.1-1 (the data depend on R's RNG: R >= 3.6).
#
# Data (set.seed(15)): 150 patients with 1 to 4 scans, a patient random effect (SD 1.5) on
# the logit of a correct call, two models; phase per scan, age_group per patient (missing
# for 6 patients), tumor_location per patient for reference positives (missing for 4 of
# them), never recorded for reference negatives.
# Levels as clinrel defines them: a missing age_group is "Missing"; a missing
# tumor_location is "not applicable" on a reference negative and "Missing" on a positive.
# For each model, metric (sensitivity, specificity, ppv, npv, accuracy) and cell (overall,
# phase, age_group, tumor_location, age_group:phase), on the cell's scans in the metric's
# denominator (y = the metric's success indicator):
#   n, x, n_clusters (distinct patient_id)
#   se: SE(svymean(~y, svydesign(ids = ~patient_id, data = rows))) (ratio estimator,
#       with-replacement variance with the C / (C - 1) factor); NA with fewer than 2 clusters
#   design_effect: 1 when no patient repeats among the rows; NA with a single (repeated)
#       cluster or p of 0 or 1; else se^2 / (p (1 - p) / n)
#   n_effective: n without repeats or with p of 0 or 1; 1 with a single repeated cluster;
#       else min(n, n / deff * (qt(0.025, n - 1) / qt(0.025, C - 1))^2) (Korn & Graubard)
#   wilson_low/high: prop.test(p * n_eff, n_eff, correct = FALSE)$conf.int
#   cp_low/high: qbeta(0.025, p n_eff, (1 - p) n_eff + 1), qbeta(0.975, p n_eff + 1,
#       (1 - p) n_eff) (0 and 1 at p = 0 and p = 1): Clopper-Pearson at the effective counts
#   svyciprop_low/high: svyciprop(~y, design, method = "beta") where the design effect is
#       estimated (NA elsewhere); it equals cp_low/high where n_eff < n (no truncation)
# and, for sensitivity and specificity, each level against the rest of its axis (metric
# "<metric>_difference"): n_effective and n_effective_rest (the rest's rows as a cell of
# their own), n_clusters_rest, statistic (signed square root) and p_value of
# prop.test(c(p1 n1_eff, p2 n2_eff), c(n1_eff, n2_eff), correct = FALSE), conf_low/high:
# Newcombe's hybrid interval from the two prop.test Wilson intervals.
# Long format: model, metric, group_var, group_level, quantity, value.
suppressMessages(library(survey))
options(warn = -1)  # svydesign: 'No weights or probabilities supplied'
options(digits = 15)
set.seed(15)
P <- 150
scans <- sample(1:4, P, TRUE, c(0.4, 0.3, 0.2, 0.1))
pid <- rep(sprintf("P%03d", 1:P), scans)
n <- length(pid)
u <- rep(rnorm(P, 0, 1.5), scans)
pos_patient <- rbinom(P, 1, 0.5)
label <- rep(pos_patient, scans)
age <- sample(c("<40", "40-59", "60-74", "75+"), P, TRUE, c(0.15, 0.3, 0.35, 0.2))
age[sample(P, 6)] <- NA
age_group <- rep(age, scans)
loc <- ifelse(pos_patient == 1, sample(c("liver", "pancreas", "kidney"), P, TRUE), NA)
loc[sample(which(pos_patient == 1), 4)] <- NA
tumor_location <- rep(loc, scans)
phase <- sample(c("venous", "arterial", "non_contrast"), n, TRUE, c(0.5, 0.3, 0.2))
eff <- c(venous = 1.5, arterial = 0.3, non_contrast = -0.3)[phase]
rows <- list()
for (m in c("model_A", "model_B")) {
  shift <- if (m == "model_A") 0 else 0.7
  correct <- rbinom(n, 1, plogis(ifelse(label == 1, eff + shift, 2.5) + u))
  pred <- ifelse(label == 1, correct, 1 - correct)
  rows[[m]] <- data.frame(case_id = sprintf("C%04d", 1:n), patient_id = pid, model = m,
                          label = label, score = pred * 100, pred = pred, site = "s1",
                          phase = phase, age_group = age_group,
                          tumor_location = tumor_location)
}
d <- do.call(rbind, rows)
write.csv(d, "tests/r/data/clustered.csv", row.names = FALSE, na = "")

# clinrel's levels of the missing values
d$age_group[is.na(d$age_group)] <- "Missing"
d$tumor_location[is.na(d$tumor_location)] <- ifelse(d$label[is.na(d$tumor_location)] == 1,
                                                     "Missing", "not applicable")
d$overall <- "overall"
metric <- list(
  sensitivity = list(den = function(d) d$label == 1, y = function(d) d$pred == 1),
  specificity = list(den = function(d) d$label == 0, y = function(d) d$pred == 0),
  ppv = list(den = function(d) d$pred == 1, y = function(d) d$label == 1),
  npv = list(den = function(d) d$pred == 0, y = function(d) d$label == 0),
  accuracy = list(den = function(d) rep(TRUE, nrow(d)), y = function(d) d$pred == d$label))
# the clustered proportion of a set of rows (columns patient_id, y): the quantities above
clustered <- function(rows) {
  nn <- nrow(rows); x <- sum(rows$y); p <- x / nn
  C <- length(unique(rows$patient_id))
  repeats <- C < nn
  se <- NA
  if (C >= 2) se <- as.numeric(SE(svymean(~y, svydesign(ids = ~patient_id, data = rows))))
  deff <- if (!repeats) 1 else if (C < 2 || p == 0 || p == 1) NA else se^2 / (p * (1 - p) / nn)
  neff <- if (!repeats || (C >= 2 && (p == 0 || p == 1))) nn else if (C < 2) 1 else
    min(nn, nn / deff * (qt(0.025, nn - 1) / qt(0.025, C - 1))^2)
  list(n = nn, x = x, p = p, C = C, se = se, deff = deff, neff = neff, repeats = repeats)
}
wilson <- function(p, neff) suppressWarnings(prop.test(p * neff, neff, correct = FALSE)$conf.int)

out <- list()
add <- function(...) out[[length(out) + 1]] <<- data.frame(...)
for (m in unique(d$model)) for (k in names(metric)) {
  dm <- d[d$model == m, ]
  for (axis in c("overall", "phase", "age_group", "tumor_location", "age_group:phase")) {
    level <- interaction(dm[, strsplit(axis, ":")[[1]], drop = FALSE], sep = ":", drop = TRUE)
    for (lv in levels(level)) {
      rows <- dm[level == lv & metric[[k]]$den(dm), ]
      if (nrow(rows) == 0) next
      rows$y <- as.numeric(metric[[k]]$y(rows))
      e <- clustered(rows)
      w <- wilson(e$p, e$neff)
      cp <- c(if (e$p == 0) 0 else qbeta(0.025, e$p * e$neff, (1 - e$p) * e$neff + 1),
              if (e$p == 1) 1 else qbeta(0.975, e$p * e$neff + 1, (1 - e$p) * e$neff))
      sv <- c(NA, NA)
      if (!is.na(e$deff) && e$repeats) {
        sv <- as.numeric(attr(svyciprop(~y, svydesign(ids = ~patient_id, data = rows),
                                        method = "beta"), "ci"))
      }
      add(model = m, metric = k, group_var = axis, group_level = lv,
          quantity = c("n", "x", "n_clusters", "se", "design_effect", "n_effective",
                       "wilson_low", "wilson_high", "cp_low", "cp_high", "svyciprop_low",
                       "svyciprop_high"),
          value = c(e$n, e$x, e$C, e$se, e$deff, e$neff, w[1], w[2], cp[1], cp[2], sv[1], sv[2]))
      # subgroup versus the rest of the axis (stats.subgroup_vs_rest(cluster = )), for
      # sensitivity and specificity: each side's effective counts, then prop.test and
      # Newcombe's hybrid interval from the two Wilson intervals
      if (axis == "overall" || !(k %in% c("sensitivity", "specificity"))) next
      others <- dm[level != lv & metric[[k]]$den(dm), ]
      if (nrow(others) == 0) next
      others$y <- as.numeric(metric[[k]]$y(others))
      r <- clustered(others)
      pt <- suppressWarnings(prop.test(c(e$p * e$neff, r$p * r$neff), c(e$neff, r$neff),
                                       correct = FALSE))
      w2 <- wilson(r$p, r$neff)
      dd <- e$p - r$p
      add(model = m, metric = paste0(k, "_difference"), group_var = axis, group_level = lv,
          quantity = c("n_effective", "n_effective_rest", "n_clusters_rest", "statistic",
                       "p_value", "conf_low", "conf_high"),
          value = c(e$neff, r$neff, r$C, sign(dd) * sqrt(unname(pt$statistic)), pt$p.value,
                    dd - sqrt((e$p - w[1])^2 + (w2[2] - r$p)^2),
                    dd + sqrt((w[2] - e$p)^2 + (r$p - w2[1])^2)))
    }
  }
}
write.csv(do.call(rbind, out), "tests/r/clustered.csv", row.names = FALSE)
