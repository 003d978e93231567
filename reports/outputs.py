"""Where clinrel writes: it never destroys a file it did not write.

**Folder outputs** (``report``, ``demo``, ``crs``; ``reports.render.render_report``).
Every folder clinrel writes carries ``manifest.json`` with ``"generator": "clinrel"`` and
``"files"``: the sha256 of every other file it wrote (relative paths). An existing
``--out`` folder is

- used when it is empty: no entry at all (no file, folder, link or hidden entry);
- replaced, with ``--force`` only, when it is an earlier clinrel output: its manifest says
  so and it holds nothing beyond the files and folders listed there, the files unchanged
  (a report folder written before manifests listed files counts when it holds only the
  files of its manifest's layout);
- refused (exit 2, even with ``--force``) otherwise: a folder holding any entry clinrel did
  not write (a file, or a folder, even an empty one) or a file that changed since, the
  current folder or one above it, and a folder holding an input (the plan, a table, the
  reference) at any depth.

**File outputs** (``--out FILE.csv|.parquet`` and the other ``--*-out`` files). Never an
input file (the same path, a link to it or a hard link), never through a symbolic link;
an existing file is replaced only with ``--force`` (the user asking for it: a file output
names one file, so no record is kept beside it); an existing folder, a path below a file
or an unwritable folder is refused with the fix.

**Nothing half-written survives.** Work happens in a temporary sibling folder
``.NAME.tmp-PID-*`` that holds a ``.clinrel-partial`` marker naming its process and host
(a folder output is built in it; a file output is written as ``NAME`` inside it), moved
into place only when complete; an old folder output is parked, for the instant of the
swap, as ``old`` inside another such marked folder whose marker names NAME (so that a
later run can put it back). A command writing several files (:func:`write_tables`)
checks all of them, writes all to temporaries and only then moves them into place,
undoing the moves already made if one fails: all of them or none. An error, SIGTERM or
Ctrl-C removes the temporaries at once (the bookkeeping itself is never cut in half by
a signal: ``reports._signals.held``). After a SIGKILL, the next clinrel run that writes
into the same folder removes the leftovers whose process is dead, and the next report
removes dead runs' ``clinrel-build-PID-*`` folders from the temporary directory. Nothing
else is touched (:func:`clean_stale` says why).

**Any legal name.** A temporary's name is bounded whatever NAME is: NAME itself when it
is short enough (:data:`MAX_SHOWN_NAME_BYTES`), else its start and a hash of it, so a
name up to the file system's limit (``NAME_MAX``, 255 bytes on most) works; a longer name
(or path) is refused up front with the limit (``MSG_NAME_TOO_LONG``).

**A full disk or quota** (``ENOSPC``, ``EDQUOT``, in clinrel's own writes or in pandoc's
and typst's) removes the temporaries like any error and is reported as
``MSG_NO_SPACE`` (exit 2): the output, the file being written where known, and the fix
(free space there, or another ``--out``); a full temporary folder (the report's build
folder) as ``MSG_NO_SPACE_TEMP`` (free space there, or set ``TMPDIR``).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from ._signals import held

MANIFEST = "manifest.json"
GENERATOR = "clinrel"
PARTIAL = ".clinrel-partial"
TABLE_SUFFIXES = (".csv", ".parquet")

_FIX_DIR = "give --out NEW_FOLDER (a folder that does not exist yet, or an empty one)"
MSG_DIR_FOREIGN = ("{option} {out}: this folder holds {n} entr{ies} clinrel did not write "
                   "({names}; a folder counts, even an empty one); clinrel writes only into "
                   "an empty folder or replaces one it wrote itself, and --force does not "
                   "change that; move those entries out, or " + _FIX_DIR)
MSG_DIR_CHANGED = ("{option} {out}: {names} changed since clinrel wrote this folder; it "
                   "will not replace edited files, even with --force; copy what you need "
                   "and remove the folder yourself, or " + _FIX_DIR)
MSG_DIR_NEEDS_FORCE = ("{option} {out}: holds an earlier clinrel output; add --force to "
                       "replace it, or " + _FIX_DIR)
MSG_DIR_WORKDIR = ("{option} {out}: is the current folder or a folder above it; clinrel "
                   "will not replace it; " + _FIX_DIR)
MSG_DIR_HOLDS_INPUT = ("{option} {out}: holds the input {input}; writing there would "
                       "delete it; " + _FIX_DIR)
MSG_DIR_IS_FILE = "{option} {out}: is a file, not a folder; " + _FIX_DIR
MSG_DIR_LINK = "{option} {out}: is a symbolic link; give the real folder, or " + _FIX_DIR
MSG_FILE_IS_INPUT = ("{option} {out}: is the input {input}; clinrel never writes over an "
                     "input; give another file name")
MSG_FILE_IS_DIR = ("{option} {out}: is a folder, but this output is a file; give a file "
                   "path such as {example}")
MSG_FILE_EXISTS = ("{option} {out}: the file exists; add --force to replace it, or give "
                   "another file name")
MSG_FILE_LINK = ("{option} {out}: is a symbolic link; clinrel never writes through one, and "
                 "--force does not change that; give {option} the real file or a new name")
MSG_FILE_SUFFIX = ("{option} {out}: unknown file type '{suffix}'; give a .csv or .parquet "
                   "path")
MSG_SAME_OUTPUT = ("{option} {out}: the same file as {other}; give each output its own "
                   "file name")
MSG_UNWRITABLE = ("{option} {out}: cannot write there ({reason}); give {option} in a folder "
                  "you can write to")
MSG_NAME_TOO_LONG = ("{option} {out}: the name {name} is {n} bytes long; this file system "
                     "allows at most {limit} bytes in one name; give {option} a shorter name")
MSG_PATH_TOO_LONG = ("{option} {out}: the path is {n} bytes long; this system allows at most "
                     "{limit}; give {option} a shorter path")
MSG_NO_SPACE = ("{option} {out}: {reason} while writing {what}; nothing was written and no "
                "temporary file is left; {fix} on the disk that holds {where}, or choose another "
                "{option} on a disk with space")
MSG_NO_SPACE_TEMP = ("{option} {out}: {reason} in the temporary folder {where} while writing "
                     "{what}; nothing was written and no temporary file is left; {fix} in "
                     "{where}, or set TMPDIR to a folder on a disk with space")


class OutputError(ValueError):
    """An output location that clinrel refuses; the message names it and the fix."""


def _refuse(template: str, *, out, **kw) -> None:
    if "n" in kw:
        kw.setdefault("ies", "y" if kw["n"] == 1 else "ies")
    raise OutputError(template.format(out=_shown(out), **kw))


def _shown(out) -> str:
    """The path as the user gave it, with its absolute form when that differs."""
    given = Path(out)
    full = given.absolute()
    return str(given) if given.is_absolute() else f"{given} ({full})"


def _names(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# --------------------------------------------------------------------------- environment

#: errno values of a full disk (ENOSPC) and of an exhausted quota (EDQUOT)
NO_SPACE_ERRNOS = tuple(e for e in (getattr(errno, "ENOSPC", None), getattr(errno, "EDQUOT", None))
                        if e is not None)
_OS_ERROR_NUMBER = re.compile(r"\(os error (\d+)\)")   # typst's (Rust's) way of naming errno


def no_space(exc: BaseException | None) -> OSError | None:
    """The ``OSError`` (``errno`` ENOSPC or EDQUOT) behind ``exc`` (itself, its cause or
    its context), else None. An error whose text is the system's message for them
    (pandoc's ``resource exhausted (No space left on device)``, typst's ``(os error
    28)``, pyarrow's ``[errno 28]``) counts: it is returned as an ``OSError`` with that
    errno."""
    texts = {os.strerror(e): e for e in NO_SPACE_ERRNOS}
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS:
            return exc
        if isinstance(exc, (OSError, RuntimeError)):
            text = str(exc)
            number = _OS_ERROR_NUMBER.search(text)
            if number and int(number.group(1)) in NO_SPACE_ERRNOS:
                return OSError(int(number.group(1)), os.strerror(int(number.group(1))))
            for message, code in texts.items():
                if message in text:
                    return OSError(code, message)
        exc = exc.__cause__ or exc.__context__
    return None


def _failed_path(err: OSError) -> Path | None:
    """The file a write failed on (``filename2`` is the destination of a copy)."""
    for name in (getattr(err, "filename2", None), err.filename):
        if isinstance(name, (str, bytes, os.PathLike)) and name:
            return Path(os.fsdecode(name))
    return None


def no_space_error(err: OSError, out, option: str, tmp: Path | None = None) -> OutputError:
    """``MSG_NO_SPACE`` (or ``MSG_NO_SPACE_TEMP`` for the report's build folder in the
    temporary directory) for ``err`` met while writing ``out``; ``tmp``: the temporary
    folder the output was being built in (a file in it is named by its path in the
    output)."""
    quota = getattr(errno, "EDQUOT", None) is not None and err.errno == errno.EDQUOT
    reason = ("the disk quota is exhausted (Disk quota exceeded)" if quota
              else "the disk is full (No space left on device)")
    fix = "free space (or ask for a larger quota)" if quota else "free space"
    where = Path(out).absolute().parent
    what = "the output"
    failed = _failed_path(err)
    if failed is not None:
        failed = failed.absolute()
        if tmp is not None and _inside(failed, Path(tmp).absolute()):
            rel = failed.relative_to(Path(tmp).absolute())
            what = str(rel) if str(rel) != "." else what
        elif (any(_BUILD.match(part) for part in failed.parts)
              or failed == Path(tempfile.gettempdir()).absolute()):
            temp = Path(tempfile.gettempdir()).absolute()
            return OutputError(MSG_NO_SPACE_TEMP.format(
                option=option, out=_shown(out), reason=reason, fix=fix, where=temp,
                what=failed.name if failed != temp else "the report's build folder"))
        else:
            what, where = str(failed), failed.parent
    return OutputError(MSG_NO_SPACE.format(option=option, out=_shown(out), reason=reason,
                                           what=what, fix=fix, where=where))


#: the longest name (bytes) a temporary keeps in full; a longer one is cut and hashed
MAX_SHOWN_NAME_BYTES = 200


def _short(name: str) -> str:
    """``name`` when it has at most :data:`MAX_SHOWN_NAME_BYTES` bytes, else its first
    characters (up to 180 bytes) and ``~`` and 12 hex digits of its sha256: temporaries
    next to any legal name stay within ``NAME_MAX``."""
    raw = os.fsencode(name)
    if len(raw) <= MAX_SHOWN_NAME_BYTES:
        return name
    head, size = [], 0
    for ch in name:
        size += len(os.fsencode(ch))
        if size > 180:
            break
        head.append(ch)
    return "".join(head) + "~" + hashlib.sha256(raw).hexdigest()[:12]


def _tmp_prefix(name: str) -> str:
    return f".{_short(name)}.tmp-"


def _limits(path: Path) -> tuple[int, int]:
    """``(NAME_MAX, PATH_MAX)`` of the file system holding ``path``'s nearest existing
    folder (255 and 4096 where the system does not say)."""
    probe = path.parent
    while probe.parent != probe:
        try:
            if probe.is_dir():
                break
        except OSError:
            pass
        probe = probe.parent
    limits = []
    for key, default in (("PC_NAME_MAX", 255), ("PC_PATH_MAX", 4096)):
        try:
            value = os.pathconf(probe, key)
        except (OSError, ValueError, AttributeError):
            value = -1
        limits.append(value if value and value > 0 else default)
    return limits[0], limits[1]


def _check_length(out, option: str) -> None:
    """Refuse a path with a name longer than the file system allows, or too long a path
    (``ENAMETOOLONG`` would otherwise come from the first look at it)."""
    full = Path(out).absolute()
    name_max, path_max = _limits(full)
    for part in full.parts:
        n = len(os.fsencode(part))
        if n > name_max:
            shown = repr(part[:40] + "..." if len(part) > 43 else part)
            _refuse(MSG_NAME_TOO_LONG, option=option, out=out, name=shown, n=n, limit=name_max)
    n = len(os.fsencode(str(full)))
    if n >= path_max:
        _refuse(MSG_PATH_TOO_LONG, option=option, out=out, n=n, limit=path_max - 1)


# --------------------------------------------------------------------------- ownership

def _files(folder: Path) -> list[str]:
    """Every entry below ``folder`` that is not a directory (links included, never
    followed), as sorted relative POSIX paths."""
    found = []
    for root, dirs, files in os.walk(folder):
        base = Path(root)
        found += [(base / d).relative_to(folder).as_posix() for d in dirs
                  if (base / d).is_symlink()]
        found += [(base / f).relative_to(folder).as_posix() for f in files]
    return sorted(found)


def _dirs(folder: Path) -> list[str]:
    """Every real folder below ``folder`` (not links), as sorted relative POSIX paths."""
    found = []
    for root, dirs, _ in os.walk(folder):
        base = Path(root)
        found += [(base / d).relative_to(folder).as_posix() for d in dirs
                  if not (base / d).is_symlink()]
    return sorted(found)


def _parents(names: Iterable[str]) -> set[str]:
    """The folders that the relative paths ``names`` lie in (``a/b/c.csv``: ``a``, ``a/b``)."""
    out = set()
    for name in names:
        out.update(p.as_posix() for p in Path(name).parents if p.as_posix() != ".")
    return out


#: the folders of a report, allowed (even empty) in a report written before manifests
#: listed folders
_REPORT_FOLDERS = {"tables", "figures", "results"}


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


#: the most clinrel reads of its own bookkeeping files (a manifest, a marker, the record of
#: written files): anything larger, or not a regular file, is not clinrel's
MAX_BOOKKEEPING_BYTES = 64 * 2 ** 20


def _read_json(path: Path) -> dict | None:
    """The JSON object in ``path`` when it is a regular file (not a link, FIFO, device or
    folder: never followed, never blocked on) of at most :data:`MAX_BOOKKEEPING_BYTES`
    holding a JSON object; else None."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BOOKKEEPING_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_BOOKKEEPING_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        out = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    return out if isinstance(out, dict) else None


def _marker(folder: Path) -> dict | None:
    return _read_json(folder / MANIFEST)


def classify(folder: Path) -> tuple[str, list[str]]:
    """``("empty" | "clinrel" | "foreign" | "changed", offending names)`` for a folder.

    ``empty`` only when it has no entry at all. A folder is ``clinrel`` only when its
    manifest is clinrel's and every file *and folder* in it is one clinrel wrote (listed
    in the manifest, or a folder a listed file lies in): anything else, an empty folder
    included, is the user's (``foreign``; folders are named with a trailing ``/``).
    """
    try:
        with os.scandir(folder) as entries:
            if next(entries, None) is None:
                return "empty", []
    except OSError:
        return "foreign", [folder.name]
    found = [f for f in _files(folder) if f != MANIFEST]
    dirs = _dirs(folder)
    man = _marker(folder)
    if man is None:
        extra = sorted(found + [d + "/" for d in dirs])
        if (folder / MANIFEST).exists() or (folder / MANIFEST).is_symlink():
            extra.append(MANIFEST)
        return "foreign", extra
    listed = man.get("files") if man.get("generator") == GENERATOR else None
    if not isinstance(listed, dict):
        # a report written before manifests listed their files' sha256 (or anything else
        # without them): clinrel cannot tell whether its files were edited, so it is not
        # clinrel's to replace or remove
        return "foreign", sorted(found + [d + "/" for d in dirs]) + [MANIFEST]
    folders = man.get("folders")
    allowed = _parents(listed) | (set(map(str, folders)) if isinstance(folders, list)
                                  else _REPORT_FOLDERS if "clinrel_report" in man else set())
    foreign = sorted([f for f in found if f not in listed]
                     + [d + "/" for d in dirs if d not in allowed])
    if foreign:
        return "foreign", foreign
    changed = [f for f in found if (folder / f).is_symlink() or _sha256(folder / f) != listed[f]]
    return ("changed", changed) if changed else ("clinrel", [])


def stamp(folder: Path, command: str) -> None:
    """Mark ``folder`` as clinrel's: ``manifest.json`` gets ``generator``, the sha256 of
    every other file (``files``) and every folder (``folders``, so that an empty folder
    clinrel made is not taken for the user's) (an existing manifest, a report's, is
    extended)."""
    (folder / PARTIAL).unlink(missing_ok=True)
    man = _marker(folder) or {
        "command": f"clinrel {command}",
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    man["generator"] = GENERATOR
    man["files"] = {f: _sha256(folder / f) for f in _files(folder) if f != MANIFEST}
    man["folders"] = _dirs(folder)
    (folder / MANIFEST).write_text(json.dumps(man, indent=2, default=str) + "\n",
                                   encoding="utf-8")


# --------------------------------------------------------------------------- checks

def _writable(out: Path, option: str) -> None:
    """Refuse ``out`` when its nearest existing ancestor is a file or not writable."""
    probe = out.absolute().parent
    while not probe.exists() and not probe.is_symlink() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        _refuse(MSG_UNWRITABLE, option=option, out=out, reason=f"{probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        _refuse(MSG_UNWRITABLE, option=option, out=out, reason=f"no permission to write in {probe}")


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_out_dir(out, *, force: bool = False, inputs: Iterable = (),
                  option: str = "--out") -> Path:
    """Refuse (:class:`OutputError`) a folder output clinrel may not write; see the module
    docstring for the rules. Returns the absolute path."""
    given = Path(out)
    _check_length(given, option)
    out = given.absolute()
    real = out.resolve()
    if out.is_symlink():
        _refuse(MSG_DIR_LINK, option=option, out=given)
    cwd = Path.cwd().resolve()
    if real.parent == real or _inside(cwd, real):
        _refuse(MSG_DIR_WORKDIR, option=option, out=given)
    for inp in inputs:
        if inp is not None and _inside(Path(inp).resolve(), real):
            _refuse(MSG_DIR_HOLDS_INPUT, option=option, out=given, input=inp)
    if out.exists():
        if not out.is_dir():
            _refuse(MSG_DIR_IS_FILE, option=option, out=given)
        kind, names = classify(out)
        if kind == "foreign":
            _refuse(MSG_DIR_FOREIGN, option=option, out=given, n=len(names), names=_names(names))
        if kind == "changed":
            _refuse(MSG_DIR_CHANGED, option=option, out=given, names=_names(names))
        if kind == "clinrel" and not force:
            _refuse(MSG_DIR_NEEDS_FORCE, option=option, out=given)
    _writable(given, option)
    return out


def check_out_file(out, *, force: bool = False, inputs: Iterable = (), option: str = "--out",
                   suffixes: tuple[str, ...] | None = TABLE_SUFFIXES) -> Path:
    """Refuse (:class:`OutputError`) a file output clinrel may not write: an unknown
    suffix, an input, a folder, an existing file without ``force``, an unwritable place."""
    out = Path(out)
    _check_length(out, option)
    if out.is_dir():
        example = out / ("result" + (suffixes[0] if suffixes else ".csv"))
        _refuse(MSG_FILE_IS_DIR, option=option, out=out, example=example)
    suffix = out.suffix.lower()
    if suffixes is not None and suffix not in suffixes:
        _refuse(MSG_FILE_SUFFIX, option=option, out=out, suffix=suffix)
    real = out.resolve()
    for inp in inputs:
        if inp is None:
            continue
        p = Path(inp)
        same = p.resolve() == real
        with contextlib.suppress(OSError):
            same = same or (out.exists() and p.exists() and os.path.samefile(p, out))
        if same:
            _refuse(MSG_FILE_IS_INPUT, option=option, out=out, input=inp)
    if (out.exists() or out.is_symlink()) and not force:
        _refuse(MSG_FILE_EXISTS, option=option, out=out)
    if out.is_symlink():   # --force replaces a file, never follows or replaces a link
        _refuse(MSG_FILE_LINK, option=option, out=out)
    _writable(out, option)
    return out


def check_out_files(outs: Iterable[tuple[str, object]], *, force: bool = False,
                    inputs: Iterable = (), suffixes: tuple[str, ...] | None = None) -> None:
    """:func:`check_out_file` for every ``(option, path)`` (``None`` paths skipped), and no
    two outputs on the same file. Commands call it before their work, without the suffix
    check, so that a bad input is reported first; :func:`write_tables` repeats it with the
    suffixes for every output of the command before it writes any of them."""
    inputs = list(inputs)
    seen: dict[Path, str] = {}
    for option, path in outs:
        if path is None:
            continue
        check_out_file(path, force=force, inputs=inputs, option=option, suffixes=suffixes)
        key = Path(path).resolve()
        if key in seen:
            _refuse(MSG_SAME_OUTPUT, option=option, out=path, other=seen[key])
        seen[key] = f"{option} {path}"


# --------------------------------------------------------------------------- leftovers

_TMP = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)-[^/]+$")
_OLD = re.compile(r"^\.(?P<name>.+)\.old-(?P<pid>\d+)$")
_BUILD = re.compile(r"^clinrel-build-(?P<pid>\d+)-[^/]+$")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):
        return True  # not ours to judge (another user's process, or not a pid)
    return True


def _partial_of_dead_run(folder: Path, pid: int) -> bool:
    """A temporary folder of a clinrel run on this host whose process is gone."""
    info = _read_json(folder / PARTIAL)
    return (info is not None and info.get("pid") == pid
            and info.get("host") == socket.gethostname() and not _alive(pid))


def clean_stale(parent: Path) -> list[Path]:
    """Remove (or restore) the leftovers of killed clinrel runs in ``parent``; return them.

    Only what clinrel can prove is its own is ever removed:

    - ``.NAME.tmp-PID-*`` *folders* holding a ``.clinrel-partial`` marker that names
      process PID on this host, when that process is gone. Every temporary clinrel makes,
      a single output file included, is such a folder (a file is written as ``NAME``
      inside it), so the marker is the proof of ownership. NAME may be cut and hashed
      (:func:`_short`): the marker, not the name, proves whose it is. When the marker
      names a folder to ``restore`` (an old output parked during a swap) and that
      folder's ``old`` is a complete clinrel output (:func:`classify`), ``old`` is moved
      back to it if it is missing, before the rest is removed;
    - ``.NAME.old-PID`` folders (where clinrel before this version parked an old output)
      that are complete clinrel outputs of a dead process: moved back to NAME when NAME
      is missing, else removed.

    A *file* is never removed, whatever its name: a file named like a temporary
    (``.thesis.docx.tmp-31337-autosave``) may be the user's, and nothing in a bare file
    proves otherwise. Putting single-file temporaries inside marked folders is the
    simplest design that can never delete a user's file: one rule (marked folders only)
    for every leftover, and no name pattern a user's file could match by chance.
    """
    handled = []
    try:
        entries = list(Path(parent).iterdir())
    except OSError:
        return handled
    for p in entries:
        with contextlib.suppress(OSError), held():
            if p.is_symlink() or not p.is_dir():
                continue  # files and links: never ours to remove
            if (m := _TMP.match(p.name)) is not None:
                if _partial_of_dead_run(p, int(m["pid"])) and _restore_parked(p):
                    shutil.rmtree(p)
                    handled.append(p)
            elif (m := _OLD.match(p.name)) is not None:
                if not _alive(int(m["pid"])) and classify(p)[0] == "clinrel":
                    target = p.parent / m["name"]
                    if target.exists() or target.is_symlink():
                        shutil.rmtree(p)
                    else:
                        p.rename(target)
                    handled.append(p)
    return handled


def _plain_name(name) -> bool:
    return (isinstance(name, str) and name not in ("", ".", "..") and "/" not in name
            and "\0" not in name and (os.sep == "/" or os.sep not in name))


def _restore_parked(folder: Path) -> bool:
    """Put back the old output a dead run parked in ``folder`` (its marker's ``restore``)
    when nothing has taken its place; False when ``folder`` holds a parked ``old`` that is
    not (or no longer) a complete clinrel output: then it is not removed at all."""
    info = _read_json(folder / PARTIAL) or {}
    name, old = info.get("restore"), folder / "old"
    if "restore" not in info or not (old.exists() or old.is_symlink()):
        return True
    if not _plain_name(name) or old.is_symlink() or not old.is_dir() \
            or classify(old)[0] != "clinrel":
        return False
    target = folder.parent / name
    if not (target.exists() or target.is_symlink()):
        old.rename(target)
    return True


def _make_parents(folder: Path) -> list[Path]:
    """``mkdir -p folder``; return the folders it created, deepest first (so that a failed
    command can remove them again). ``folder`` is resolved first: in ``new/../mine`` the
    folder made is ``mine`` (or none, when it exists), never ``new``, and a later clean-up
    can never take ``new/..`` for a folder this run made."""
    folder = Path(os.path.realpath(folder))
    missing = []
    probe = folder
    while not probe.exists() and not probe.is_symlink() and probe.parent != probe:
        missing.append(probe)
        probe = probe.parent
    folder.mkdir(parents=True, exist_ok=True)
    return missing


def _remove_empty(folders: Iterable[Path]) -> None:
    """Remove the folders this run created (deepest first), each only while empty."""
    for d in folders:
        with contextlib.suppress(OSError):
            d.rmdir()


def _temp_dir(parent: Path, prefix: str, **info) -> Path:
    """A new folder ``PREFIXPID-*`` in ``parent`` holding the marker (pid, host and
    ``info``); removed again when the marker cannot be written (a full disk). Call it
    :func:`held`, so that a signal cannot come between the folder and its marker or
    before the caller has recorded it."""
    tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent))
    try:
        (tmp / PARTIAL).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                               **info}), encoding="utf-8")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


