# Reference values for stats.models (tests/test_models*.py). Regenerate with
#   Rscript tests/r/models_glmer.R      (from the repository root)
# R 4.2.2, lme4 1.1-31, geepack 1.3.9, emmeans 1.8.4-1, sandwich 3.0-2.
# Writes tests/r/models_glmer.csv (long: dataset, model, fit, quantity, term, value),
# tests/r/models_vcov.csv (fixed-effect covariances of the glmer fits, for emmeans checks)
# and the data of the R-shipped sets used (tests/r/data/models_cbpp.csv, models_ohio.csv,
# models_verbagg.csv), so R and Python read the same rows.
#
# Every fit is written twice:
#   fit "<name>"        R's default controls: what a user of R sees;
#   fit "<name>_tight"  converged controls: glmer with tolPwrss = 1e-12 and bobyqa to
#                       rhoend = 1e-10 (at the default tolPwrss = 1e-7 lme4's PIRLS stops
#                       early, so its deviance is noisy at ~1e-6 and its finite-difference
#                       Hessian, SEs and optimum inherit the noise); glm with
#                       epsilon = 1e-14 (the default 1e-8 leaves SEs ~3e-5 off); geeglm
#                       with epsilon = 1e-12 (default 1e-4).
# The tests compare with the _tight fits; the docstrings report the gap to the defaults.
suppressMessages({library(lme4); library(geepack); library(emmeans); library(sandwich)})
options(digits = 15)
out <- list(); vc <- list()
add <- function(dataset, model, fit, quantity, term, value)
  out[[length(out) + 1]] <<- data.frame(dataset = dataset, model = model, fit = fit,
                                        quantity = quantity, term = term, value = as.numeric(value))
pyname <- function(nm) {  # R coefficient names -> patsy names
  nm <- sub("^\\(Intercept\\)$", "Intercept", nm)
  nm <- sub("^log\\(tumor_size_mm\\)$", "np.log(tumor_size_mm)", nm)
  for (f in c("phase", "age_group", "sex", "race", "period", "site", "Gender", "btype", "situ"))
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
  h <- g@optinfo$derivs$Hessian  # deviance Hessian in (theta, beta): SE of the SD
  if (!is.null(h)) add(dataset, model, fitname, "theta_se", "", sqrt(diag(solve(h / 2)))[1])
  add(dataset, model, fitname, "loglik", "", logLik(g))
  re <- ranef(g, condVar = TRUE)[[1]]
  add(dataset, model, fitname, "re", rownames(re), re[, 1])
  add(dataset, model, fitname, "re_se", rownames(re), sqrt(attr(re, "postVar")[1, 1, ]))
  add(dataset, model, fitname, "se_rx", pyname(names(fixef(g))), sqrt(diag(as.matrix(vcov(g, use.hessian = FALSE)))))
}
add_em <- function(dataset, model, fitname, g, spec, vcov. = NULL) {
  em <- as.data.frame(if (is.null(vcov.)) emmeans(g, spec, type = "response")
                      else emmeans(g, spec, type = "response", vcov. = vcov.))
  lv <- as.character(em[[1]])
  add(dataset, model, fitname, "prob", lv, em$prob)
  add(dataset, model, fitname, "se", lv, em$SE)
  add(dataset, model, fitname, "lcl", lv, em$asymp.LCL)
  add(dataset, model, fitname, "ucl", lv, em$asymp.UCL)
}
CONTROLS <- list(
  list(sfx = "", glmer = glmerControl(), glm = glm.control(), gee = geese.control()),
  list(sfx = "_tight",
       glmer = glmerControl(tolPwrss = 1e-12, optimizer = "bobyqa", optCtrl = list(rhoend = 1e-10)),
       glm = glm.control(epsilon = 1e-14, maxit = 100),
       gee = geese.control(epsilon = 1e-12, maxit = 100)))

