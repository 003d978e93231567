# Reference values for the random-effects meta-analysis across sites,
# stats.site_meta_analysis (stats/meta_analysis.py; issue 32 item 4). Regenerate from
# the repository root (data: tests/r/meta_analysis_data.py):
#   Rscript tests/r/meta_analysis.R   -> tests/r/meta_analysis.csv
# R 4.2.2, metafor 3.8-1, survey 4.1-1.
#
# Part 1, tests/r/data/meta_analysis_counts.csv (dataset, site, x, n; one scan per patient):
#   dat  <- escalc(measure = "PLO", xi = x, ni = n)    # 0.5 added only to zero cells
#   fit  <- rma(yi, vi, data = dat, method = "REML", test = "knha", control = <control>)
#   pred <- predict(fit, transf = plogis)
# with control "tight" (threshold = 1e-13, maxiter = 10000: Fisher scoring run to
# convergence; where it does not converge, as on "overshoot", with stepadj = 0.5,
# metafor's remedy, recorded as quantity stepadj) and "default" (metafor's threshold
# 1e-5, maxiter 100; quantity converged = 0 and nothing else where it fails).
# Part 2, tests/r/data/meta_analysis_scans.csv (a cases table, patients with 1-4 scans):
# per estimand (sensitivity: positives, y = pred; specificity: negatives, y = 1 - pred)
# and group (overall; each phase), per site: x, n, clusters C (patients), the ratio
# variance V = SE(svymean(~y, svydesign(ids = ~patient_id, data = site rows)))^2, the
# design effect V / (p (1 - p) / n) and Korn & Graubard's effective size
#   n_eff = n (no patient repeats; or p of 0 or 1), 1 (one patient with repeats), else
#   min(n, n / deff * (qt(0.025, n - 1) / qt(0.025, C - 1))^2);
# then escalc(measure = "PLO", xi = p * n_eff, ni = n_eff) and the same rma / predict
# (control "tight"). Sites without a scan of the population are left out.
# Quantities: per site yi, vi, weight (weights(fit), percent), ci_low / ci_high
# (summary(dat, transf = plogis): the site's Wald interval on the logit, back-transformed),
# n_eff, deff (part 2); per analysis k, mu (fit$beta), se (Knapp-Hartung), tau2, se_tau2,
# i2, h2, q (QE), q_p (QEp), s2w, pred, ci_lb, ci_ub, pi_lb, pi_ub (predict, plogis).
# Long format: dataset, estimand, group, control, site, quantity, value.
suppressMessages({library(metafor); library(survey)})
options(warn = -1)   # svydesign: 'No weights or probabilities supplied'; escalc: non-integer counts
options(digits = 15)

out <- list()
add <- function(dataset, estimand, group, control, site, quantity, value) {
  out[[length(out) + 1]] <<- data.frame(dataset = dataset, estimand = estimand, group = group,
                                        control = control, site = site, quantity = quantity,
                                        value = as.numeric(value))
}
tight <- list(threshold = 1e-13, maxiter = 10000)

meta <- function(xi, ni, sites, dataset, estimand, group, control, extra = NULL) {
  dat <- escalc(measure = "PLO", xi = xi, ni = ni)
  fit <- tryCatch(rma(yi, vi, data = dat, method = "REML", test = "knha",
                      control = control$list), error = function(e) NULL)
  stepadj <- 1
  if (is.null(fit) && control$name == "default") {   # Fisher scoring did not converge
    add(dataset, estimand, group, control$name, "", "converged", 0)
    return(invisible(NULL))
  }
  if (is.null(fit)) {   # metafor's remedy: halve every Fisher step
    stepadj <- 0.5
    fit <- rma(yi, vi, data = dat, method = "REML", test = "knha",
               control = c(control$list, list(stepadj = stepadj)))
  }
  add(dataset, estimand, group, control$name, "", "stepadj", stepadj)
  pr <- predict(fit, transf = plogis)
  sm <- summary(dat, transf = plogis)
  w <- weights(fit)
  for (j in seq_along(sites)) {
    add(dataset, estimand, group, control$name, sites[j], "yi", dat$yi[j])
    add(dataset, estimand, group, control$name, sites[j], "vi", dat$vi[j])
    add(dataset, estimand, group, control$name, sites[j], "weight", w[j])
    add(dataset, estimand, group, control$name, sites[j], "ci_low", sm$ci.lb[j])
    add(dataset, estimand, group, control$name, sites[j], "ci_high", sm$ci.ub[j])
    if (!is.null(extra)) for (q in names(extra))
      add(dataset, estimand, group, control$name, sites[j], q, extra[[q]][j])
  }
  vals <- c(k = fit$k, mu = fit$beta[1], se = fit$se, tau2 = fit$tau2, se_tau2 = fit$se.tau2,
            i2 = fit$I2, h2 = fit$H2, q = fit$QE, q_p = fit$QEp, s2w = fit$s2w,
            pred = pr$pred, ci_lb = pr$ci.lb, ci_ub = pr$ci.ub, pi_lb = pr$pi.lb,
            pi_ub = pr$pi.ub)
  for (q in names(vals)) add(dataset, estimand, group, control$name, "", q, vals[[q]])
}

# ---- part 1: counts
counts <- read.csv("tests/r/data/meta_analysis_counts.csv", stringsAsFactors = FALSE)
for (ds in unique(counts$dataset)) {
  d <- counts[counts$dataset == ds, ]
  for (ctl in list(list(name = "tight", list = tight), list(name = "default", list = list())))
    meta(d$x, d$n, d$site, ds, "sensitivity", "overall", ctl)
}

# ---- part 2: scans with repeated patients (cluster-aware per-site variances)
scans <- read.csv("tests/r/data/meta_analysis_scans.csv", stringsAsFactors = FALSE)
site_counts <- function(rows) {
  sites <- sort(unique(rows$site))
  res <- data.frame(site = sites, x = NA, n = NA, n_eff = NA, deff = NA)
  for (j in seq_along(sites)) {
    r <- rows[rows$site == sites[j], ]
    n <- nrow(r); x <- sum(r$y); p <- x / n
    C <- length(unique(r$patient_id)); repeats <- C < n
    deff <- if (!repeats) 1 else NA
    if (!repeats) {
      n_eff <- n
    } else if (C == 1) {
      n_eff <- 1
    } else if (p == 0 || p == 1) {
      n_eff <- n
    } else {
      des <- svydesign(ids = ~patient_id, data = r)
      V <- SE(svymean(~y, des))^2
      deff <- as.numeric(V / (p * (1 - p) / n))
      n_eff <- min(n, n / deff * (qt(0.025, n - 1) / qt(0.025, C - 1))^2)
    }
    res[j, c("x", "n", "n_eff", "deff")] <- c(x, n, n_eff, deff)
  }
  res
}
for (est in c("sensitivity", "specificity")) {
  pop <- scans[scans$label == (est == "sensitivity"), ]
  pop$y <- if (est == "sensitivity") pop$pred else 1 - pop$pred
  for (g in c("overall", "venous", "arterial")) {
    rows <- if (g == "overall") pop else pop[pop$phase == g, ]
    sc <- site_counts(rows)
    meta(sc$x / sc$n * sc$n_eff, sc$n_eff, sc$site, "scans", est, g,
         list(name = "tight", list = tight), extra = list(n_eff = sc$n_eff, deff = sc$deff))
  }
}
res <- do.call(rbind, out)
write.csv(res, "tests/r/meta_analysis.csv", row.names = FALSE)