@contextlib.contextmanager
def build_dir() -> Iterator[Path]:
    """A scratch folder ``clinrel-build-PID-*`` in the temporary directory, removed on exit;
    dead runs' build folders are removed first."""
    base = Path(tempfile.gettempdir())
    for p in base.glob("clinrel-build-*"):
        m = _BUILD.match(p.name)
        if m and p.is_dir() and not p.is_symlink() and _partial_of_dead_run(p, int(m["pid"])):
            with held():
                shutil.rmtree(p, ignore_errors=True)
    tmp = None
    try:
        with held(), named(base):   # a full temporary folder is named as such
            tmp = _temp_dir(base, "clinrel-build-")
        yield tmp
    finally:
        if tmp is not None:
            with held():
                shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- writers

@contextlib.contextmanager
def _unwritable_as_output_error(out: Path, option: str, tmp: Path | None = None) -> Iterator[None]:
    """An ``OSError`` becomes an :class:`OutputError`: ``MSG_NO_SPACE`` for a full disk or
    quota (:func:`no_space`), else ``MSG_UNWRITABLE``."""
    try:
        yield
    except OutputError:
        raise
    except OSError as exc:
        if (full := no_space(exc)) is not None:
            raise no_space_error(full, out, option, tmp) from None
        raise OutputError(MSG_UNWRITABLE.format(option=option, out=_shown(out),
                                                reason=exc.strerror or type(exc).__name__)) from None


