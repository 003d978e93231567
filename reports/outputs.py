"""Where clinrel writes: it never destroys a file it did not write, and never replaces a
user's file unless asked (``--force``). Everything is built in a marked temporary folder
``.NAME.tmp-PID-*`` beside the output and moved into place only when complete (several
files: all or none); a leftover is removed only when its marker proves it is a dead clinrel
run's, never a bare file. The rules are in ``docs/outputs.md``.
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
import stat
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
    return str(given) if given.is_absolute() else f"{given} ({given.absolute()})"


def _names(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


# --------------------------------------------------------------------------- environment

#: errno values of a full disk (ENOSPC) and of an exhausted quota (EDQUOT)
NO_SPACE_ERRNOS = tuple(e for e in (getattr(errno, "ENOSPC", None), getattr(errno, "EDQUOT", None))
                        if e is not None)
_OS_ERROR_NUMBER = re.compile(r"\(os error (\d+)\)")   # typst's (Rust's) way of naming errno


def no_space(exc: BaseException | None) -> OSError | None:
    """The ``OSError`` (ENOSPC or EDQUOT) behind ``exc`` (itself, its cause or its
    context), else None. An error whose text is the system's message for them (pandoc's
    ``resource exhausted (No space left on device)``, typst's ``(os error 28)``, pyarrow's
    ``[errno 28]``) counts: it is returned as an ``OSError`` with that errno."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS:
            return exc
        if isinstance(exc, (OSError, RuntimeError)):
            number = _OS_ERROR_NUMBER.search(str(exc))
            for code in NO_SPACE_ERRNOS:
                if (number and int(number.group(1)) == code) or os.strerror(code) in str(exc):
                    return OSError(code, os.strerror(code))
        exc = exc.__cause__ or exc.__context__
    return None


def _failed_path(err: OSError) -> Path | None:
    """The file a write failed on (``filename2`` is the destination of a copy)."""
    for name in (getattr(err, "filename2", None), err.filename):
        if isinstance(name, (str, bytes, os.PathLike)) and name:
            return Path(os.fsdecode(name)).absolute()
    return None


def no_space_error(err: OSError, out, option: str, tmp: Path | None = None) -> OutputError:
    """``MSG_NO_SPACE`` (``MSG_NO_SPACE_TEMP`` for the report's build folder in the
    temporary directory) for ``err`` met while writing ``out``; ``tmp``: the temporary
    folder the output was being built in (a file in it is named by its path in the
    output)."""
    quota = getattr(errno, "EDQUOT", None) is not None and err.errno == errno.EDQUOT
    kw = dict(option=option, out=_shown(out),
              reason=("the disk quota is exhausted (Disk quota exceeded)" if quota
                      else "the disk is full (No space left on device)"),
              fix="free space (or ask for a larger quota)" if quota else "free space")
    what, where, failed = "the output", Path(out).absolute().parent, _failed_path(err)
    temp = Path(tempfile.gettempdir()).absolute()
    if failed is not None and tmp is not None and _inside(failed, Path(tmp).absolute()):
        what = rel if (rel := str(failed.relative_to(Path(tmp).absolute()))) != "." else what
    elif failed is not None and (failed == temp or any(map(_BUILD.match, failed.parts))):
        return OutputError(MSG_NO_SPACE_TEMP.format(
            **kw, where=temp, what=failed.name if failed != temp else "the report's build folder"))
    elif failed is not None:
        what, where = str(failed), failed.parent
    return OutputError(MSG_NO_SPACE.format(**kw, what=what, where=where))


def _as_output_error(exc: BaseException, out, option: str, tmp: Path | None = None) -> None:
    """Raise ``exc`` as an :class:`OutputError` when it is an ``OSError``: ``MSG_NO_SPACE``
    for a full disk or quota (also behind another error), else ``MSG_UNWRITABLE``; return
    for anything else (a signal's ``SystemExit`` is never replaced)."""
    if not isinstance(exc, Exception) or isinstance(exc, OutputError):
        return
    if (full := no_space(exc)) is not None:
        raise no_space_error(full, out, option, tmp) from None
    if isinstance(exc, OSError):
        raise OutputError(MSG_UNWRITABLE.format(option=option, out=_shown(out),
                                                reason=exc.strerror or type(exc).__name__)) from None


