# Reference values for Cohen's kappa with a cluster-aware standard error:
# stats.analysis.metadata.kappa_interval(a, b, cluster = patient) (issue 15: the
# metadata agreement's kappa with repeated scans of one patient).
# Regenerate from the repository root:
#   Rscript tests/r/kappa_cluster.R -> tests/r/kappa_cluster.csv,
#                                      tests/r/data/kappa_cluster.csv
# R 4.2.2, survey 4.1-1 (the data depend on R's RNG: R >= 3.6).
#
# Data (set.seed(2003)), four data sets (column `set`), each: patients with 1 to 4
# scans (probabilities 0.4, 0.3, 0.2, 0.1), a true value per scan, and two raters
# (extractors) a and b. A patient has a propensity to be misread (shared by the raters,
# so disagreements cluster within patients):
#   * "three": 90 patients, three categories (venous 0.5, arterial 0.3, delayed 0.2);
#   * "two": 60 patients, two categories;
#   * "unbalanced": 70 patients, four categories, rater b never writes "d" (a category
#     only one rater uses) and misreads more often;
#   * "few": 8 patients, two categories (few clusters).
# Columns: set, case_id, patient_id, a, b.
#
# Per set, computed here from the definitions (not from clinrel): n, n_clusters,
# kappa = (po - pe) / (1 - pe) from the a x b table, and its SE by the delta method over
# clusters: svycontrast of the kappa expression in the category shares over
# svymean(~o + A_k + B_k, svydesign(ids = ~patient_id, data = rows)), o the agreement
# indicator, A_k / B_k the indicators of a / b in category k (survey's with-replacement
# linearization, factor C / (C - 1)), and the 90% interval
# confint(svycontrast(...), level = 0.9, df = degf(design)) (a t reference on C - 1 df).
suppressPackageStartupMessages(library(survey))
set.seed(2003)

make_set <- function(name, n_pat, cats, probs, err_a, err_b, drop_b = NULL) {
  m <- sample(1:4, n_pat, replace = TRUE, prob = c(0.4, 0.3, 0.2, 0.1))
  pid <- rep(seq_len(n_pat), m)
  prop <- plogis(qlogis(0.15) + rnorm(n_pat, 0, 1.5))[pid]
  truth <- sample(cats, length(pid), replace = TRUE, prob = probs)
  misread <- function(rate, allowed) {
    wrong <- runif(length(pid)) < rate * prop / 0.15 * 0.5
    alt <- sample(allowed, length(pid), replace = TRUE)
    ifelse(wrong, alt, truth)
  }
  a <- misread(err_a, cats)
  b_cats <- setdiff(cats, drop_b)
  b <- misread(err_b, b_cats)
  if (!is.null(drop_b)) b[b %in% drop_b] <- sample(b_cats, sum(b %in% drop_b), replace = TRUE)
  data.frame(set = name, case_id = sprintf("%s-%03d", name, seq_along(pid)),
             patient_id = sprintf("%s-P%03d", name, pid), a = a, b = b,
             stringsAsFactors = FALSE)
}

data <- rbind(
  make_set("three", 90, c("venous", "arterial", "delayed"), c(0.5, 0.3, 0.2), 0.5, 0.6),
  make_set("two", 60, c("F", "M"), c(0.5, 0.5), 0.6, 0.6),
  make_set("unbalanced", 70, c("a", "b", "c", "d"), c(0.4, 0.3, 0.2, 0.1), 0.4, 0.9,
           drop_b = "d"),
  make_set("few", 8, c("F", "M"), c(0.5, 0.5), 0.8, 0.8))
write.csv(data, "tests/r/data/kappa_cluster.csv", row.names = FALSE)

one <- function(d) {
  cats <- sort(union(d$a, d$b))
  K <- length(cats)
  d$o <- as.numeric(d$a == d$b)
  for (k in seq_len(K)) {
    d[[paste0("A", k)]] <- as.numeric(d$a == cats[k])
    d[[paste0("B", k)]] <- as.numeric(d$b == cats[k])
  }
  vars <- c("o", paste0("A", seq_len(K)), paste0("B", seq_len(K)))
  des <- svydesign(ids = ~patient_id, data = d)
  est <- svymean(as.formula(paste("~", paste(vars, collapse = " + "))), des)
  pe <- paste(sprintf("A%d * B%d", seq_len(K), seq_len(K)), collapse = " + ")
  expr <- parse(text = sprintf("(o - (%s)) / (1 - (%s))", pe, pe))[[1]]
  con <- svycontrast(est, expr)
  tab <- table(factor(d$a, cats), factor(d$b, cats))
  n <- sum(tab)
  po <- sum(diag(tab)) / n
  pe_v <- sum(rowSums(tab) * colSums(tab)) / n^2
  ci <- confint(con, level = 0.9, df = degf(des))
  data.frame(set = d$set[1], n = n, n_clusters = length(unique(d$patient_id)),
             kappa = (po - pe_v) / (1 - pe_v), kappa_svy = as.numeric(coef(con)),
             std_error = as.numeric(SE(con)), df = degf(des),
             conf_low_90 = ci[1, 1], conf_high_90 = ci[1, 2])
}
ref <- do.call(rbind, lapply(split(data, data$set), one))
write.csv(ref, "tests/r/kappa_cluster.csv", row.names = FALSE)
print(ref, digits = 15)