@contextlib.contextmanager
def named(path) -> Iterator[None]:
    """An ``OSError`` raised while writing ``path`` that names no file (a failed
    ``write``, as on a full disk) is given ``path`` as its file name, so that the message
    can say which output it was."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise


def _as_no_space(exc: BaseException, out: Path, option: str, tmp: Path | None) -> None:
    """Raise ``MSG_NO_SPACE`` when ``exc`` is a full disk or quota (else return; a
    signal's ``SystemExit`` is never replaced)."""
    if (isinstance(exc, Exception) and not isinstance(exc, OutputError)
            and (full := no_space(exc)) is not None):
        raise no_space_error(full, out, option, tmp) from None


def _swap(tmp: Path, out: Path) -> None:
    """Move the finished ``tmp`` to ``out``; an existing ``out`` is parked as ``old``
    inside a marked folder (its marker names ``out`` to restore: :func:`clean_stale`)
    for the instant of the swap, then removed. Call it :func:`held`."""
    if not (out.exists() or out.is_symlink()):
        tmp.rename(out)
        return
    park = _temp_dir(out.parent, _tmp_prefix(out.name), restore=out.name)
    try:
        out.rename(park / "old")
        try:
            tmp.rename(out)
        except BaseException:
            (park / "old").rename(out)
            raise
    finally:
        shutil.rmtree(park, ignore_errors=True)


@contextlib.contextmanager
def atomic_dir(out, *, force: bool = False, inputs: Iterable = (), option: str = "--out",
               command: str = "output") -> Iterator[Path]:
    """Yield a temporary folder next to ``out``; on success it is marked as clinrel's
    (:func:`stamp`) and replaces ``out``.

    ``out`` is checked first (:func:`check_out_dir`) and again just before the swap. On any
    exception the temporary folder is removed and ``out`` is left as it was. The yielded
    path is absolute, so tools that change directory still write inside it.
    """
    given = out
    out = Path(os.path.realpath(Path(out).absolute().parent)) / Path(out).name
    inputs = list(inputs)
    clean_stale(out.parent)
    check_out_dir(given, force=force, inputs=inputs, option=option)
    made: list[Path] = []
    tmp = work = None
    try:
        with held(), _unwritable_as_output_error(out, option):
            made = _make_parents(out.parent)
            tmp = work = _temp_dir(out.parent, _tmp_prefix(out.name))
            # mkdtemp makes it 0700: the finished folder gets the mode mkdir would give
            mask = os.umask(0)
            os.umask(mask)
            tmp.chmod(0o777 & ~mask)
        yield tmp
        with held():
            with _unwritable_as_output_error(given, option, work):
                stamp(tmp, command)
            check_out_dir(given, force=force, inputs=inputs, option=option)
            with _unwritable_as_output_error(given, option, work):
                _swap(tmp, out)
            tmp, made = None, []
    except BaseException as exc:
        with held():
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            _remove_empty(made)
        _as_no_space(exc, given, option, work)
        raise


#: the name of the earlier file kept inside a file output's temporary folder (:func:`_commit`)
_KEPT = ".clinrel-old"


def _keep_old(out: Path, backup: Path) -> None:
    """A second name (or, where hard links are not possible, a copy) of the existing
    ``out`` at ``backup``, so that a failed set of moves can put it back; ``out`` itself
    stays in place."""
    try:
        os.link(out, backup, follow_symlinks=False)
    except OSError:
        shutil.copy2(out, backup, follow_symlinks=False)


def _commit(moves: list[tuple[str, Path, Path]]) -> None:
    """Move every finished ``(option, out, tmp)`` into place, all or none: when one move
    fails, those already made are undone (the earlier file back, or the new one removed).
    The earlier file is kept inside the temporary's marked folder until then, so a kill
    in between leaves either it or the new file at ``out``, never neither."""
    done: list[tuple[Path, Path | None]] = []
    try:
        for option, out, tmp in moves:
            with _unwritable_as_output_error(out, option, tmp.parent):
                backup = None
                if out.exists() or out.is_symlink():
                    # a fixed name (any NAME fits beside it), never NAME itself
                    backup = tmp.parent / (_KEPT if out.name != _KEPT else _KEPT + "-")
                    _keep_old(out, backup)
                os.replace(tmp, out)
            done.append((out, backup))
    except BaseException:
        for out, backup in reversed(done):
            with contextlib.suppress(OSError):
                if backup is not None:
                    os.replace(backup, out)
                else:
                    out.unlink()
        raise


@contextlib.contextmanager
def atomic_files(outs: Iterable[tuple[str, object]], *,
                 recheck: dict | None = None) -> Iterator[list[Path]]:
    """Yield a temporary path for every ``(option, out)``; when the block succeeds, all of
    them are moved into place together (:func:`_commit`), else none is and every existing
    file is left as it was.

    Each temporary is ``NAME`` (the output's own name, so its suffix too) inside a marked
    folder ``.NAME.tmp-PID-*`` next to ``out`` (:func:`clean_stale`); the folders, and
    any parent folders made for the outputs, are removed on the way out. Check the
    outputs first (:func:`check_out_files`); ``recheck``, the keywords of that check,
    repeats it just before the moves (a file may have appeared meanwhile).
    """
    outs = list(outs)
    # the parent resolved (links and ".." as the system would follow them), the name kept
    pairs = [(option, Path(os.path.realpath(Path(out).absolute().parent)) / Path(out).name)
             for option, out in outs]
    folders: list[Path] = []
    made: list[Path] = []
    ok = False
    failure = None
    try:
        tmps = []
        for option, out in pairs:
            clean_stale(out.parent)
            with held(), _unwritable_as_output_error(out, option):
                made += _make_parents(out.parent)
                folders.append(_temp_dir(out.parent, _tmp_prefix(out.name)))
            tmps.append(folders[-1] / out.name)
        yield tmps
        if recheck is not None:
            check_out_files(outs, **recheck)
        with held():
            _commit([(option, out, tmp) for (option, out), tmp in zip(pairs, tmps)])
            ok = True
    except Exception as exc:
        failure = exc
        raise
    finally:
        with held():
            for folder in folders:
                shutil.rmtree(folder, ignore_errors=True)
            if not ok:
                _remove_empty(sorted(made, key=lambda d: len(d.parts), reverse=True))
        if failure is not None and pairs:
            full = no_space(failure)
            where = _failed_path(full) if full is not None else None
            i = next((i for i, f in enumerate(folders)
                      if where is not None and _inside(where.absolute(), f)), 0)
            _as_no_space(failure, outs[i][1], outs[i][0], folders[i] if folders else None)


@contextlib.contextmanager
def atomic_file(out, *, option: str = "--out") -> Iterator[Path]:
    """Yield a temporary path for ``out`` (named like it, inside a marked temporary folder
    next to it); on success it is moved to ``out`` (:func:`atomic_files`).
    (Check ``out`` first with :func:`check_out_file`.)"""
    with atomic_files([(option, out)]) as (tmp,):
        yield tmp


def _write_one(df, tmp: Path) -> None:
    from reports.csvsafe import write_csv

    if tmp.suffix.lower() == ".csv":
        write_csv(df, tmp)
    else:
        df.to_parquet(tmp, index=False)


def write_tables(tables: Iterable[tuple[str, object, object]], *, force: bool = False,
                 inputs: Iterable = ()) -> None:
    """Write every ``(option, path, df)`` (``None`` paths skipped) as CSV (formula-safe)
    or parquet, chosen by the suffix, all or nothing: every path is checked first
    (:func:`check_out_files`, suffixes included), all tables are written to temporaries,
    and only then are they moved into place; on any failure no new file is left and every
    existing file is as it was."""
    tables = [(option, path, df) for option, path, df in tables if path is not None]
    outs = [(option, path) for option, path, _ in tables]
    check = dict(force=force, inputs=list(inputs), suffixes=TABLE_SUFFIXES)
    check_out_files(outs, **check)
    with atomic_files(outs, recheck=check) as tmps:
        for (_, _, df), tmp in zip(tables, tmps):
            with named(tmp):
                _write_one(df, tmp)


def write_table(df, out, *, force: bool = False, inputs: Iterable = (),
                option: str = "--out") -> None:
    """Write ``df`` atomically as CSV (formula-safe) or parquet, chosen by the suffix of
    ``out``, after :func:`check_out_file` (:func:`write_tables` of one table)."""
    write_tables([(option, out, df)], force=force, inputs=inputs)