@contextlib.contextmanager
def _output_errors(out, option: str, tmp: Path | None = None) -> Iterator[None]:
    """An ``OSError`` inside the block becomes an :class:`OutputError` (:func:`_as_output_error`)."""
    try:
        yield
    except OSError as exc:
        _as_output_error(exc, out, option, tmp)
        raise


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


#: the longest name (bytes) a temporary keeps in full; a longer one is cut and hashed
MAX_SHOWN_NAME_BYTES = 200


def _tmp_prefix(name: str) -> str:
    """``.NAME.tmp-``, NAME cut to 180 bytes plus ``~`` and 12 hex digits of its sha256
    when it is longer than :data:`MAX_SHOWN_NAME_BYTES`: temporaries next to any legal
    name stay within ``NAME_MAX``."""
    raw = os.fsencode(name)
    if len(raw) > MAX_SHOWN_NAME_BYTES:
        name = raw[:180].decode("utf-8", "ignore") + "~" + hashlib.sha256(raw).hexdigest()[:12]
    return f".{name}.tmp-"


def _check_length(out, option: str) -> None:
    """Refuse a name longer than the file system allows (``NAME_MAX`` of the nearest
    existing folder, else 255), or a path of ``PATH_MAX`` (else 4096) bytes or more
    (``ENAMETOOLONG`` would otherwise come from the first look at it)."""
    full = Path(out).absolute()
    probe = next((p for p in full.parents if os.path.isdir(p)), Path(full.anchor))
    limit = {}
    for key, default in (("PC_NAME_MAX", 255), ("PC_PATH_MAX", 4096)):
        try:
            limit[key] = os.pathconf(probe, key)
        except (OSError, ValueError, AttributeError):
            limit[key] = -1
        limit[key] = limit[key] if limit[key] > 0 else default
    for part in full.parts:
        if (n := len(os.fsencode(part))) > limit["PC_NAME_MAX"]:
            shown = repr(part[:40] + "..." if len(part) > 43 else part)
            _refuse(MSG_NAME_TOO_LONG, option=option, out=out, name=shown, n=n,
                    limit=limit["PC_NAME_MAX"])
    if (n := len(os.fsencode(str(full)))) >= limit["PC_PATH_MAX"]:
        _refuse(MSG_PATH_TOO_LONG, option=option, out=out, n=n, limit=limit["PC_PATH_MAX"] - 1)


# --------------------------------------------------------------------------- ownership

def _walk(folder: Path) -> tuple[list[str], list[str]]:
    """``(files, folders)`` below ``folder`` as sorted relative POSIX paths: files are every
    entry that is not a real folder (links included, never followed)."""
    files, dirs = [], []
    for root, subdirs, names in os.walk(folder):
        base = Path(root)
        for d in subdirs:
            (files if (base / d).is_symlink() else dirs).append((base / d).relative_to(folder).as_posix())
        files += [(base / f).relative_to(folder).as_posix() for f in names]
    return sorted(files), sorted(dirs)


#: the folders of a report, allowed (even empty) in a report written before manifests
#: listed folders
_REPORT_FOLDERS = {"tables", "figures", "results"}


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


#: the most clinrel reads of its own bookkeeping files (a manifest, a marker): anything
#: larger, or not a regular file, is not clinrel's
MAX_BOOKKEEPING_BYTES = 64 * 2 ** 20


