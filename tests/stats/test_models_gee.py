"""stats.models.gee against geepack::geeglm (exchangeable) on the simulator, ohio and
VerbAgg; tolerances and measured gaps in r_models.py."""
from __future__ import annotations

from r_models import (  # noqa: F401 (fixtures)
    FORMULA,
    VERBAGG,
    benchx_fixture,
    gee_checks,
    ohio_data,
    ref_fixture,
    verbagg_data,
)

from stats.models import fit_adjusted


def test_geeglm(benchx, ref):
    # 12 sites: the default would be Mancl-DeRouen; geeglm's is the plain sandwich
    gee_checks(fit_adjusted(benchx, FORMULA, method="gee", bias_reduced=False), ref, "benchx")


def test_ohio_gee(ref):
    """geepack::ohio: geeglm, exchangeable."""
    d = ohio_data()
    gee_checks(fit_adjusted(d, "resp ~ age + smoke", group="id", population=None,
                             method="gee"), ref, "ohio", rmodel="")


def test_verbagg_gee(ref):
    """lme4::VerbAgg: geeglm, exchangeable."""
    d = verbagg_data()
    gee_checks(fit_adjusted(d, VERBAGG, group="id", population=None, method="gee"), ref,
                "verbagg", rmodel="")
