# Reference values for stats/intervals.py (run from the repo root):
#   Rscript tests/r/intervals.R        -> tests/r/intervals.csv
# R 4.x, pROC 1.18 (Debian r-cran-proc). Long format: test, id, quantity, value.
suppressMessages(library(pROC))
out <- list()
add <- function(test, id, quantity, value) {
  out[[length(out) + 1]] <<- data.frame(test = test, id = id, quantity = quantity,
                                        value = sprintf("%.17g", value))
}

# --- proportions: Wilson (prop.test, no continuity correction), Clopper-Pearson, Jeffreys
grid <- expand.grid(x = c(0, 1, 2, 5, 7, 15), n = c(1, 7, 15, 40, 250))
grid <- unique(rbind(grid[grid$x <= grid$n, ], data.frame(x = c(0, 250, 123), n = c(250, 250, 250))))
for (lvl in c(0.9, 0.95, 0.99)) {
  for (i in seq_len(nrow(grid))) {
    x <- grid$x[i]; n <- grid$n[i]
    id <- sprintf("%d/%d@%g", x, n, lvl)
    w <- suppressWarnings(prop.test(x, n, correct = FALSE, conf.level = lvl)$conf.int)
    cp <- binom.test(x, n, conf.level = lvl)$conf.int
    a <- 1 - lvl
    jl <- if (x == 0) 0 else qbeta(a / 2, x + 0.5, n - x + 0.5)
    jh <- if (x == n) 1 else qbeta(1 - a / 2, x + 0.5, n - x + 0.5)
    add("wilson", id, c("low", "high"), w)
    add("clopper-pearson", id, c("low", "high"), cp)
    add("jeffreys", id, c("low", "high"), c(jl, jh))
  }
}

# --- exact McNemar: binom.test on the discordant pairs
for (bc in list(c(0, 0), c(3, 0), c(9, 2), c(10, 10), c(15, 27), c(1, 40))) {
  p <- if (sum(bc) == 0) 1 else binom.test(bc[1], sum(bc), 0.5)$p.value
  add("mcnemar", sprintf("%d/%d", bc[1], bc[2]), "p", p)
}

# --- Newcombe hybrid score intervals recomputed from prop.test Wilson limits
wil <- function(x, n) suppressWarnings(prop.test(x, n, correct = FALSE)$conf.int)
for (u in list(c(56, 70, 48, 80), c(9, 10, 3, 10), c(6, 7, 2, 7), c(5, 56, 0, 29), c(0, 10, 0, 20))) {
  p1 <- u[1] / u[2]; p2 <- u[3] / u[4]; w1 <- wil(u[1], u[2]); w2 <- wil(u[3], u[4])
  d <- p1 - p2
  add("newcombe-unpaired", paste(u, collapse = "/"), c("estimate", "low", "high"),
      c(d, d - sqrt((p1 - w1[1])^2 + (w2[2] - p2)^2), d + sqrt((w1[2] - p1)^2 + (p2 - w2[1])^2)))
}
# Paired (Newcombe 1998b, Stat Med 17:2635-2650, method 10), written from the paper: phi is
# continuity corrected, (A - N/2) / sqrt(.) when A = ad - bc > N/2, 0 when 0 <= A <= N/2,
# A / sqrt(.) when A < 0. (1, 1, 7, 12) is Bentur et al. and (59, 6, 16, 80) Cavo et al. in
# Fagerland, Lydersen & Laake (2017) ch. 8; (3, 2, 2, 3) has 0 < A <= N/2, (1, 6, 5, 0) A < 0.
newcombe_phi <- function(a, b, c, d) {
  n <- a + b + c + d; den <- sqrt((a + b) * (c + d) * (a + c) * (b + d)); A <- a * d - b * c
  if (den == 0) return(0)
  if (A > n / 2) (A - n / 2) / den else if (A >= 0) 0 else A / den
}
for (t in list(c(12, 9, 2, 21), c(5, 5, 0, 0), c(0, 2, 1, 41), c(10, 0, 0, 5), c(30, 6, 11, 53),
               c(1, 1, 7, 12), c(59, 6, 16, 80), c(3, 2, 2, 3), c(1, 6, 5, 0), c(2, 1, 0, 1))) {
  a <- t[1]; b <- t[2]; c <- t[3]; d <- t[4]; n <- sum(t)
  p1 <- (a + b) / n; p2 <- (a + c) / n; w1 <- wil(a + b, n); w2 <- wil(a + c, n)
  phi <- newcombe_phi(a, b, c, d)
  add("newcombe-phi", paste(t, collapse = "/"), "phi", phi)
  D <- p1 - p2
  lo <- D - sqrt((p1 - w1[1])^2 - 2 * phi * (p1 - w1[1]) * (w2[2] - p2) + (w2[2] - p2)^2)
  hi <- D + sqrt((w1[2] - p1)^2 - 2 * phi * (w1[2] - p1) * (p2 - w2[1]) + (p2 - w2[1])^2)
  add("newcombe-paired", paste(t, collapse = "/"), c("estimate", "low", "high"), c(D, lo, hi))
}

