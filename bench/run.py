"""``make bench``: run every ``bench/bench_*.py`` workload at full scale, plus the demo
report end to end, and write ``bench/results.json`` and ``bench/README.md``.

``python bench/run.py --only report`` runs one workload alone (here the BenchX-scale
report, ``bench_report.py``) and replaces its entry in results.json and README.md.

Each workload runs in its own process (so peak memory is its own: ``ru_maxrss`` from
``os.wait4``) as ``python bench/bench_<topic>.py --full --json OUT``; the script writes its
figures (medians of repeats, ratios against a baseline timed in the same run) to OUT.
Machines here are shared and noisy: ratios and medians matter, single times do not.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _common import flat


def run_workload(script: Path, *, quick: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        cmd = [sys.executable, str(script), "--quick" if quick else "--full", "--json", str(out)]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        stdout = proc.stdout.read()  # type: ignore[union-attr]
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        figures = json.loads(out.read_text()) if out.exists() else {}
    return {
        "script": script.name,
        "exit_code": proc.returncode,
        "process_wall_s": round(wall, 3),
        "process_peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "figures": figures,
        "log_tail": stdout[-3000:],
    }


def run_report(repeats: int = 3) -> dict:
    """``make report``'s command (``clinrel report --demo --strict``) end to end, ``repeats``
    times: wall and CPU seconds (user + system of the report and the workers it waited
    for: the figure that moves least with the load of a shared machine), the 1-minute load
    average before each run, peak RSS. Target (issue 37): <= 6 s on 2 cores."""
    clinrel = Path(sys.executable).with_name("clinrel")
    times, cpus, loads, peaks = [], [], [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            loads.append(round(os.getloadavg()[0], 2))
            t0 = time.perf_counter()
            proc = subprocess.Popen([str(clinrel), "report", "--demo", "--strict", "--out",
                                     f"{tmp}/r", "--quiet"],
                                    cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            proc.stderr.read()  # type: ignore[union-attr]
            _, status, usage = os.wait4(proc.pid, 0)
            times.append(time.perf_counter() - t0)
            cpus.append(usage.ru_utime + usage.ru_stime)
            peaks.append(usage.ru_maxrss / 1024)
            if os.waitstatus_to_exitcode(status) != 0:
                return {"exit_code": os.waitstatus_to_exitcode(status)}
    return {"exit_code": 0, "median_wall_s": round(statistics.median(times), 2),
            "runs_s": [round(t, 2) for t in times],
            "median_cpu_s": round(statistics.median(cpus), 2),
            "runs_cpu_s": [round(t, 2) for t in cpus], "load_1m_before": loads,
            "peak_rss_mb": round(max(peaks), 1), "target_s": 6}


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(_fmt(x) for x in v)
    return str(v)


def write_readme(results: dict, path: Path) -> None:
    lines = ["# Benchmarks", "",
             "Written by `make bench` (`bench/run.py`); figures are medians of repeated runs on",
             f"{results['machine']['cpus']} cores ({results['machine']['platform']}), "
             f"run at {results['started']}. Ratios compare with a baseline timed in the same run.", ""]
    for w in results["workloads"]:
        lines += [f"## {w['script']}", "",
                  f"exit code {w['exit_code']}; process wall {w['process_wall_s']} s; "
                  f"peak RSS {w['process_peak_rss_mb']} MB", "", "| figure | value |", "|---|---|"]
        lines += [f"| {k} | {_fmt(v)} |" for k, v in flat(w["figures"]).items()]
        lines.append("")
    rep = results.get("report")
    if rep:
        lines += ["## Demo report end to end (`clinrel report --demo`)", "", "| figure | value |", "|---|---|"]
        lines += [f"| {k} | {_fmt(v)} |" for k, v in rep.items()]
        lines.append("")
    notes = HERE / "NOTES.md"
    if notes.exists():
        lines += [notes.read_text()]
    path.write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small scale (smoke test of the harness)")
    ap.add_argument("--only", action="append", default=[], help="run only bench_<NAME>.py")
    ap.add_argument("--no-report", action="store_true")
    args = ap.parse_args(argv)
    scripts = sorted(HERE.glob("bench_*.py"))
    if args.only:
        scripts = [s for s in scripts if any(s.stem == f"bench_{o}" or s.stem == o for o in args.only)]
    results = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
               "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                           "python": platform.python_version()},
               "scale": "quick" if args.quick else "full", "workloads": []}
    failed = 0
    for script in scripts:
        print(f"[bench] {script.name} ...", flush=True)
        res = run_workload(script, quick=args.quick)
        failed += res["exit_code"] != 0
        print(f"[bench] {script.name}: exit {res['exit_code']}, {res['process_wall_s']} s, "
              f"{res['process_peak_rss_mb']} MB; {json.dumps(res['figures'])[:400]}", flush=True)
        results["workloads"].append(res)
    if not args.no_report and not args.only:
        print("[bench] demo report ...", flush=True)
        results["report"] = run_report(1 if args.quick else 3)
        print(f"[bench] report: {results['report']}", flush=True)
    suffix = "-quick" if args.quick else ""
    path = HERE / f"results{suffix}.json"
    if args.only and path.exists():  # re-run of some workloads: replace just those entries
        old = json.loads(path.read_text())
        fresh = {w["script"]: w for w in results["workloads"]}
        old["workloads"] = [fresh.pop(w["script"], w) for w in old["workloads"]] + list(fresh.values())
        old.setdefault("reruns", []).append({"started": results["started"], "only": args.only})
        results = old
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    if not args.quick:
        write_readme(results, HERE / "README.md")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
