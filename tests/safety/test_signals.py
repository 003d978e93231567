"""SIGTERM and Ctrl-C end the clinrel program the same way every time:
one line on stderr, exit 128 + the signal (143, 130), no traceback, no output and no
temporary left behind, and no process of its own left running (``reports._signals``).

The report (``clinrel report --demo``, about 12 s on a fast machine and a minute on a
loaded one) is stopped at fixed times and at moments found by watching it (its analysis
lanes forked, tables written, figure workers drawing, pandoc running, documents being
rendered), with SIGTERM to the process and with Ctrl-C (SIGINT to its process group, as a
terminal sends it). Two of these run in the default suite; the rest are slow. The rules
the report relies on are checked directly by small programs.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from reports._signals import MSG_STOPPED

ROOT = Path(__file__).resolve().parents[2]
EXE = Path(sys.executable).with_name("clinrel")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="process groups and /proc: Linux")
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


@pytest.fixture(autouse=True)
def _sigint_as_at_a_terminal():
    """The tests send Ctrl-C as a terminal does, to a program started from one, where
    SIGINT is not ignored. A test run started in the background of a script (``cmd &``
    without job control, or under ``nohup``) inherits SIGINT ignored, and its programs
    would too: they keep an ignored signal ignored (the last rule test), and the Ctrl-C
    tests would see the program run on to exit 0. The pytest process's own handler is put
    in place of SIG_IGN for each test (a handler is reset to the default at exec), so
    every program here starts as at a terminal whatever started pytest."""
    before = signal.getsignal(signal.SIGINT)
    if before is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if before is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _line(sig: int) -> str:
    return MSG_STOPPED.format(name=signal.Signals(sig).name, code=128 + sig).strip()


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            head, tail = fh.read().rsplit(b")", 1)
        return [head.split(b"(", 1)[1].decode(errors="replace"), *tail.decode().split()]
    except (OSError, IndexError):
        return None


def _session(sid: int) -> list[tuple[int, str]]:
    """``(pid, command)`` of the live (not zombie) processes of session ``sid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None:
            # st: comm, state, ppid, pgrp, session, ...
            if int(st[4]) == sid and st[1] != "Z":
                found.append((int(entry), st[0]))
    return found


