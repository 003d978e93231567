# Reference values for the cluster-aware paired model comparisons of
# stats.compare_models(cluster = "patient_id") and stats.delong_test(cluster = )
# (stats/clustered.py::paired_difference, stats/intervals.py::clustered_auc_variance;
# issue 15). Regenerate from the repository root:
#   Rscript tests/r/compare_cluster.R -> tests/r/compare_cluster.csv,
#                                        tests/r/data/compare_cluster.csv
# R 4.2.2, survey 4.1-1, pROC 1.18.0 (the data depend on R's RNG: R >= 3.6).
#
# Data (set.seed(1998)): 120 patients with 1 to 4 scans, two models scoring every scan.
# A patient's scans share a latent propensity to be positive (labels mixed within some
# patients). Each model's call is right when (mu_model + phase effect + u_patient +
# w_patient,model + e_scan) > 0: u (SD 1) is shared by the models, w (SD 0.9) is a
# patient x model effect, so the discordances A-only / B-only cluster within patients.
# score = plogis(+/- that sum), rounded to 2 decimals (ties), pred = score >= 0.5.
# Axes: phase (per scan: venous, arterial, non_contrast, delayed) and age_group (per
# patient). Edge cells, built on purpose:
#   * age_group "75+": 6 patients with 2-4 scans each; model B's score is model A's
#     logit stretched by a factor in [1, 2] (same side of 0.5), so B's calls equal A's:
#     no discordant pair in sensitivity or specificity (deff not estimable, n_eff = n);
#     the AUCs still differ (the ranks change);
#   * phase "delayed": the 3 positive scans of patient P001 (one patient holds all of the
#     cell's positives: n_eff = 1, SE not estimable; 2 A-only discordances) and 2 negative
#     scans of two other patients (specificity without a repeated patient in that cell);
#   * age_group "<40": 12 patients with one scan each (no repeated patient at all:
#     exact McNemar and DeLong in every comparison of the cell);
#   * first_scan = 1 marks each patient's first scan: the rows of a data set in which
#     every patient has one scan (singleton clusters).
# Columns: case_id, patient_id, model, label, score, pred, site, phase, age_group,
# first_scan.
#
# For each cell (overall, every phase, every age_group), model_A minus model_B, computed
# here from the definitions (not from clinrel):
# sensitivity_difference (denominator: label 1, right: pred 1) and
# specificity_difference (denominator: label 0, right: pred 0), on the cell's scans in the
# denominator, ya / yb the right-call indicators of A / B:
#   n, a (both right), b (A only), c (B only), d (both wrong), n_clusters (distinct
#   patient_id), repeats (1 if some patient holds more than one of these scans), estimate
#   (b - c) / n;
#   se: SE(svycontrast(svymean(~ya + yb, svydesign(ids = ~patient_id, data = rows)),
#       c(1, -1))) (Obuchowski 1998's ratio estimator); NA with fewer than 2 clusters;
#   design_effect: 1 without repeats; NA with repeats and a single cluster or with no
#       variance with scans as independent, srs = ((b + c) - (b - c)^2 / n) / n^2 <= 0
#       (no discordant pair); else se^2 / srs;
#   n_effective: n without repeats or with srs <= 0; 1 with a single repeated cluster; else
#       min(n, n / deff * (qt(0.025, n - 1) / qt(0.025, C - 1))^2) (Korn & Graubard);
#   not_estimable: 1 where design_effect is NA with repeats;
#   statistic: Durkalski et al. (2003) X2 = (sum_c d_c)^2 / sum_c d_c^2, d_c = the
#       patient's sum of ya - yb (NA without a discordant pair; 0 when sum_c d_c = 0; NA
#       when one patient holds repeats: X2 would be 1 whatever the data), p_durkalski =
#       pchisq(X2, 1, lower = FALSE) (1 without a discordant pair; NA with one patient);
#   p_exact: binom.test(b, b + c)$p.value (1 without a discordant pair);
#   conf_low/high: Newcombe's (1998b) paired interval, method 10 with the continuity
#       corrected phi, written below from the paper, Wilson limits from prop.test(correct
#       = FALSE), at the counts (a, b, c, d) * n_effective / n;
#   p_value: what compare_models reports: max(p_durkalski, p_exact) with repeats (NA
#       where p_durkalski is NA: clustering never makes the test more liberal than the
#       exact McNemar test on the scans), else p_exact.
# auc_difference (the cell's scans, both labels): auc_a, auc_b, estimate, n_clusters,
#   repeats (some patient holds more than one of the cell's scans); var: Obuchowski's
#   (1997) clustered variance of AUC_A - AUC_B as V(A) + V(B) - 2 Cov(A, B), from
#   per-patient sums of the placement values built by a double loop over patients
#   (positives of patient i against negatives of patient k):
#     d10_i^t = V10_i^t - m_i A_t, d01_i^t = V01_i^t - n_i A_t,
#     S10^{ts} = I10 / ((I10 - 1) M) sum_i d10_i^t d10_i^s, S01^{ts} likewise with I01, N,
#     S11^{ts} = I / (I - 1) sum_i d10_i^t d01_i^s,
#     V(A_t) = S10^{tt} / M + S01^{tt} / N + 2 S11^{tt} / (M N),
#     Cov(A_1, A_2) = S10^{12} / M + S01^{12} / N + (S11^{12} + S11^{21}) / (M N);
#   NA with fewer than 2 patients holding a positive or a negative; se = sqrt(var),
#   statistic = estimate / se; with repeats p_value = 2 pt(-|z|, I - 1) and
#   conf_low/high = estimate -/+ qt(0.975, I - 1) se, else the normal's (with every
#   patient holding one scan this is DeLong's variance and pROC's roc.test).
# auc_singletons (metric; group overall): the first_scan = 1 rows: the same Obuchowski
#   var, and pROC's roc.test(paired = TRUE, method = "delong") statistic (proc_z), p-value
#   (proc_p) and conf.int (proc_low, proc_high).
# Long format: metric, group_var, group_level, quantity, value.
suppressMessages({library(survey); library(pROC)})
options(warn = -1)  # svydesign: 'No weights or probabilities supplied'
set.seed(1998)
P <- 120
ids <- sprintf("P%03d", 1:P)
scans <- sample(1:4, P, TRUE, c(0.35, 0.3, 0.2, 0.15))
scans[1] <- 3                                         # P001: the 'delayed' patient
young <- sample(which(scans == 1), 12)
old <- sample(setdiff(which(scans >= 2), 1), 6)
age <- sample(c("40-59", "60-74"), P, TRUE)
age[young] <- "<40"
age[old] <- "75+"
pid <- rep(ids, scans)
n <- length(pid)
pix <- match(pid, ids)
label <- rbinom(n, 1, plogis(-0.2 + 1.5 * rnorm(P)[pix]))
label[pix == 1] <- 1
phase <- sample(c("venous", "arterial", "non_contrast"), n, TRUE, c(0.5, 0.3, 0.2))
phase[pix == 1] <- "delayed"
neg_single <- sapply(split(which(label == 0 & pix != 1), pix[label == 0 & pix != 1]),
                     function(r) r[1])
