# Kendall's tau-b reference values for tests/stats/test_ranking.py (stats.ranking.kendall_tau_b).
# R's cor(method = "kendall") computes tau-b (ties corrected).
# Run from the repository root:  Rscript tests/r/crs_kendall.R
set.seed(20261130)
cases <- list()
for (i in 1:12) {
  n <- sample(4:20, 1)
  k <- if (i %% 3 == 0) n else sample(2:6, 1)   # every third case has no ties
  a <- if (k == n) sample(n) else sample(k, n, replace = TRUE)
  b <- round(a + rnorm(n, sd = i / 4))
  if (i %% 4 == 0) b <- -b
  cases[[i]] <- data.frame(case = i, item = seq_len(n), a = a, b = b)
}
data <- do.call(rbind, cases)
write.csv(data, "tests/r/data/crs_kendall_data.csv", row.names = FALSE)
tau <- sapply(split(data, data$case), function(d) cor(d$a, d$b, method = "kendall"))
write.csv(data.frame(case = as.integer(names(tau)), tau_b = unname(tau)),
          "tests/r/crs_kendall.csv", row.names = FALSE)