def _read_json(path: Path) -> dict | None:
    """The JSON object in ``path`` when it is a regular file (never followed through a link,
    never blocked on a FIFO or device) of at most :data:`MAX_BOOKKEEPING_BYTES`; else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BOOKKEEPING_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            out = json.loads(fh.read(MAX_BOOKKEEPING_BYTES + 1).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    finally:
        os.close(fd)
    return out if isinstance(out, dict) else None


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
    files, dirs = _walk(folder)
    found = [f for f in files if f != MANIFEST]
    man = _read_json(folder / MANIFEST)
    listed = man.get("files") if man is not None and man.get("generator") == GENERATOR else None
    if not isinstance(listed, dict):
        # no manifest, another program's, or a report written before manifests listed their
        # files' sha256: clinrel cannot tell whether its files were edited, so not its own
        extra = sorted(found + [d + "/" for d in dirs])
        return "foreign", extra + [MANIFEST] * (MANIFEST in files)
    folders = man.get("folders")
    allowed = {p.as_posix() for f in listed for p in Path(f).parents if p.as_posix() != "."}
    allowed |= (set(map(str, folders)) if isinstance(folders, list)
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
    clinrel made is not taken for the user's); an existing manifest (a report's) is
    extended."""
    (folder / PARTIAL).unlink(missing_ok=True)
    man = _read_json(folder / MANIFEST) or {
        "command": f"clinrel {command}",
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    files, dirs = _walk(folder)
    man.update(generator=GENERATOR, folders=dirs,
               files={f: _sha256(folder / f) for f in files if f != MANIFEST})
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


def check_out_dir(out, *, force: bool = False, inputs: Iterable = (),
                  option: str = "--out") -> Path:
    """Refuse (:class:`OutputError`) a folder output clinrel may not write
    (``docs/outputs.md``). Returns the absolute path."""
    given = Path(out)
    _check_length(given, option)
    out = given.absolute()
    real = out.resolve()
    if out.is_symlink():
        _refuse(MSG_DIR_LINK, option=option, out=given)
    if real.parent == real or _inside(Path.cwd().resolve(), real):
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
    suffix, an input, a folder, an existing file without ``force``, a link, an unwritable
    place."""
    out = Path(out)
    _check_length(out, option)
    if out.is_dir():
        example = out / ("result" + (suffixes[0] if suffixes else ".csv"))
        _refuse(MSG_FILE_IS_DIR, option=option, out=out, example=example)
    if suffixes is not None and out.suffix.lower() not in suffixes:
        _refuse(MSG_FILE_SUFFIX, option=option, out=out, suffix=out.suffix.lower())
    for inp in filter(None, inputs):
        same = Path(inp).resolve() == out.resolve()
        with contextlib.suppress(OSError):
            same = same or (out.exists() and Path(inp).exists() and os.path.samefile(inp, out))
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


# --------------------------------------------------------------------------- temporaries

_TMP = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)-[^/]+$")
_OLD = re.compile(r"^\.(?P<name>.+)\.old-(?P<pid>\d+)$")
_BUILD = re.compile(r"^clinrel-build-(?P<pid>\d+)-[^/]+$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):
        pass  # not ours to judge (another user's process, or not a pid)
    return True


def _partial_of_dead_run(folder: Path, pid: int) -> bool:
    """A temporary folder of a clinrel run on this host whose process is gone."""
    info = _read_json(folder / PARTIAL)
    return (info is not None and info.get("pid") == pid
            and info.get("host") == socket.gethostname() and not _alive(pid))


def _clinrel_folder(p: Path) -> bool:
    return not p.is_symlink() and p.is_dir() and classify(p)[0] == "clinrel"


def clean_stale(parent: Path) -> list[Path]:
    """Remove (or restore) the leftovers of killed clinrel runs in ``parent``; return them.
    Only marked folders of dead runs on this host, never a file (``docs/outputs.md``)."""
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
                if not _alive(int(m["pid"])) and _clinrel_folder(p):
                    target = p.parent / m["name"]
                    if target.exists() or target.is_symlink():
                        shutil.rmtree(p)
                    else:
                        p.rename(target)
                    handled.append(p)
    return handled


def _restore_parked(folder: Path) -> bool:
    """Put back the old output a dead run parked in ``folder`` (its marker's ``restore``)
    when nothing has taken its place; False when ``folder`` holds a parked ``old`` that is
    not (or no longer) a complete clinrel output: then it is not removed at all."""
    info = _read_json(folder / PARTIAL) or {}
    name, old = info.get("restore"), folder / "old"
    if "restore" not in info or not (old.exists() or old.is_symlink()):
        return True
    plain = (isinstance(name, str) and name not in ("", ".", "..") and "/" not in name
             and "\0" not in name and os.sep not in name)
    if not plain or not _clinrel_folder(old):
        return False
    if not (folder.parent / name).exists() and not (folder.parent / name).is_symlink():
        old.rename(folder.parent / name)
    return True


def _make_parents(folder: Path) -> list[Path]:
    """``mkdir -p folder``; return the folders it created, deepest first (so that a failed
    command can remove them again). ``folder`` is resolved first: in ``new/../mine`` the
    folder made is ``mine`` (or none, when it exists), never ``new``."""
    folder = Path(os.path.realpath(folder))
    missing, probe = [], folder
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
    """A new folder ``PREFIXPID-*`` in ``parent`` holding the marker (pid, host, ``info``),
    removed again when the marker cannot be written (a full disk). Call it :func:`held`:
    no signal between the folder and its marker, or before the caller has recorded it."""
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

def _resolved(out) -> Path:
    """``out`` with its parent resolved (links and ``..`` as the system would follow them),
    its name kept."""
    return Path(os.path.realpath(Path(out).absolute().parent)) / Path(out).name


@contextlib.contextmanager
def atomic_dir(out, *, force: bool = False, inputs: Iterable = (), option: str = "--out",
               command: str = "output") -> Iterator[Path]:
    """Yield a temporary folder next to ``out`` (absolute, so tools that change directory
    still write inside it); on success it is marked as clinrel's (:func:`stamp`) and
    replaces ``out``. ``out`` is checked first (:func:`check_out_dir`) and again just
    before the swap, where an existing ``out`` is parked as ``old`` in a marked folder
    naming it (so that a kill in between can be undone: :func:`clean_stale`). On any
    exception the temporary folder is removed and ``out`` is left as it was."""
    given, out, inputs = out, _resolved(out), list(inputs)
    clean_stale(out.parent)
    check_out_dir(given, force=force, inputs=inputs, option=option)
    made: list[Path] = []
    tmp = work = None
    try:
        with held(), _output_errors(out, option):
            made = _make_parents(out.parent)
            tmp = work = _temp_dir(out.parent, _tmp_prefix(out.name))
            mask = os.umask(0)   # mkdtemp makes it 0700: give the mode mkdir would give
            os.umask(mask)
            tmp.chmod(0o777 & ~mask)
        yield tmp
        with held():
            with _output_errors(given, option, work):
                stamp(tmp, command)
            check_out_dir(given, force=force, inputs=inputs, option=option)
            with _output_errors(given, option, work):
                if not (out.exists() or out.is_symlink()):
                    tmp.rename(out)
                else:
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
            tmp, made = None, []
    except BaseException as exc:
        with held():
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            _remove_empty(made)
        if no_space(exc) is not None:   # any other error of the caller's block stays itself
            _as_output_error(exc, given, option, work)
        raise


#: the name of the earlier file kept inside a file output's temporary folder
_KEPT = ".clinrel-old"


def _commit(moves: list[tuple[str, Path, Path]]) -> None:
    """Move every finished ``(option, out, tmp)`` into place, all or none: when one move
    fails, those already made are undone (the earlier file back, or the new one removed).
    A second name (or a copy) of the earlier file is kept inside the temporary's marked
    folder until then, so a kill in between leaves it or the new file at ``out``."""
    done: list[tuple[Path, Path | None]] = []
    try:
        for option, out, tmp in moves:
            with _output_errors(out, option, tmp.parent):
                backup = None
                if out.exists() or out.is_symlink():
                    backup = tmp.parent / (_KEPT if out.name != _KEPT else _KEPT + "-")
                    try:
                        os.link(out, backup, follow_symlinks=False)
                    except OSError:
                        shutil.copy2(out, backup, follow_symlinks=False)
                os.replace(tmp, out)
            done.append((out, backup))
    except BaseException:
        for out, backup in reversed(done):
            with contextlib.suppress(OSError):
                os.replace(backup, out) if backup is not None else out.unlink()
        raise


@contextlib.contextmanager
def atomic_files(outs: Iterable[tuple[str, object]], *,
                 recheck: dict | None = None) -> Iterator[list[Path]]:
    """Yield a temporary path for every ``(option, out)``: ``NAME`` inside a marked folder
    ``.NAME.tmp-PID-*`` next to ``out``. When the block succeeds, all of them are moved
    into place together (:func:`_commit`), else none is and every existing file is left as
    it was; the folders, and parent folders made for the outputs, are removed on the way
    out. Check the outputs first (:func:`check_out_files`); ``recheck``, the keywords of
    that check, repeats it just before the moves (a file may have appeared meanwhile)."""
    outs = list(outs)
    pairs = [(option, _resolved(out)) for option, out in outs]
    folders: list[Path] = []
    made: list[Path] = []
    ok = False
    try:
        for option, out in pairs:
            clean_stale(out.parent)
            with held(), _output_errors(out, option):
                made += _make_parents(out.parent)
                folders.append(_temp_dir(out.parent, _tmp_prefix(out.name)))
        yield [f / out.name for f, (_, out) in zip(folders, pairs)]
        if recheck is not None:
            check_out_files(outs, **recheck)
        with held():
            _commit([(option, out, f / out.name) for f, (option, out) in zip(folders, pairs)])
            ok = True
    except Exception as exc:
        full = no_space(exc)
        where = _failed_path(full) if full is not None else None
        i = next((i for i, f in enumerate(folders) if where is not None and _inside(where, f)), 0)
        if full is not None and pairs:
            _as_output_error(exc, outs[i][1], outs[i][0], folders[i] if folders else None)
        raise
    finally:
        with held():
            for folder in folders:
                shutil.rmtree(folder, ignore_errors=True)
            if not ok:
                _remove_empty(sorted(made, key=lambda d: len(d.parts), reverse=True))


@contextlib.contextmanager
def atomic_file(out, *, option: str = "--out") -> Iterator[Path]:
    """:func:`atomic_files` for one output (check ``out`` first with :func:`check_out_file`)."""
    with atomic_files([(option, out)]) as (tmp,):
        yield tmp


def write_tables(tables: Iterable[tuple[str, object, object]], *, force: bool = False,
                 inputs: Iterable = ()) -> None:
    """Write every ``(option, path, df)`` (``None`` paths skipped) as CSV (formula-safe)
    or parquet, chosen by the suffix, all or nothing: every path is checked first
    (:func:`check_out_files`, suffixes included), all tables are written to temporaries,
    and only then are they moved into place; on any failure no new file is left and every
    existing file is as it was."""
    from reports.csvsafe import write_csv

    tables = [(option, path, df) for option, path, df in tables if path is not None]
    outs = [(option, path) for option, path, _ in tables]
    check = dict(force=force, inputs=list(inputs), suffixes=TABLE_SUFFIXES)
    check_out_files(outs, **check)
    with atomic_files(outs, recheck=check) as tmps:
        for (_, _, df), tmp in zip(tables, tmps):
            with named(tmp):
                write_csv(df, tmp) if tmp.suffix.lower() == ".csv" else df.to_parquet(tmp, index=False)


def write_table(df, out, *, force: bool = False, inputs: Iterable = (),
                option: str = "--out") -> None:
    """:func:`write_tables` of one table."""
    write_tables([(option, out, df)], force=force, inputs=inputs)