phase[sample(neg_single, 2)] <- "delayed"
u <- rnorm(P, 0, 1)[pix]
mu <- list(model_A = c(venous = 1.2, arterial = 0.4, non_contrast = 0.2, delayed = 0),
           model_B = c(venous = 1.0, arterial = 0.9, non_contrast = -0.2, delayed = 0))
score <- list()
for (m in names(mu)) {
  eta <- mu[[m]][phase] + u + rnorm(P, 0, 0.9)[pix] + rnorm(n)
  score[[m]] <- round(plogis((2 * label - 1) * eta), 2)
}
rows75 <- age[pix] == "75+"
score$model_B[rows75] <- round(plogis(qlogis(score$model_A[rows75]) *
                                        runif(sum(rows75), 1, 2)), 2)
score$model_A[pix == 1] <- c(0.81, 0.74, 0.93)        # P001: A right on all three,
score$model_B[pix == 1] <- c(0.32, 0.77, 0.41)        # B wrong on two (b = 2, c = 0)
pred <- lapply(score, function(s) as.integer(s >= 0.5))
stopifnot(all(pred$model_A[rows75] == pred$model_B[rows75]),
          !any(duplicated(pid[age[pix] == "<40"])))
first <- as.integer(!duplicated(pid))
d <- do.call(rbind, lapply(names(mu), function(m) data.frame(
  case_id = sprintf("C%04d", 1:n), patient_id = pid, model = m, label = label,
  score = score[[m]], pred = pred[[m]], site = "s1", phase = phase, age_group = age[pix],
  first_scan = first)))
