# Reference values for stats.transport (tests/stats/test_raking.py). Regenerate with
#   .venv/bin/python tests/r/transport_data.py && Rscript tests/r/transport.R
# (from the repository root). R 4.2.2, survey 4.1-1.
# Reads tests/r/data/transport_cases.csv (scans of two models) and
# tests/r/data/transport_target.csv (the target's margins: margin, level, share); per model:
#   des <- svydesign(ids = ~patient_id, weights = ~w, data)   (w = 1: every scan once)
#   rk  <- rake(des, margins, population margins = share / sum(share) * N,
#               control = list(maxit = 1000, epsilon = 1e-12))   (to convergence)
# and for every domain (sensitivity: label 1; specificity: label 0; PPV: pred 1; NPV:
# pred 0; overall and within each phase)
#   svymean(~y, subset(rk, domain))                   -> estimate, std_error
#   svyciprop(~y, subset(rk, domain), method = "logit") -> conf_low, conf_high
#   degf(subset(rk, domain))                          -> df
#   svyglm_converged: FALSE where svyciprop's quasi-binomial svyglm warned that it did
#   not converge or gave a limit that is not finite (weights up to 27 times the mean in
#   a small domain, or a proportion of 1): its limits are then not the logit interval
#   and are not compared; hand_low / hand_high: the logit interval written out,
#   plogis(qlogis(p) -+ qt(0.975, df) SE / (p (1 - p))), for every row
#   Kish's n_eff from weights(subset) and the largest raked weight over the mean.
# Writes tests/r/transport.csv.
suppressMessages(library(survey))
options(digits = 15)
d <- read.csv("tests/r/data/transport_cases.csv", stringsAsFactors = FALSE)
tg <- read.csv("tests/r/data/transport_target.csv", stringsAsFactors = FALSE)
margins <- unique(tg$margin)
out <- list()
for (m in unique(d$model)) {
  s <- d[d$model == m, ]
  s$label <- as.character(s$label)
  s$w <- 1
  N <- nrow(s)
  des <- svydesign(ids = ~patient_id, weights = ~w, data = s)
  pm <- lapply(margins, function(v) {
    t <- tg[tg$margin == v, ]
    df <- data.frame(t$level, t$share / sum(t$share) * N, stringsAsFactors = FALSE)
    names(df) <- c(v, "Freq")
    df
  })
  sm <- lapply(margins, function(v) as.formula(paste("~", v)))
  rk <- rake(des, sm, pm, control = list(maxit = 1000, epsilon = 1e-12))
  w <- weights(rk)
  maxw <- max(w) / mean(w)
  rk <- update(rk, sens = pred, spec = 1 - pred, ppvy = as.numeric(label == "1"),
               npvy = as.numeric(label == "0"))
  cells <- list(list("overall", "overall", rep(TRUE, N)))
  for (lv in sort(unique(s$phase))) cells[[length(cells) + 1]] <- list("phase", lv, s$phase == lv)
  for (cell in cells) {
    specs <- list(sensitivity = list(s$label == "1", ~sens),
                  specificity = list(s$label == "0", ~spec),
                  ppv = list(s$pred == 1, ~ppvy), npv = list(s$pred == 0, ~npvy))
    for (est in names(specs)) {
      dom <- specs[[est]][[1]] & cell[[3]]
      sub <- subset(rk, dom)
      f <- specs[[est]][[2]]
      mn <- svymean(f, sub)
      conv <- TRUE
      ci <- withCallingHandlers(attr(svyciprop(f, sub, method = "logit"), "ci"),
                                warning = function(w) {
                                  if (grepl("converge", conditionMessage(w))) conv <<- FALSE
                                  invokeRestart("muffleWarning")
                                })
      wd <- weights(sub)[dom]
      p <- unname(coef(mn)); se <- unname(SE(mn))
      half <- qt(0.975, degf(sub)) * se / (p * (1 - p))
      out[[length(out) + 1]] <- data.frame(
        model = m, estimand = est, group_var = cell[[1]], group_level = cell[[2]],
        estimate = unname(coef(mn)), std_error = unname(SE(mn)),
        conf_low = unname(ci[1]), conf_high = unname(ci[2]), df = degf(sub),
        n = sum(dom), n_eff = sum(wd)^2 / sum(wd^2), max_weight = maxw,
        svyglm_converged = conv && all(is.finite(ci)),
        hand_low = plogis(qlogis(p) - half), hand_high = plogis(qlogis(p) + half))
    }
  }
}
res <- do.call(rbind, out)
write.csv(res, "tests/r/transport.csv", row.names = FALSE)
cat("wrote", nrow(res), "rows\n")