for (ctl in CONTROLS) {
  sfx <- ctl$sfx
  # ---- lme4::cbpp (binomial with trials) ----
  cb <- cbpp
  fcb <- cbind(incidence, size - incidence) ~ period
  gl <- glmer(update(fcb, . ~ . + (1 | herd)), family = binomial, data = cb, control = ctl$glmer)
  add_glmer("cbpp", "", paste0("glmer_laplace", sfx), gl)
  ga <- glmer(update(fcb, . ~ . + (1 | herd)), family = binomial, data = cb, nAGQ = 10, control = ctl$glmer)
  add_glmer("cbpp", "", paste0("glmer_agq10", sfx), ga)
  # lme4 reports nAGQ > 1 log-likelihoods without the saturated binomial term; keep it to convert
  add("cbpp", "", paste0("glmer_agq10", sfx), "saturated_loglik", "",
      sum(dbinom(cb$incidence, cb$size, cb$incidence / cb$size, log = TRUE)))
  g0 <- glm(fcb, family = binomial, data = cb, control = ctl$glm)
  add("cbpp", "", paste0("lrt_herd", sfx), "statistic", "", 2 * (logLik(gl) - logLik(g0)))
  gp <- update(gl, . ~ . - period)
  a <- anova(gl, gp)
  add("cbpp", "", paste0("lrt_period", sfx), "statistic", "", a$Chisq[2])
  add("cbpp", "", paste0("lrt_period", sfx), "df", "", a$Df[2])
  add("cbpp", "", paste0("lrt_period", sfx), "p_value", "", a[["Pr(>Chisq)"]][2])

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
    g <- glmer(update(fpos, . ~ . + (1 | site)), family = binomial, data = pos, control = ctl$glmer)
    add_glmer("benchx", m, paste0("glmer_laplace", sfx), g)
    vc[[length(vc) + 1]] <- data.frame(model = m, fit = paste0("glmer_laplace", sfx),
      row = rep(pyname(names(fixef(g))), length(fixef(g))),
      col = rep(pyname(names(fixef(g))), each = length(fixef(g))), value = as.vector(as.matrix(vcov(g))))
    if (m == "model_A") {
      g10 <- glmer(update(fpos, . ~ . + (1 | site)), family = binomial, data = pos, nAGQ = 10,
                   control = ctl$glmer)
      add_glmer("benchx", m, paste0("glmer_agq10", sfx), g10)
      add_em("benchx", m, paste0("emmeans_glmer", sfx), g, ~phase)
      add_em("benchx", m, paste0("emmeans_glmer_age", sfx), g, ~age_group)
      # likelihood-ratio tests per block (ML fits, as anova() refits)
      blocks <- list(protocol = . ~ . - phase, demographics = . ~ . - age_group - sex - race,
                     tumour = . ~ . - log(tumor_size_mm))
      for (b in names(blocks)) {
        a <- anova(g, update(g, blocks[[b]]))
        add("benchx", m, paste0("lrt_", b, sfx), "statistic", "", a$Chisq[2])
        add("benchx", m, paste0("lrt_", b, sfx), "df", "", a$Df[2])
        add("benchx", m, paste0("lrt_", b, sfx), "p_value", "", a[["Pr(>Chisq)"]][2])
      }
      # Nakagawa & Schielzeth latent-scale R2 (logit link: residual variance pi^2 / 3)
      vf <- var(as.vector(model.matrix(g) %*% fixef(g))); vr <- getME(g, "theta")^2
      add("benchx", m, paste0("r2", sfx), "marginal", "", vf / (vf + vr + pi^2 / 3))
      add("benchx", m, paste0("r2", sfx), "conditional", "", (vf + vr) / (vf + vr + pi^2 / 3))
      g0 <- glm(fpos, family = binomial, data = pos, control = ctl$glm)
      st <- as.numeric(2 * (logLik(g) - logLik(g0)))
      add("benchx", m, paste0("lrt_site", sfx), "statistic", "", st)
      add("benchx", m, paste0("lrt_site", sfx), "p_value", "", 0.5 * pchisq(st, 1, lower.tail = FALSE))
    }
    # GEE, exchangeable within site, robust SE (data sorted by site, as geepack needs)
    ge <- geeglm(fpos, family = binomial, data = pos, id = site, corstr = "exchangeable",
                 control = ctl$gee)
    add_coefs("benchx", m, paste0("geeglm", sfx), coef(ge), sqrt(diag(ge$geese$vbeta)))
    add("benchx", m, paste0("geeglm", sfx), "alpha", "", ge$geese$alpha)
    add("benchx", m, paste0("geeglm", sfx), "scale", "", ge$geese$gamma)
    # site as a fixed effect, cluster-robust SE by patient
    gf <- glm(update(fpos, . ~ . + site), family = binomial, data = pos, control = ctl$glm)
    add_coefs("benchx", m, paste0("glm_fixed", sfx), coef(gf),
              sqrt(diag(vcovCL(gf, cluster = ~patient_id, type = "HC1"))))
    add("benchx", m, paste0("glm_fixed", sfx), "se_hc0", pyname(names(coef(gf))),
        sqrt(diag(vcovCL(gf, cluster = ~patient_id, type = "HC0", cadjust = FALSE))))
    add("benchx", m, paste0("glm_fixed", sfx), "loglik", "", logLik(gf))
    if (m == "model_A") {
      add_em("benchx", m, paste0("emmeans_glm", sfx), gf, ~phase)  # model-based vcov
      add_em("benchx", m, paste0("emmeans_glm_cl", sfx), gf, ~phase,  # cluster-robust vcov
             vcov. = vcovCL(gf, cluster = ~patient_id, type = "HC1"))
    }
    # negatives: correct negative calls
    neg <- d[d$model == m & d$label == 0, ]
    neg$correct <- 1 - neg$pred
    gn <- glmer(correct ~ phase + (1 | site), family = binomial, data = neg, control = ctl$glmer)
    add_glmer("benchx_neg", m, paste0("glmer_laplace", sfx), gn)
  }

  # ---- geepack::ohio (wheeze, 537 children x 4 ages) ----
  data(ohio, package = "geepack")
  oh <- ohio; oh$idf <- factor(oh$id)
  fo <- resp ~ age + smoke
  go <- glmer(resp ~ age + smoke + (1 | idf), family = binomial, data = oh, control = ctl$glmer)
  add_glmer("ohio", "", paste0("glmer_laplace", sfx), go)
  go10 <- glmer(resp ~ age + smoke + (1 | idf), family = binomial, data = oh, nAGQ = 10,
                control = ctl$glmer)
  add_glmer("ohio", "", paste0("glmer_agq10", sfx), go10)
  geo <- geeglm(fo, family = binomial, data = oh, id = id, corstr = "exchangeable", control = ctl$gee)
  add_coefs("ohio", "", paste0("geeglm", sfx), coef(geo), sqrt(diag(geo$geese$vbeta)))
  add("ohio", "", paste0("geeglm", sfx), "alpha", "", geo$geese$alpha)
  add("ohio", "", paste0("geeglm", sfx), "scale", "", geo$geese$gamma)
  gfo <- glm(fo, family = binomial, data = oh, control = ctl$glm)
  add_coefs("ohio", "", paste0("glm_cluster", sfx), coef(gfo),
            sqrt(diag(vcovCL(gfo, cluster = ~id, type = "HC1"))))
  add("ohio", "", paste0("glm_cluster", sfx), "loglik", "", logLik(gfo))

  # ---- lme4::VerbAgg (r2 == "Y", 316 respondents x 24 items) ----
  v <- VerbAgg; v$y <- as.integer(v$r2 == "Y")
  v$Gender <- factor(v$Gender, levels = c("M", "F"))
  v$btype <- factor(v$btype, levels = c("shout", "curse", "scold"))
  v$situ <- factor(v$situ, levels = c("other", "self"))
  fv <- y ~ Anger + Gender + btype + situ
  gv <- glmer(update(fv, . ~ . + (1 | id)), family = binomial, data = v, control = ctl$glmer)
  add_glmer("verbagg", "", paste0("glmer_laplace", sfx), gv)
  add_em("verbagg", "", paste0("emmeans_glmer", sfx), gv, ~btype)
  vs <- v[order(v$id), ]
  gev <- geeglm(fv, family = binomial, data = vs, id = id, corstr = "exchangeable", control = ctl$gee)
  add_coefs("verbagg", "", paste0("geeglm", sfx), coef(gev), sqrt(diag(gev$geese$vbeta)))
  add("verbagg", "", paste0("geeglm", sfx), "alpha", "", gev$geese$alpha)
  add("verbagg", "", paste0("geeglm", sfx), "scale", "", gev$geese$gamma)
  gfv <- glm(fv, family = binomial, data = v, control = ctl$glm)
  st <- as.numeric(2 * (logLik(gv) - logLik(gfv)))
  add("verbagg", "", paste0("lrt_id", sfx), "statistic", "", st)
  for (b in c("situ", "btype")) {
    a <- anova(gv, update(gv, as.formula(paste(". ~ . -", b))))
    add("verbagg", "", paste0("lrt_", b, sfx), "statistic", "", a$Chisq[2])
    add("verbagg", "", paste0("lrt_", b, sfx), "df", "", a$Df[2])
  }
}
write.csv(cbpp, "tests/r/data/models_cbpp.csv", row.names = FALSE)
write.csv(ohio, "tests/r/data/models_ohio.csv", row.names = FALSE)
write.csv(v[, c("y", "Anger", "Gender", "btype", "situ", "id")], "tests/r/data/models_verbagg.csv",
          row.names = FALSE)
write.csv(do.call(rbind, out), "tests/r/models_glmer.csv", row.names = FALSE)
write.csv(do.call(rbind, vc), "tests/r/models_vcov.csv", row.names = FALSE)