write.csv(d, "tests/r/data/compare_cluster.csv", row.names = FALSE)

# one row per scan: the two models side by side
w <- data.frame(patient_id = pid, label = label, phase = phase, age_group = age[pix],
                first_scan = first, score_a = score$model_A, score_b = score$model_B,
                pred_a = pred$model_A, pred_b = pred$model_B)

# Newcombe (1998b) method 10: Wilson limits of both margins, continuity-corrected phi
wil <- function(x, n) suppressWarnings(prop.test(x, n, correct = FALSE)$conf.int)
newcombe_paired <- function(a, b, c, d) {
  n <- a + b + c + d
  den <- sqrt((a + b) * (c + d) * (a + c) * (b + d)); A <- a * d - b * c
  phi <- if (den == 0) 0 else if (A > n / 2) (A - n / 2) / den else if (A >= 0) 0 else A / den
  p1 <- (a + b) / n; p2 <- (a + c) / n; w1 <- wil(a + b, n); w2 <- wil(a + c, n)
  D <- p1 - p2
  c(D - sqrt(max((p1 - w1[1])^2 - 2 * phi * (p1 - w1[1]) * (w2[2] - p2) + (w2[2] - p2)^2, 0)),
    D + sqrt(max((w1[2] - p1)^2 - 2 * phi * (w1[2] - p1) * (p2 - w2[1]) + (p2 - w2[1])^2, 0)))
}

# the paired difference of proportions on rows (patient_id, ya, yb): quantities above
paired <- function(rows) {
  ya <- rows$ya; yb <- rows$yb; nn <- nrow(rows)
  a <- sum(ya & yb); b <- sum(ya & !yb); c <- sum(!ya & yb); dd <- nn - a - b - c
  C <- length(unique(rows$patient_id)); repeats <- C < nn
  se <- NA
  if (C >= 2) {
    des <- svydesign(ids = ~patient_id, data = rows)
    se <- as.numeric(SE(svycontrast(svymean(~ya + yb, des), c(1, -1))))
  }
  srs <- ((b + c) - (b - c)^2 / nn) / nn^2
  if (!repeats) {
    deff <- 1; neff <- nn
  } else if (C < 2) {
    deff <- NA; neff <- 1
  } else if (srs <= 0) {
    deff <- NA; neff <- nn
  } else {
    deff <- se^2 / srs
    neff <- min(nn, nn / deff * (qt(0.025, nn - 1) / qt(0.025, C - 1))^2)
  }
  dc <- tapply(ya - yb, rows$patient_id, sum)
  x2 <- if (b + c > 0 && !(repeats && C < 2)) {
    if (sum(dc) == 0) 0 else sum(dc)^2 / sum(dc^2)
  } else NA
  p_d <- if (repeats && C < 2) NA else if (b + c > 0) pchisq(x2, 1, lower.tail = FALSE) else 1
  p_e <- if (b + c > 0) binom.test(b, b + c)$p.value else 1
  k <- neff / nn
  ci <- newcombe_paired(a * k, b * k, c * k, dd * k)
  c(n = nn, a = a, b = b, c = c, d = dd, n_clusters = C, repeats = repeats,
    estimate = (b - c) / nn, se = se, design_effect = deff, n_effective = neff,
    not_estimable = repeats && is.na(deff), statistic = x2, p_durkalski = p_d,
    p_exact = p_e, conf_low = ci[1], conf_high = ci[2],
    p_value = if (repeats) max(p_d, p_e) else p_e)
}

