# Reference values for stats.models (tests/test_models*.py). Regenerate with
#   Rscript tests/r/models_glmer.R      (from the repository root)
# R 4.2.2, lme4 1.1-31, geepack 1.3.9, emmeans 1.8.4-1, sandwich 3.0-2.
# Writes tests/r/models_glmer.csv (long: dataset, model, fit, quantity, term, value) and
# tests/r/models_vcov.csv (fixed-effect covariances of the glmer fits, for emmeans checks).
suppressMessages({library(lme4); library(geepack); library(emmeans); library(sandwich)})
options(digits = 15)
out <- list(); vc <- list()
add <- function(dataset, model, fit, quantity, term, value)
  out[[length(out) + 1]] <<- data.frame(dataset = dataset, model = model, fit = fit,
                                        quantity = quantity, term = term, value = as.numeric(value))
pyname <- function(nm) {  # R coefficient names -> patsy names
  nm <- sub("^\\(Intercept\\)$", "Intercept", nm)
  nm <- sub("^log\\(tumor_size_mm\\)$", "np.log(tumor_size_mm)", nm)
  for (f in c("phase", "age_group", "sex", "race", "period", "site"))
    nm <- ifelse(startsWith(nm, f) & !startsWith(nm, "np."), sub(paste0("^", f), paste0(f, "[T."), nm), nm)
  ifelse(grepl("\\[T\\.", nm), paste0(nm, "]"), nm)
}
add_coefs <- function(dataset, model, fit, est, se) {
  add(dataset, model, fit, "estimate", pyname(names(est)), est)
  add(dataset, model, fit, "std_error", pyname(names(est)), se)
}
add_glmer <- function(dataset, model, fitname, g) {
  add_coefs(dataset, model, fitname, fixef(g), sqrt(diag(as.matrix(vcov(g)))))
  add(dataset, model, fitname, "theta", "", getME(g, "theta"))
  add(dataset, model, fitname, "loglik", "", logLik(g))
  re <- ranef(g, condVar = TRUE)[[1]]
  add(dataset, model, fitname, "re", rownames(re), re[, 1])
  add(dataset, model, fitname, "re_se", rownames(re), sqrt(attr(re, "postVar")[1, 1, ]))
  add(dataset, model, fitname, "se_rx", pyname(names(fixef(g))), sqrt(diag(as.matrix(vcov(g, use.hessian = FALSE)))))
}

# ---- lme4::cbpp (binomial with trials) ----
cb <- cbpp
gl <- glmer(cbind(incidence, size - incidence) ~ period + (1 | herd), family = binomial, data = cb)
add_glmer("cbpp", "", "glmer_laplace", gl)
ga <- glmer(cbind(incidence, size - incidence) ~ period + (1 | herd), family = binomial, data = cb, nAGQ = 10)
add_glmer("cbpp", "", "glmer_agq10", ga)
# lme4 reports nAGQ > 1 log-likelihoods without the saturated binomial term; keep it to convert
add("cbpp", "", "glmer_agq10", "saturated_loglik", "",
    sum(dbinom(cb$incidence, cb$size, cb$incidence / cb$size, log = TRUE)))
g0 <- glm(cbind(incidence, size - incidence) ~ period, family = binomial, data = cb)
add("cbpp", "", "lrt_herd", "statistic", "", 2 * (logLik(gl) - logLik(g0)))
gp <- glmer(cbind(incidence, size - incidence) ~ 1 + (1 | herd), family = binomial, data = cb)
a <- anova(gl, gp)
add("cbpp", "", "lrt_period", "statistic", "", a$Chisq[2]); add("cbpp", "", "lrt_period", "df", "", a$Df[2])
add("cbpp", "", "lrt_period", "p_value", "", a[["Pr(>Chisq)"]][2])

