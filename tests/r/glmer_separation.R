# Reference values for a GLMM with one separated factor level (tests/stats/test_models_edge.py).
# Regenerate with   Rscript tests/r/glmer_separation.R   (from the repository root)
# R 4.2.2, lme4 1.1-31. Writes tests/r/glmer_separation.csv (term, quantity, value).
#
# Data: tests/r/data/models_benchx.csv, model_A's reference positives, with every
# arterial-phase scan detected (complete separation of the phase level "arterial";
# reference level venous, as clinrel's fit). glmer runs to convergence (tolPwrss = 1e-12,
# bobyqa rhoend = 1e-10). Its arterial coefficient stops at a large finite value and its
# finite-difference Hessian is not positive definite, so vcov() falls back to RX. The
# quantities written:
#   estimate   fixef(g)
#   se_sub     sqrt(diag(solve(H[-a, -a] / 2)))[beta part]: the deviance Hessian in
#              (theta, beta) from g@optinfo$derivs without the arterial row and column,
#              inverted (the other parameters' covariance as the separated coefficient runs
#              off: its rows carry no information and its cross-information vanishes)
#   se_rx      R's default (the RX fallback it warns about), for information
#   theta      the site SD
suppressMessages(library(lme4))
options(digits = 15)
d <- read.csv("tests/r/data/models_benchx.csv", stringsAsFactors = FALSE)
d <- d[d$model == "model_A" & d$label == 1, ]
d$detected <- ifelse(d$phase == "arterial", 1L, d$pred)
d$phase <- factor(d$phase, levels = c("venous", "arterial", "delayed", "non_contrast"))
d$age_group <- factor(d$age_group, levels = c("<40", "40-59", "60-74", "75+"))
d$sex <- factor(d$sex, levels = c("F", "M"))
d$race <- factor(d$race, levels = c("White", "Black", "Asian", "Other", "Unknown"))
d$site <- factor(d$site)
d <- d[order(d$site), ]
ctl <- glmerControl(optimizer = "bobyqa", tolPwrss = 1e-12,
                    optCtrl = list(rhoend = 1e-10, maxfun = 1e6), check.conv.hess = "ignore",
                    check.conv.grad = "ignore")
g <- suppressWarnings(glmer(detected ~ phase + age_group + sex + race + log(tumor_size_mm) +
                              (1 | site), family = binomial, data = d, control = ctl))
pyname <- function(nm) {
  nm <- sub("^\\(Intercept\\)$", "Intercept", nm)
  nm <- sub("^log\\(tumor_size_mm\\)$", "np.log(tumor_size_mm)", nm)
  for (f in c("phase", "age_group", "sex", "race"))
    nm <- ifelse(startsWith(nm, f), sub(paste0("^", f), paste0(f, "[T."), nm), nm)
  ifelse(grepl("\\[T\\.", nm), paste0(nm, "]"), nm)
}
b <- fixef(g)
h <- g@optinfo$derivs$Hessian              # (theta, beta) order
a <- 1 + which(names(b) == "phasearterial")
v <- solve(h[-a, -a] / 2)
se_sub <- rep(NA_real_, length(b))
se_sub[-(a - 1)] <- sqrt(diag(v))[-1]
rx <- suppressWarnings(sqrt(diag(as.matrix(vcov(g)))))
out <- rbind(
  data.frame(term = pyname(names(b)), quantity = "estimate", value = as.numeric(b)),
  data.frame(term = pyname(names(b)), quantity = "se_sub", value = se_sub),
  data.frame(term = pyname(names(b)), quantity = "se_rx", value = as.numeric(rx)),
  data.frame(term = "", quantity = "theta", value = getME(g, "theta")))
write.csv(out, "tests/r/glmer_separation.csv", row.names = FALSE)