# Obuchowski (1997): AUCs of the two scores and the clustered variance of their difference
psi <- function(x, y) (x > y) + 0.5 * (x == y)
obuchowski_diff <- function(rows) {
  cl <- unique(rows$patient_id); I <- length(cl)
  by_cl <- split(rows, factor(rows$patient_id, levels = cl))
  pos <- lapply(by_cl, function(r) r[r$label == 1, c("score_a", "score_b"), drop = FALSE])
  neg <- lapply(by_cl, function(r) r[r$label == 0, c("score_a", "score_b"), drop = FALSE])
  m <- sapply(pos, nrow); nc <- sapply(neg, nrow); M <- sum(m); N <- sum(nc)
  V10 <- matrix(0, I, 2); V01 <- matrix(0, I, 2)     # per-patient placement-value sums
  for (i in seq_len(I)) for (k in seq_len(I)) {
    if (m[i] == 0 || nc[k] == 0) next
    for (t in 1:2) {
      s <- sum(outer(pos[[i]][[t]], neg[[k]][[t]], psi))
      V10[i, t] <- V10[i, t] + s / N                 # positives of i against all negatives
      V01[k, t] <- V01[k, t] + s / M                 # negatives of k against all positives
    }
  }
  A <- colSums(V10) / M
  d10 <- V10 - outer(m, A); d01 <- V01 - outer(nc, A)
  I10 <- sum(m > 0); I01 <- sum(nc > 0)
  S10 <- function(t, s) I10 / ((I10 - 1) * M) * sum(d10[, t] * d10[, s])
  S01 <- function(t, s) I01 / ((I01 - 1) * N) * sum(d01[, t] * d01[, s])
  S11 <- function(t, s) I / (I - 1) * sum(d10[, t] * d01[, s])
  V <- function(t) S10(t, t) / M + S01(t, t) / N + 2 * S11(t, t) / (M * N)
  cv <- S10(1, 2) / M + S01(1, 2) / N + (S11(1, 2) + S11(2, 1)) / (M * N)
  var <- if (I10 > 1 && I01 > 1) V(1) + V(2) - 2 * cv else NA
  list(auc_a = A[1], auc_b = A[2], var = var, I = I, repeats = I < nrow(rows))
}

out <- list()
add <- function(metric, axis, level, v) {
  out[[length(out) + 1]] <<- data.frame(metric = metric, group_var = axis, group_level = level,
                                        quantity = names(v), value = sprintf("%.17g", v))
}
w$overall <- "overall"
for (axis in c("overall", "phase", "age_group")) for (lv in sort(unique(w[[axis]]))) {
  cell <- w[w[[axis]] == lv, ]
  for (k in c("sensitivity", "specificity")) {
    lab <- if (k == "sensitivity") 1 else 0
    rows <- cell[cell$label == lab, ]
    rows$ya <- as.numeric(rows$pred_a == lab); rows$yb <- as.numeric(rows$pred_b == lab)
    add(paste0(k, "_difference"), axis, lv, paired(rows))
  }
  o <- obuchowski_diff(cell)
  est <- o$auc_a - o$auc_b; se <- sqrt(o$var); z <- est / se
  # with repeated patients Student's t on I - 1 df (the clustered variance rests on I
  # patients, as survey's degf); without, the normal (pROC's roc.test)
  df <- if (o$repeats) o$I - 1 else Inf
  add("auc_difference", axis, lv,
      c(auc_a = o$auc_a, auc_b = o$auc_b, estimate = est, n_clusters = o$I,
        repeats = o$repeats, var = o$var, se = se, statistic = z,
        p_value = 2 * pt(-abs(z), df),
        conf_low = est - qt(0.975, df) * se, conf_high = est + qt(0.975, df) * se))
}
# singleton clusters: each patient's first scan; Obuchowski's variance is DeLong's (pROC)
s1 <- w[w$first_scan == 1, ]
o <- obuchowski_diff(s1)
ra <- roc(s1$label, s1$score_a, levels = c(0, 1), direction = "<", quiet = TRUE)
rb <- roc(s1$label, s1$score_b, levels = c(0, 1), direction = "<", quiet = TRUE)
tt <- roc.test(ra, rb, paired = TRUE, method = "delong")
add("auc_singletons", "overall", "overall",
    c(auc_a = o$auc_a, auc_b = o$auc_b, n_clusters = o$I, repeats = o$repeats, var = o$var,
      proc_z = unname(tt$statistic), proc_p = tt$p.value, proc_low = tt$conf.int[1],
      proc_high = tt$conf.int[2]))
write.csv(do.call(rbind, out), "tests/r/compare_cluster.csv", row.names = FALSE)