# ---- simulator (stats.simulate.benchx_cohort, tests/r/data/models_benchx.csv) ----
d <- read.csv("tests/r/data/models_benchx.csv", stringsAsFactors = FALSE)
d$phase <- factor(d$phase, levels = c("venous", "arterial", "delayed", "non_contrast"))
d$age_group <- factor(d$age_group, levels = c("<40", "40-59", "60-74", "75+"))
d$sex <- factor(d$sex, levels = c("F", "M"))
d$race <- factor(d$race, levels = c("White", "Black", "Asian", "Other", "Unknown"))
d$site <- factor(d$site)
fpos <- detected ~ phase + age_group + sex + race + log(tumor_size_mm)
for (m in sort(unique(d$model))) {
  pos <- d[d$model == m & d$label == 1, ]
  pos$detected <- pos$pred
  pos <- pos[order(pos$site), ]
  g <- glmer(update(fpos, . ~ . + (1 | site)), family = binomial, data = pos)
  add_glmer("benchx", m, "glmer_laplace", g)
  vc[[length(vc) + 1]] <- data.frame(model = m, fit = "glmer_laplace",
    row = rep(pyname(names(fixef(g))), length(fixef(g))),
    col = rep(pyname(names(fixef(g))), each = length(fixef(g))), value = as.vector(as.matrix(vcov(g))))
  if (m == "model_A") {
    g10 <- glmer(update(fpos, . ~ . + (1 | site)), family = binomial, data = pos, nAGQ = 10)
    add_glmer("benchx", m, "glmer_agq10", g10)
    em <- as.data.frame(emmeans(g, ~phase, type = "response"))
    add("benchx", m, "emmeans_glmer", "prob", as.character(em$phase), em$prob)
    add("benchx", m, "emmeans_glmer", "se", as.character(em$phase), em$SE)
    add("benchx", m, "emmeans_glmer", "lcl", as.character(em$phase), em$asymp.LCL)
    add("benchx", m, "emmeans_glmer", "ucl", as.character(em$phase), em$asymp.UCL)
    em <- as.data.frame(emmeans(g, ~age_group, type = "response"))
    add("benchx", m, "emmeans_glmer_age", "prob", as.character(em$age_group), em$prob)
    add("benchx", m, "emmeans_glmer_age", "se", as.character(em$age_group), em$SE)
    # likelihood-ratio tests per block (ML fits, as anova() refits)
    blocks <- list(protocol = . ~ . - phase, demographics = . ~ . - age_group - sex - race,
                   tumour = . ~ . - log(tumor_size_mm))
    for (b in names(blocks)) {
      gr <- update(g, blocks[[b]])
      a <- anova(g, gr)
      add("benchx", m, paste0("lrt_", b), "statistic", "", a$Chisq[2])
      add("benchx", m, paste0("lrt_", b), "df", "", a$Df[2])
      add("benchx", m, paste0("lrt_", b), "p_value", "", a[["Pr(>Chisq)"]][2])
    }
    # Nakagawa & Schielzeth latent-scale R2 (logit link: residual variance pi^2 / 3)
    vf <- var(as.vector(model.matrix(g) %*% fixef(g))); vr <- getME(g, "theta")^2
    add("benchx", m, "r2", "marginal", "", vf / (vf + vr + pi^2 / 3))
    add("benchx", m, "r2", "conditional", "", (vf + vr) / (vf + vr + pi^2 / 3))
    g0 <- glm(fpos, family = binomial, data = pos)
    st <- as.numeric(2 * (logLik(g) - logLik(g0)))
    add("benchx", m, "lrt_site", "statistic", "", st)
    add("benchx", m, "lrt_site", "p_value", "", 0.5 * pchisq(st, 1, lower.tail = FALSE))
  }
  # GEE, exchangeable within site, robust SE (data sorted by site, as geepack needs)
  ge <- geeglm(fpos, family = binomial, data = pos, id = site, corstr = "exchangeable")
  add_coefs("benchx", m, "geeglm", coef(ge), sqrt(diag(ge$geese$vbeta)))
  add("benchx", m, "geeglm", "alpha", "", ge$geese$alpha)
  add("benchx", m, "geeglm", "scale", "", ge$geese$gamma)
  # site as a fixed effect, cluster-robust SE by patient
  gf <- glm(update(fpos, . ~ . + site), family = binomial, data = pos)
  add_coefs("benchx", m, "glm_fixed", coef(gf), sqrt(diag(vcovCL(gf, cluster = ~patient_id, type = "HC1"))))
  add("benchx", m, "glm_fixed", "se_hc0", pyname(names(coef(gf))),
      sqrt(diag(vcovCL(gf, cluster = ~patient_id, type = "HC0", cadjust = FALSE))))
  add("benchx", m, "glm_fixed", "loglik", "", logLik(gf))
  if (m == "model_A") {
    em <- as.data.frame(emmeans(gf, ~phase, type = "response"))  # model-based vcov
    add("benchx", m, "emmeans_glm", "prob", as.character(em$phase), em$prob)
    add("benchx", m, "emmeans_glm", "se", as.character(em$phase), em$SE)
    add("benchx", m, "emmeans_glm", "lcl", as.character(em$phase), em$asymp.LCL)
    add("benchx", m, "emmeans_glm", "ucl", as.character(em$phase), em$asymp.UCL)
  }
  # negatives: correct negative calls
  neg <- d[d$model == m & d$label == 0, ]
  neg$correct <- 1 - neg$pred
  gn <- glmer(correct ~ phase + (1 | site), family = binomial, data = neg)
  add_glmer("benchx_neg", m, "glmer_laplace", gn)
}
write.csv(do.call(rbind, out), "tests/r/models_glmer.csv", row.names = FALSE)
write.csv(do.call(rbind, vc), "tests/r/models_vcov.csv", row.names = FALSE)
