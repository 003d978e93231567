# Reference values for the few-cluster GEE (stats/models/gee.py; issue 15 item 2).
# Regenerate from the repository root:
#   Rscript tests/r/gee_md.R        -> tests/r/gee_md.csv, tests/r/data/gee_md.csv
# R 4.2.2, geepack 1.3.9 (the data depend on R's RNG: R >= 3.6).
#
# Data: simulated here (set.seed(2)): 8 sites of 15 to 60 scans, a site random intercept
# (SD 0.7), a site-level binary covariate x (no effect) and a scan-level covariate z.
# Fit: geeglm(y ~ x + z, binomial, id = site, corstr = "exchangeable") run to convergence.
# The Mancl & DeRouen (2001) covariance is written out here from the paper with explicit
# n_i x n_i matrices on geeglm's fit, independently of clinrel's closed form:
#   V_i = phi A_i^(1/2) R(alpha) A_i^(1/2),  D_i = A_i X_i,  B = sum_i D_i' V_i^-1 D_i,
#   H_ii = D_i B^-1 D_i' V_i^-1,  U_i = D_i' V_i^-1 (I - H_ii)^-1 (y_i - mu_i),
#   V_MD = B^-1 (sum_i U_i U_i') B^-1.
# Tests: t with df = G - p_between (p_between: columns of the model matrix constant within
# every site; here the intercept and x, so df = 6); the plain sandwich is geepack's.
# Long format: quantity, term, value.
suppressMessages(library(geepack))
options(digits = 15)
set.seed(2)
G <- 8
size <- sample(15:60, G, replace = TRUE)
site <- rep(sprintf("s%d", 1:G), size)
x <- rep(rep(0:1, length.out = G), size)
z <- rnorm(sum(size))
b <- rep(rnorm(G, 0, 0.7), size)
y <- rbinom(sum(size), 1, plogis(0.4 + 0.8 * z + b))
d <- data.frame(case_id = seq_along(y), site = site, x = x, z = z, y = y)
write.csv(d, "tests/r/data/gee_md.csv", row.names = FALSE)

g <- geeglm(y ~ x + z, family = binomial, data = d, id = factor(site), corstr = "exchangeable",
            control = geese.control(epsilon = 1e-12, maxit = 100))
X <- model.matrix(g); beta <- coef(g); alpha <- g$geese$alpha; phi <- g$geese$gamma
mu <- as.vector(plogis(X %*% beta)); a <- mu * (1 - mu)
parts <- list(); B <- matrix(0, ncol(X), ncol(X))
for (s in unique(d$site)) {
  i <- which(d$site == s); n <- length(i)
  R <- (1 - alpha) * diag(n) + alpha
  V <- phi * diag(sqrt(a[i]), n) %*% R %*% diag(sqrt(a[i]), n)
  D <- a[i] * X[i, , drop = FALSE]
  Vi <- solve(V)
  B <- B + t(D) %*% Vi %*% D
  parts[[s]] <- list(D = D, Vi = Vi, e = d$y[i] - mu[i])
}
Binv <- solve(B); meat <- matrix(0, ncol(X), ncol(X))
for (p in parts) {
  H <- p$D %*% Binv %*% t(p$D) %*% p$Vi
  u <- t(p$D) %*% p$Vi %*% solve(diag(nrow(H)) - H, p$e)
  meat <- meat + u %*% t(u)
}
vmd <- Binv %*% meat %*% Binv
const <- apply(X, 2, function(col) all(tapply(col, d$site, function(v) diff(range(v)) == 0)))
df <- G - sum(const)
se_md <- sqrt(diag(vmd)); se_san <- sqrt(diag(g$geese$vbeta))
nm <- sub("^\\(Intercept\\)$", "Intercept", names(beta))
out <- rbind(
  data.frame(quantity = "estimate", term = nm, value = beta),
  data.frame(quantity = "se_sandwich", term = nm, value = se_san),
  data.frame(quantity = "p_sandwich_z", term = nm, value = 2 * pnorm(-abs(beta / se_san))),
  data.frame(quantity = "se_md", term = nm, value = se_md),
  data.frame(quantity = "p_md_t", term = nm, value = 2 * pt(-abs(beta / se_md), df)),
  data.frame(quantity = "lcl_md_t", term = nm, value = beta - qt(0.975, df) * se_md),
  data.frame(quantity = "ucl_md_t", term = nm, value = beta + qt(0.975, df) * se_md),
  data.frame(quantity = "df", term = "", value = df),
  data.frame(quantity = "alpha", term = "", value = alpha))
write.csv(out, "tests/r/gee_md.csv", row.names = FALSE)
