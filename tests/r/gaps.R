# Reference values for stats.decompose_gap (tests/stats/test_gaps.py). Regenerate with
#   .venv/bin/python tests/r/gaps_data.py && Rscript tests/r/gaps.R
# (from the repository root). R 4.2.2, lme4 1.1-31.
# Reads tests/r/data/gaps_cases.csv (positive scans; group c = comparison, r = reference);
# fits, converged:
#   glm:   glm(pred ~ group + phase + log(tumor_size_mm) + site, binomial,
#              control = glm.control(epsilon = 1e-14, maxit = 100))
#   glmer: glmer(pred ~ group + phase + log(tumor_size_mm) + (1 | site), binomial,
#                glmerControl(tolPwrss = 1e-12, optimizer = "bobyqa",
#                             optCtrl = list(rhoend = 1e-10)))
#   glmer_within: the same with + share, each site's share of group c (Mundlak)
# and writes the decomposition written out by hand (tests/r/gaps.csv: fit, estimand, value):
#   gap_total = mean(pred | c) - mean(pred | r); each row's linear predictor split into
#   intercept, group, phase, log size and site parts (model.matrix columns x coefficients;
#   the glmer's site part its conditional mode, ranef); F_r(x) = plogis with the group part
#   set to the reference's; p_counterfactual = mean_c F_r; gap_case_mix = mean_c F_r -
#   mean_r F_r; gap_conditional = gap_total - gap_case_mix; model_residual =
#   (Y_c - mean_c F_c) - (Y_r - mean_r F_r); for every coalition S of {phase, log size,
#   site} v(S) = the mean over ALL (reference, comparison) pairs of plogis(reference's
#   intercept + group + parts outside S + the comparison's parts in S) (outer(), no
#   grouping into patterns), and the Shapley values from the 2^3 v(S).
suppressMessages(library(lme4))
options(digits = 15)
d <- read.csv("tests/r/data/gaps_cases.csv", stringsAsFactors = FALSE)
d$group <- factor(d$group, levels = c("c", "r"))
out <- list()
decompose <- function(fitname, parts) {
  # parts: n x 5 matrix (intercept, group, phase, size, site)
  eta <- rowSums(parts)
  R <- which(d$group == "r"); C <- which(d$group == "c")
  gam_r <- parts[R[1], 2]
  yc <- mean(d$pred[C]); yr <- mean(d$pred[R])
  F_rr <- mean(plogis(eta[R]))
  F_cc <- mean(plogis(eta[C]))
  F_rc <- mean(plogis(eta[C] - parts[C, 2] + gam_r))
  cov <- 3:5
  v <- function(S) {
    a <- parts[R, 1] + gam_r + rowSums(parts[R, setdiff(cov, S), drop = FALSE])
    c <- rowSums(parts[C, S, drop = FALSE])
    mean(plogis(outer(a, c, "+")))
  }
  k <- 3
  sets <- list(integer(0), 3L, 4L, 5L, c(3L, 4L), c(3L, 5L), c(4L, 5L), c(3L, 4L, 5L))
  val <- sapply(sets, v)
  key <- sapply(sets, function(S) paste(sort(S), collapse = ","))
  shap <- sapply(cov, function(j) {
    tot <- 0
    for (S in sets) if (!(j %in% S)) {
      s <- length(S)
      wgt <- factorial(s) * factorial(k - s - 1) / factorial(k)
      tot <- tot + wgt * (val[key == paste(sort(c(S, j)), collapse = ",")] -
                          val[key == paste(sort(S), collapse = ",")])
    }
    tot
  })
  total <- yc - yr
  cm <- F_rc - F_rr
  vals <- c(gap_total = total, gap_case_mix = cm, gap_conditional = total - cm,
            "contribution:phase" = shap[1], "contribution:np.log(tumor_size_mm)" = shap[2],
            "contribution:site" = shap[3], p_counterfactual = F_rc,
            model_residual = (yc - F_cc) - (yr - F_rr), v_empty = val[1], v_full = val[8])
  for (n in names(vals)) out[[length(out) + 1]] <<- data.frame(fit = fitname, estimand = n,
                                                              value = unname(vals[n]))
}
g <- glm(pred ~ group + phase + log(tumor_size_mm) + site, family = binomial, data = d,
         control = glm.control(epsilon = 1e-14, maxit = 100))
X <- model.matrix(g); b <- coef(g)
piece <- function(pattern) {
  cols <- grep(pattern, colnames(X))
  as.vector(X[, cols, drop = FALSE] %*% b[cols])
}
decompose("glm", cbind(b[1], piece("^group"), piece("^phase"), piece("tumor_size"),
                       piece("^site")))
m <- glmer(pred ~ group + phase + log(tumor_size_mm) + (1 | site), family = binomial,
           data = d, control = glmerControl(tolPwrss = 1e-12, optimizer = "bobyqa",
                                            optCtrl = list(rhoend = 1e-10)))
X <- getME(m, "X"); b <- fixef(m)
re <- ranef(m)$site
decompose("glmer", cbind(b[1], piece("^group"), piece("^phase"), piece("tumor_size"),
                         re[d$site, 1]))
# the within-site GLMM (decompose_gap's default, within_site = TRUE): each site's share of
# group c among the positives as a site-level covariate (Mundlak); the site's part of the
# linear predictor is its conditional mode plus the share's term
d$share <- ave(as.numeric(d$group == "c"), d$site)
mw <- glmer(pred ~ group + phase + log(tumor_size_mm) + share + (1 | site), family = binomial,
            data = d, control = glmerControl(tolPwrss = 1e-12, optimizer = "bobyqa",
                                             optCtrl = list(rhoend = 1e-10)))
X <- getME(mw, "X"); b <- fixef(mw)
rew <- ranef(mw)$site
decompose("glmer_within", cbind(b[1], piece("^group"), piece("^phase"), piece("tumor_size"),
                                rew[d$site, 1] + piece("^share")))
res <- do.call(rbind, out)
res <- rbind(res, data.frame(fit = "glmer", estimand = "site_sd",
                             value = as.data.frame(VarCorr(m))$sdcor[1]),
             data.frame(fit = "glmer_within", estimand = "site_sd",
                        value = as.data.frame(VarCorr(mw))$sdcor[1]))
write.csv(res, "tests/r/gaps.csv", row.names = FALSE)
print(res)
