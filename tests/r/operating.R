# Reference values for stats/operating.py (run from the repo root):
#   Rscript tests/r/operating.R        -> tests/r/operating.csv
# R 4.x, pROC 1.18, epiR 2.0, survey 4.1 (Debian r-cran-*). Long format: test, id,
# quantity, value. Data: tests/r/data/detection_sim.csv (benchx_cohort, integer voxel
# scores with many ties, patients with 1-3 scans; written by tests/r/detection_data.py),
# tests/r/data/detection_asah.csv (pROC::aSAH, written by tests/r/intervals.R) and
# tests/r/data/operating_near_ties.csv (scores one ulp apart, written below).
suppressMessages({library(pROC); library(epiR); library(survey)})
out <- list()
add <- function(test, id, quantity, value) {
  out[[length(out) + 1]] <<- data.frame(test = test, id = id, quantity = quantity,
                                        value = sprintf("%.17g", value))
}
rocof <- function(y, s) roc(y, s, levels = c(0, 1), direction = "<", quiet = TRUE)
SPEC <- c(0, 0.5, 0.8, 0.9, 0.95, 1)        # some attained, some interpolated
SENS <- c(0, 0.5, 0.7, 0.9, 1)
curves <- function(tag, id, y, s) {
  r <- rocof(y, s)
  a <- coords(r, "all", ret = c("threshold", "specificity", "sensitivity"), transpose = FALSE)
  add(paste0(tag, "-coords"), id, paste0("threshold:", seq_len(nrow(a)) - 1), a$threshold)
  add(paste0(tag, "-coords"), id, paste0("specificity:", seq_len(nrow(a)) - 1), a$specificity)
  add(paste0(tag, "-coords"), id, paste0("sensitivity:", seq_len(nrow(a)) - 1), a$sensitivity)
  for (sp in SPEC) {
    v <- coords(r, x = sp, input = "specificity", ret = c("threshold", "sensitivity"),
                transpose = FALSE)
    add(paste0(tag, "-at-spec"), id, paste0(c("threshold@", "sensitivity@"), sp),
        c(v$threshold, v$sensitivity))
  }
  for (se in SENS) {
    v <- coords(r, x = se, input = "sensitivity", ret = c("threshold", "specificity"),
                transpose = FALSE)
    add(paste0(tag, "-at-sens"), id, paste0(c("threshold@", "specificity@"), se),
        c(v$threshold, v$specificity))
  }
  for (rg in list(c(1, 0.8), c(0.95, 0.9), c(0.915, 0.91), c(0.6, 0.3))) {
    for (focus in c("specificity", "sensitivity")) for (corr in c(FALSE, TRUE)) {
      p <- suppressWarnings(as.numeric(auc(r, partial.auc = rg, partial.auc.focus = focus,
                                           partial.auc.correct = corr)))
      add(paste0(tag, "-pauc"), id, sprintf("%s:%g-%g:%s", focus, rg[2], rg[1], corr), p)
    }
  }
  r
}

# --- ROC points, values at fixed coordinates, partial AUC: simulator data, per model and phase
sim <- read.csv("tests/r/data/detection_sim.csv")
for (m in unique(sim$model)) {
  for (ph in c("overall", unique(sim$phase))) {
    d <- if (ph == "overall") sim[sim$model == m, ] else sim[sim$model == m & sim$phase == ph, ]
    if (length(unique(d$label)) < 2) next
    curves("sim", paste(m, ph, sep = "|"), d$label, d$score)
  }
}
# --- aSAH (continuous markers, some ties)
asah <- read.csv("tests/r/data/detection_asah.csv")
for (nm in c("s100b", "ndka", "wfns")) curves("asah", nm, asah$y, asah[[nm]])
# --- scores one ulp apart: pROC's midpoint rounds onto the lower score and is moved up
near <- data.frame(y = c(0, 1, 0, 1, 1, 0, 1),
                   s = c(1, 1 + 2^-52, 1 + 2^-51, 2, 3, 3, 1e101))
writeLines(c("y,s", sprintf("%d,%.17g", near$y, near$s)), "tests/r/data/operating_near_ties.csv")
near <- read.csv("tests/r/data/operating_near_ties.csv")
invisible(curves("near", "near", near$y, near$s))

# --- unpaired DeLong: roc.test(paired = FALSE)
unp <- function(id, y1, s1, y2, s2) {
  tt <- roc.test(rocof(y1, s1), rocof(y2, s2), paired = FALSE, method = "delong")
  add("unpaired", id, c("D", "df", "p", "auc1", "auc2"),
      c(tt$statistic, tt$parameter, tt$p.value, tt$estimate))
}
for (m in unique(sim$model)) for (ph in unique(sim$phase)) {
  d <- sim[sim$model == m, ]
  a <- d[d$phase == ph, ]; b <- d[d$phase != ph, ]
  if (length(unique(a$label)) < 2) next
  unp(paste(m, ph, sep = "|"), a$label, a$score, b$label, b$score)
}
half <- seq_len(nrow(asah)) <= 60
for (nm in c("s100b", "ndka", "wfns"))
  unp(nm, asah$y[half], asah[[nm]][half], asah$y[!half], asah[[nm]][!half])