# --- pROC on aSAH: auc, ci.auc (DeLong), roc.test (paired DeLong)
data(aSAH)
y <- as.integer(aSAH$outcome == "Poor")
markers <- list(s100b = aSAH$s100b, ndka = aSAH$ndka, wfns = as.numeric(aSAH$wfns))
rocs <- lapply(markers, function(s) roc(y, s, levels = c(0, 1), direction = "<", quiet = TRUE))
for (nm in names(rocs)) {
  for (lvl in c(0.9, 0.95)) {
    ci <- ci.auc(rocs[[nm]], method = "delong", conf.level = lvl)
    add("auc-asah", sprintf("%s@%g", nm, lvl), c("low", "auc", "high"), as.numeric(ci))
  }
  add("auc-asah", nm, "var", var(rocs[[nm]], method = "delong"))
  # logit-scale Wald interval from pROC's AUC and DeLong variance (delta method)
  a <- as.numeric(auc(rocs[[nm]])); v <- var(rocs[[nm]], method = "delong")
  lg <- plogis(qlogis(a) + c(-1, 1) * qnorm(0.975) * sqrt(v) / (a * (1 - a)))
  add("auc-logit-asah", nm, c("low", "high"), lg)
}
pairs <- list(c("s100b", "ndka"), c("s100b", "wfns"), c("ndka", "wfns"))
for (p in pairs) {
  tt <- roc.test(rocs[[p[1]]], rocs[[p[2]]], paired = TRUE, method = "delong")
  add("delong-asah", paste(p, collapse = "-"), c("z", "p", "low", "high"),
      c(tt$statistic, tt$p.value, tt$conf.int))
}
write.csv(data.frame(y = y, s100b = aSAH$s100b, ndka = aSAH$ndka, wfns = markers$wfns),
          "tests/r/data/detection_asah.csv", row.names = FALSE)

# --- pROC on simulator data (tests/r/data/detection_sim.csv): per model and per phase
sim <- read.csv("tests/r/data/detection_sim.csv")
for (m in unique(sim$model)) {
  for (ph in c("overall", unique(sim$phase))) {
    d <- if (ph == "overall") sim[sim$model == m, ] else sim[sim$model == m & sim$phase == ph, ]
    if (length(unique(d$label)) < 2) next
    r <- roc(d$label, d$score, levels = c(0, 1), direction = "<", quiet = TRUE)
    ci <- ci.auc(r, method = "delong")
    add("auc-sim", paste(m, ph, sep = "|"), c("low", "auc", "high", "var"),
        c(as.numeric(ci), var(r, method = "delong")))
  }
}
ms <- unique(sim$model)
for (i in 1:(length(ms) - 1)) for (j in (i + 1):length(ms)) {
  a <- sim[sim$model == ms[i], ]; b <- sim[sim$model == ms[j], ]
  b <- b[match(a$case_id, b$case_id), ]
  ra <- roc(a$label, a$score, levels = c(0, 1), direction = "<", quiet = TRUE)
  rb <- roc(b$label, b$score, levels = c(0, 1), direction = "<", quiet = TRUE)
  tt <- roc.test(ra, rb, paired = TRUE, method = "delong")
  add("delong-sim", paste(ms[i], ms[j], sep = "-"), c("z", "p", "low", "high"),
      c(tt$statistic, tt$p.value, tt$conf.int))
}
# --- two-sample proportion test (subgroup vs rest) and multiplicity adjustment
for (u in list(c(30, 50, 160, 200), c(3, 15, 170, 235), c(0, 12, 40, 60), c(12, 12, 50, 50))) {
  pt <- suppressWarnings(prop.test(c(u[1], u[3]), c(u[2], u[4]), correct = FALSE))
  add("prop-test-2", paste(u, collapse = "/"), c("chisq", "p"), c(pt$statistic, pt$p.value))
}
pv <- c(0.001, 0.04, 0.03, 0.2, 0.0125, 0.5, 0.049)
add("p-adjust", seq_along(pv), "holm", p.adjust(pv, "holm"))
add("p-adjust", seq_along(pv), "BH", p.adjust(pv, "BH"))

write.csv(do.call(rbind, out), "tests/r/intervals.csv", row.names = FALSE, quote = TRUE)
