"""The public names of ``stats``: explicit, resolvable, and never replaced by a submodule.

Before the explicit exports, ``import stats.describe`` made ``stats.describe`` the module
instead of the function (a lazy export table only filled attributes that were missing).
"""
from __future__ import annotations

import inspect
import pkgutil
import subprocess
import sys

import stats

SUBMODULES = sorted(m.name for m in pkgutil.walk_packages(stats.__path__, "stats."))


def test_every_exported_name_resolves_and_is_listed_once():
    assert len(stats.__all__) == len(set(stats.__all__))
    missing = [n for n in stats.__all__ if not hasattr(stats, n)]
    assert not missing, f"in stats.__all__ but not importable: {missing}"
    assert not hasattr(stats, "__getattr__"), "exports are explicit: no lazy module __getattr__"


def test_no_exported_name_is_also_a_submodule_name():
    """``import stats.<name>`` binds the attribute ``stats.<name>`` to the module, so a
    public name must never be the name of a module directly under ``stats``."""
    top = {m.name for m in pkgutil.iter_modules(stats.__path__)}
    assert not top & set(stats.__all__), sorted(top & set(stats.__all__))


def test_submodule_imports_leave_every_exported_function_a_function():
    """In a fresh interpreter, ``import stats.<m>`` for every submodule first (the order
    that exposed the bug), then ``import stats``: every exported function is still the
    function, and ``stats.describe`` is callable."""
    functions = sorted(n for n in stats.__all__ if inspect.isfunction(getattr(stats, n)))
    assert "describe" in functions and len(functions) > 20
    code = "\n".join([*(f"import {m}" for m in SUBMODULES), "import stats, inspect",
                      f"bad = [n for n in {functions!r} if not inspect.isfunction(getattr(stats, n))]",
                      "assert not bad, bad",
                      "assert callable(stats.describe) and not inspect.ismodule(stats.describe)"])
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


def test_import_stats_loads_no_plotting_rendering_or_torch():
    code = ("import sys, stats\n"
            "heavy = {'plotnine', 'great_tables', 'torch', 'monai', 'matplotlib', 'dask'}\n"
            "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "[]"
