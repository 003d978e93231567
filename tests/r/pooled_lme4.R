# Reference values for stats.pooled (tests/stats/test_pooled.py). Regenerate with
#   .venv/bin/python tests/r/pooled_data.py && Rscript tests/r/pooled_lme4.R
# (from the repository root). R 4.2.2, lme4 1.1-31.
# Reads tests/r/data/pooled_sim.csv; writes tests/r/pooled_lme4.csv (long: model,
# population, spec, fit, quantity, level, value) where, per cell of the spec,
#   pred     predict(fit, type = "response") (fixed part + conditional mode), one value
#            per cell (every row of a cell has the same prediction);
#   se_logit sqrt(a' C^-1 a), a = (x_c, theta e_c), C the joint negative Hessian of the
#            penalised log-likelihood in (beta, u) at lme4's estimates, built here from
#            getME(fit, "X"), getME(fit, "Z") and the fitted values and inverted densely:
#            an independent recomputation of the interval's variance;
#   cond_sd  ranef(fit, condVar = TRUE) postVar (the conditional-mode part alone);
# and theta (the cell SD).
# Fits: "default" glmerControl(), "tight" tolPwrss = 1e-12 and bobyqa rhoend = 1e-10.
# Populations: positives (detected = pred), negatives (correct = 1 - pred).
# Specs: site, phase (one axis: detected ~ 1 + (1 | site)) and age_group:phase
# (detected ~ age_group + phase + (1 | age_group:phase)).
suppressMessages(library(lme4))
options(digits = 15)
d <- read.csv("tests/r/data/pooled_sim.csv", stringsAsFactors = FALSE)
out <- list()
add <- function(...) out[[length(out) + 1]] <<- data.frame(...)
CONTROLS <- list(default = glmerControl(),
                 tight = glmerControl(tolPwrss = 1e-12, optimizer = "bobyqa",
                                      optCtrl = list(rhoend = 1e-10)))
SPECS <- list(site = "y ~ 1 + (1 | site)", phase = "y ~ 1 + (1 | phase)",
              "age_group:phase" = "y ~ age_group + phase + (1 | age_group:phase)")
for (m in unique(d$model)) for (pop in c("positives", "negatives")) {
  s <- d[d$model == m & d$label == (pop == "positives"), ]
  s$y <- if (pop == "positives") s$pred else 1 - s$pred
  s$cell_age_phase <- paste(s$age_group, s$phase, sep = ":")
  for (spec in names(SPECS)) for (fn in names(CONTROLS)) {
    g <- glmer(as.formula(SPECS[[spec]]), data = s, family = binomial, control = CONTROLS[[fn]])
    level <- if (spec == "age_group:phase") s$cell_age_phase else s[[spec]]
    pr <- predict(g, type = "response")
    first <- !duplicated(level)
    add(model = m, population = pop, spec = spec, fit = fn, quantity = "pred",
        level = level[first], value = pr[first])
    # joint negative Hessian in (beta, u), b = theta u
    X <- getME(g, "X"); Z <- as.matrix(getME(g, "Z")); th <- getME(g, "theta")[[1]]
    mu <- fitted(g); w <- mu * (1 - mu)
    ZL <- Z * th
    C <- rbind(cbind(crossprod(X, X * w), crossprod(X, ZL * w)),
               cbind(crossprod(ZL, X * w), crossprod(ZL, ZL * w) + diag(ncol(Z))))
    A <- cbind(X, ZL)[first, , drop = FALSE]
    se <- sqrt(rowSums((A %*% solve(C)) * A))
    add(model = m, population = pop, spec = spec, fit = fn, quantity = "se_logit",
        level = level[first], value = se)
    re <- ranef(g, condVar = TRUE)[[1]]
    add(model = m, population = pop, spec = spec, fit = fn, quantity = "cond_sd",
        level = rownames(re), value = sqrt(attr(re, "postVar")[1, 1, ]))
    add(model = m, population = pop, spec = spec, fit = fn, quantity = "theta",
        level = "", value = th)
  }
}
res <- do.call(rbind, out)
write.csv(res, "tests/r/pooled_lme4.csv", row.names = FALSE)
cat(sprintf("wrote %d rows\n", nrow(res)))