def _start(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, Path]:
    """``clinrel report --demo`` in its own session (its own process group), with its own
    temporary directory."""
    (tmp_path / "tmp").mkdir()
    out = tmp_path / "rep"
    env = dict(ENV, TMPDIR=str(tmp_path / "tmp"))
    proc = subprocess.Popen([str(EXE), "report", "--demo", "--out", str(out), "--quiet",
                             *extra], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    return proc, out


def _send(proc: subprocess.Popen, sig: int, group: bool) -> None:
    (os.killpg if group else os.kill)(proc.pid, sig)


def _stopped_cleanly(tmp_path: Path, proc: subprocess.Popen, sig: int) -> None:
    _, err = proc.communicate(timeout=300)
    err = err.decode(errors="replace")
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert proc.returncode == 128 + sig, (proc.returncode, err)
    assert err.splitlines() == [_line(sig)], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]   # no output, no .rep.tmp-*
    assert list((tmp_path / "tmp").iterdir()) == []               # no clinrel-build-*
    deadline = time.monotonic() + 15       # nothing of its own still running (pandoc, ...)
    while (left := _session(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == [], left


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _children(pid: int) -> list[tuple[int, str]]:
    return [(int(e), st[0]) for e in os.listdir("/proc")
            if e.isdigit() and (st := _stat(int(e))) is not None and int(st[2]) == pid]


#: moments of a report, each a test of what is happening (``tmp``: its temporary folder)
MOMENTS = {
    "lanes": lambda proc, tmp: any(c == "python" or c.startswith("python") or c == "clinrel"
                                   for _, c in _children(proc.pid)),
    "tables": lambda proc, tmp: bool(list(tmp.glob(".rep.tmp-*/tables/*.csv"))),
    "figures": lambda proc, tmp: bool(list(tmp.glob(".rep.tmp-*/figures/*.png"))),
    # a conversion (pypandoc's one-off "pandoc --version" probe, tens of milliseconds, does
    # not capture pandoc's stderr: a Ctrl-C at that instant adds pandoc's own line
    # "pandoc: interrupted", which clinrel cannot prevent)
    "pandoc": lambda proc, tmp: any(c.startswith("pandoc") and b"--sandbox" in _cmdline(p)
                                    for p, c in _session(proc.pid)),
    "documents": lambda proc, tmp: bool(list(tmp.glob(".rep.tmp-*/appendix.qmd"))),
}


def _wait_for(proc: subprocess.Popen, tmp_path: Path, moment: str) -> None:
    test = MOMENTS[moment]
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        if test(proc, tmp_path):
            return
        if proc.poll() is not None:
            pytest.fail(f"the report ended (exit {proc.returncode}) before '{moment}': "
                        + proc.stderr.read().decode(errors="replace")[-2000:])
        time.sleep(0.01)
    pytest.fail(f"the report never reached '{moment}'")


# --------------------------------------------------------------------------- the report

def test_sigterm_one_second_into_a_report_ends_cleanly(tmp_path):
    """One second in, the program is still importing its libraries (and, on a fast
    machine, loading the study): the handler is there from clinrel's first line."""
    proc, _ = _start(tmp_path)
    time.sleep(1.0)
    _send(proc, signal.SIGTERM, group=False)
    _stopped_cleanly(tmp_path, proc, signal.SIGTERM)


def test_ctrl_c_while_the_analysis_lanes_run_ends_cleanly(tmp_path):
    """Ctrl-C reaches the whole process group: the forked analysis lane too (before, it
    printed ``Process ForkProcess-1: Traceback ... KeyboardInterrupt``)."""
    proc, _ = _start(tmp_path, "--jobs", "2")
    _wait_for(proc, tmp_path, "lanes")
    _send(proc, signal.SIGINT, group=True)
    _stopped_cleanly(tmp_path, proc, signal.SIGINT)


KINDS = {"SIGTERM": (signal.SIGTERM, False), "ctrl-c": (signal.SIGINT, True),
         "SIGTERM-group": (signal.SIGTERM, True)}


@pytest.mark.slow
@pytest.mark.parametrize("after", [0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("kind", ["SIGTERM", "ctrl-c"])
def test_a_signal_at_a_fixed_time_ends_a_report_cleanly(tmp_path, kind, after):
    sig, group = KINDS[kind]
    proc, _ = _start(tmp_path)
    time.sleep(after)
    _send(proc, sig, group)
    _stopped_cleanly(tmp_path, proc, sig)


@pytest.mark.slow
@pytest.mark.parametrize("moment", list(MOMENTS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_signal_at_each_moment_of_a_report_ends_it_cleanly(tmp_path, kind, moment):
    sig, group = KINDS[kind]
    proc, _ = _start(tmp_path, "--jobs", "2")
    _wait_for(proc, tmp_path, moment)
    _send(proc, sig, group)
    _stopped_cleanly(tmp_path, proc, sig)


@pytest.mark.slow
@pytest.mark.parametrize("after", [3.0, 6.0, 10.0])
@pytest.mark.parametrize("kind", ["SIGTERM", "ctrl-c"])
def test_a_signal_while_blocks_run_on_a_dask_cluster_ends_cleanly(tmp_path, kind, after):
    """``--scheduler ADDRESS``: the report's client is closed on the way out, quietly."""
    distributed = pytest.importorskip("distributed")
    sig, group = KINDS[kind]
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  protocol="tcp",
                                  dashboard_address=None, silence_logs=50) as cluster:
        proc, _ = _start(tmp_path, "--scheduler", cluster.scheduler_address)
        time.sleep(after)
        _send(proc, sig, group)
        _stopped_cleanly(tmp_path, proc, sig)


# --------------------------------------------------------------------------- the rules

def _script(body: str, **kw) -> subprocess.CompletedProcess:
    code = "import os, signal, sys, time\nfrom reports import _signals\n_signals.install()\n"
    return subprocess.run([sys.executable, "-c", code + textwrap.dedent(body)],
                          capture_output=True, text=True, env=ENV, timeout=300, **kw)


def _clean(r: subprocess.CompletedProcess, sig: int = signal.SIGTERM) -> None:
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
    assert r.returncode == 128 + sig, (r.returncode, r.stderr)
    assert r.stderr.splitlines() == [_line(sig)], r.stderr


def test_a_signal_in_a_held_section_waits_for_its_end():
    r = _script("""
        with _signals.held():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.3)
            print("held section done", flush=True)
        print("not reached", flush=True)
    """)
    _clean(r)
    assert r.stdout == "held section done\n"


def test_a_second_signal_does_not_cut_the_clean_up():
    r = _script("""
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)
            print("cleaned up", flush=True)
    """)
    _clean(r)
    assert r.stdout == "cleaned up\n"


def test_a_signal_that_lands_in_a_del_is_raised_again_in_ordinary_code():
    """Python cannot raise from ``__del__`` ("Exception ignored in ..." and a traceback,
    and the program would go on): the signal is sent again."""
    r = _script("""
        class Finalised:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.5)          # the handler runs here, inside __del__
        x = Finalised()
        del x
        for _ in range(100):
            time.sleep(0.05)
        print("not reached", flush=True)
    """)
    _clean(r)
    assert r.stdout == ""


def test_a_signal_after_the_work_is_done_ends_at_once():
    r = _script("""
        _signals.finish()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(2)
        print("not reached", flush=True)
    """)
    assert r.returncode == 143 and r.stdout == "" and "Traceback" not in r.stderr


def test_an_ignored_signal_stays_ignored():
    """``nohup`` or a background job of a shell script: SIGINT ignored at the start."""
    r = _script("""
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.3)
        print("still here", flush=True)
    """, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert r.returncode == 0 and r.stdout == "still here\n", r.stderr


def test_forked_workers_stop_their_subprocesses_before_the_program_ends(tmp_path):
    """A worker running pandoc (here ``sleep``, writing its pid) when the program is
    stopped: the subprocess is killed and the workers are gone before the clean-up."""
    r = _script(f"""
        import subprocess
        from pathlib import Path
        from reports._fork import run_tasks

        def task(i):
            def run():
                p = subprocess.Popen(["sleep", "120"])
                Path({str(tmp_path)!r}, f"pid{{i}}").write_text(str(p.pid))
                p.wait()
            return run

        import threading
        def stop():
            while len(list(Path({str(tmp_path)!r}).glob("pid*"))) < 2:
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGTERM)
        threading.Thread(target=stop, daemon=True).start()
        try:
            run_tasks([task(0), task(1)], jobs=2)
        finally:
            Path({str(tmp_path)!r}, "workers").write_text(
                " ".join(str(p) for p in __import__("multiprocessing").active_children()))
    """)
    _clean(r)
    pids = [int((tmp_path / f"pid{i}").read_text()) for i in (0, 1)]
    assert all(_stat(p) is None or _stat(p)[1] == "Z" for p in pids), pids
    assert (tmp_path / "workers").read_text() == ""


def test_pandocs_version_probe_runs_with_the_signals_held():
    """pypandoc probes ``pandoc --version`` without capturing its stderr: a Ctrl-C then
    would add pandoc's ``pandoc: interrupted``; the probe runs with SIGINT and SIGTERM
    blocked (pandoc inherits the mask), and the signal stops clinrel right after."""
    r = _script("""
        import pypandoc
        from reports import sandbox

        def probe():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
            print("probe done", signal.SIGINT in blocked, signal.SIGTERM in blocked, flush=True)
            return "3.0"

        pypandoc.get_pandoc_version = probe
        sandbox.find_pandoc()
        print("not reached", flush=True)
    """)
    _clean(r, signal.SIGINT)
    assert r.stdout == "probe done True True\n"