# --- likelihood ratios at threshold 50: epiR epi.tests and the Simel formula in R
simel <- function(tp, fp, fn, tn, lvl = 0.95) {
  z <- qnorm(0.5 + lvl / 2); P <- tp + fn; N <- fp + tn
  lp <- (tp / P) / (fp / N); ln <- (fn / P) / (tn / N)
  sp <- sqrt(1 / tp - 1 / P + 1 / fp - 1 / N); sn <- sqrt(1 / fn - 1 / P + 1 / tn - 1 / N)
  c(lp, exp(log(lp) - z * sp), exp(log(lp) + z * sp), ln, exp(log(ln) - z * sn),
    exp(log(ln) + z * sn))
}
q <- c("lr_pos", "lr_pos_low", "lr_pos_high", "lr_neg", "lr_neg_low", "lr_neg_high")
for (m in unique(sim$model)) for (ph in c("overall", unique(sim$phase))) {
  d <- if (ph == "overall") sim[sim$model == m, ] else sim[sim$model == m & sim$phase == ph, ]
  pr <- d$score >= 50
  tp <- sum(pr & d$label == 1); fp <- sum(pr & d$label == 0)
  fn <- sum(!pr & d$label == 1); tn <- sum(!pr & d$label == 0)
  if (min(tp, fp, fn, tn) == 0) next
  add("lr-simel", paste(m, ph, sep = "|"), q, simel(tp, fp, fn, tn))
  for (lvl in c(0.9, 0.95)) {
    e <- epi.tests(as.table(matrix(c(tp, fp, fn, tn), nrow = 2, byrow = TRUE)),
                   method = "exact", conf.level = lvl)$detail
    rows <- e[e$statistic %in% c("lr.pos", "lr.neg"), ]
    add("lr-epir", sprintf("%s|%s@%g", m, ph, lvl), q,
        c(unlist(rows[1, c("est", "lower", "upper")]), unlist(rows[2, c("est", "lower", "upper")])))
  }
}
# clustered (patients with several scans): log LR as a contrast of survey means
for (m in unique(sim$model)) {
  d <- sim[sim$model == m, ]
  pr <- d$score >= 50
  d$tp <- as.numeric(pr & d$label == 1); d$fp <- as.numeric(pr & d$label == 0)
  d$fn <- as.numeric(!pr & d$label == 1); d$tn <- as.numeric(!pr & d$label == 0)
  d$pos <- as.numeric(d$label == 1); d$neg <- as.numeric(d$label == 0)
  des <- suppressWarnings(svydesign(ids = ~patient_id, data = d))
  mm <- svymean(~tp + fp + fn + tn + pos + neg, des)
  cp <- svycontrast(mm, list(lp = quote(log(tp / pos) - log(fp / neg)),
                             ln = quote(log(fn / pos) - log(tn / neg))))
  add("lr-survey", m, c("log_lr_pos", "se_log_lr_pos", "log_lr_neg", "se_log_lr_neg"),
      c(coef(cp)[1], SE(cp)[1], coef(cp)[2], SE(cp)[2]))
}

# --- performance goals: exact one-sided binomial test and Clopper-Pearson one-sided limits
for (u in list(c(45, 50, 0.8), c(40, 50, 0.8), c(30, 50, 0.8), c(0, 12, 0.5), c(12, 12, 0.9),
               c(170, 200, 0.8), c(7, 10, 0.6))) {
  for (a in c(0.05, 0.025)) {
    g <- binom.test(u[1], u[2], u[3], alternative = "greater", conf.level = 1 - a)
    l <- binom.test(u[1], u[2], u[3], alternative = "less", conf.level = 1 - a)
    add("goal-exact", sprintf("%d/%d>%g@%g", u[1], u[2], u[3], a), c("p", "low", "high"),
        c(g$p.value, g$conf.int[1], l$conf.int[2]))
  }
}
# clustered: one-sided limits at the effective counts = svyciprop(method = "beta") at 1 - 2a
for (m in unique(sim$model)) {
  d <- sim[sim$model == m & sim$label == 1, ]
  d$hit <- as.numeric(d$score >= 50)
  ci <- svyciprop(~hit, suppressWarnings(svydesign(ids = ~patient_id, data = d)), method = "beta",
                  level = 0.9)
  add("goal-cluster", m, c("estimate", "low", "high"), c(coef(ci), attr(ci, "ci")))
}
# Farrington-Manning: restricted MLE by numerical maximisation (not the closed form)
fm <- function(x1, n1, x2, n2, delta) {
  ll <- function(q2) {
    q1 <- q2 + delta
    if (q1 <= 0 || q1 >= 1 || q2 <= 0 || q2 >= 1) return(-Inf)
    x1 * log(q1) + (n1 - x1) * log(1 - q1) + x2 * log(q2) + (n2 - x2) * log(1 - q2)
  }
  lo <- max(0, -delta) + 1e-12; hi <- min(1, 1 - delta) - 1e-12
  q2 <- optimize(ll, c(lo, hi), maximum = TRUE, tol = 1e-14)$maximum
  q1 <- q2 + delta
  z <- (x1 / n1 - x2 / n2 - delta) / sqrt(q1 * (1 - q1) / n1 + q2 * (1 - q2) / n2)
  c(q1, q2, z, pnorm(z, lower.tail = FALSE))
}
for (u in list(c(40, 50, 160, 200, -0.1), c(20, 30, 150, 200, -0.05), c(70, 80, 300, 400, 0.05),
               c(5, 12, 90, 100, -0.2), c(30, 30, 180, 200, -0.1))) {
  add("fm", paste(u, collapse = "/"), c("q1", "q2", "z", "p"), fm(u[1], u[2], u[3], u[4], u[5]))
}

write.csv(do.call(rbind, out), "tests/r/operating.csv", row.names = FALSE, quote = TRUE)
