"""Reading and writing the files a user names, safely.

Reads: opened without blocking (a FIFO never hangs), only regular files, at most a limit
of bytes (``st_size`` is 0 for ``/dev/zero``, so the limit is on what is read), UTF-8.
Writes: checked before any work, never through a symbolic link or into a FIFO, device or
folder, never over an existing file without ``force`` nor over an input of the same
command, and written through a unique temporary file in the destination folder, synced and
renamed over the target (a reader sees the old file or the new one, never half of one).

Every ``OSError`` and decode error becomes an :class:`InputError` naming the path.
This module sits below the specs layer: it imports nothing of the planner but its errors.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from planner.errors import InputError

#: Spec files (models, clusters, plans, pricing, sweeps, DLRM tables, Megatron argument
#: files): the largest in the catalog is a few KB and a 12,000-table DLRM file 0.6 MB.
MAX_SPEC_BYTES = 1 << 20

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


def _umask() -> int:
    # read once, at import (single-threaded): os.umask can only be read by setting it
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _umask()


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words (``a FIFO (named pipe)``, ``a directory``...)."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _reason(err: OSError) -> str:
    if err.errno == errno.ENOENT:
        return "no such file"
    return (err.strerror or str(err)).lower() if err.errno is not None else str(err)


def _label(what: str, path: str | os.PathLike[str]) -> str:
    return f"{what} {os.fspath(path)}" if what else os.fspath(path)


# ---- reads ---------------------------------------------------------------------------------
def read_user_bytes(path: str | os.PathLike[str], what: str,
                    limit_bytes: int = MAX_SPEC_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit_bytes`` of them; an
    :class:`InputError` starting with ``what`` and the path otherwise."""
    label = _label(what, path)
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        if err.errno == errno.EISDIR:
            raise InputError(f"{label}: a directory, not a regular file") from None
        raise InputError(f"{label}: cannot read: {_reason(err)}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{label}: {file_kind(st.st_mode)}, not a regular file")
        chunks, size = [], 0
        while size <= limit_bytes:
            chunk = os.read(fd, min(1 << 16, limit_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as err:
        raise InputError(f"{label}: cannot read: {_reason(err)}") from None
    finally:
        os.close(fd)
    if size > limit_bytes:
        raise InputError(f"{label}: larger than {limit_bytes:,} bytes, the limit for such "
                         "files")
    return b"".join(chunks)


def read_user_file(path: str | os.PathLike[str], what: str,
                   limit_bytes: int = MAX_SPEC_BYTES) -> str:
    """:func:`read_user_bytes` decoded as UTF-8 (a clear error naming the byte otherwise)."""
    data = read_user_bytes(path, what, limit_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{_label(what, path)}: not UTF-8 text (byte {err.start:,}); "
                         "expected a text file") from None


# ---- outputs -------------------------------------------------------------------------------
def _parent(path: str) -> str:
    return os.path.dirname(path) or "."


def check_output(path: str, option: str, *, force: bool) -> None:
    """An :class:`InputError` naming ``option`` unless ``path`` can be written: its folder
    exists and is writable, and it is absent or (with ``force``) a writable regular file;
    never a symbolic link, FIFO, device or folder."""
    label = f"{option} {path}"
    if not path:
        raise InputError(f"{option}: expected a file path, got an empty string")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise InputError(f"{label}: cannot write: {_reason(err)}") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise InputError(f"{label}: a symbolic link; outputs are never written through "
                             "one (it could point at any file); give the target's own path")
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{label}: {file_kind(st.st_mode)}, not a regular file; "
                             "expected a file path")
        if not force:
            raise InputError(f"{label}: the file exists; pass --force to replace it")
        # the mode bits, not os.access: as root os.access allows everything
        if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(
                path, os.W_OK, follow_symlinks=False):
            raise InputError(f"{label}: a read-only file (mode {stat.S_IMODE(st.st_mode):o}); "
                             "make it writable or choose another path")
    parent = _parent(path)
    try:
        pst = os.stat(parent)
    except FileNotFoundError:
        raise InputError(f"{label}: the folder {parent} does not exist") from None
    except OSError as err:
        raise InputError(f"{label}: cannot write into {parent}: {_reason(err)}") from None
    if not stat.S_ISDIR(pst.st_mode):
        raise InputError(f"{label}: {parent} is not a folder")
    if not os.access(parent, os.W_OK):
        raise InputError(f"{label}: the folder {parent} is not writable")
    try:  # what only creating a file tells: a read-only file system, a name too long ...
        fd, tmp = _temp(path)
    except OSError as err:
        raise InputError(f"{label}: cannot write: {_reason(err)}") from None
    os.close(fd)
    os.unlink(tmp)


def _same(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` are one file (symlinks resolved, hard links too)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_outputs(outputs: Sequence[tuple[str, str | None]],
                  inputs: Sequence[tuple[str, str | None]], *, force: bool,
                  keep: Collection[str] = ()) -> None:
    """Check every ``(option, path)`` output (None: not given) as :func:`check_output`
    does, and that no output is an input of the same command (``(what, path)``; a path that
    is not an existing file, e.g. a catalog name, is no file input) or another output.
    ``keep``: options whose existing file the command updates (the resumable sweep table,
    which has its own lock), allowed without ``force``."""
    given = [(o, p) for o, p in outputs if p is not None]
    files = [(w, p) for w, p in inputs if p and os.path.isfile(p)]
    for i, (option, path) in enumerate(given):
        for what, src in files:
            if _same(path, src):
                raise InputError(f"{option} {path}: is {what} ({src}), an input of this "
                                 "command; writing it would replace the input; choose "
                                 "another path")
        for other, path2 in given[:i]:
            if _same(path, path2):
                raise InputError(f"{option} {path}: the same file as {other} {path2}; give "
                                 "each output its own path")
        check_output(path, option, force=force or option in keep)


def _temp(path: str) -> tuple[int, str]:
    """A new, unique temporary file beside ``path`` (same file system: the rename is
    atomic), keeping its suffix (matplotlib picks the format from it)."""
    name = os.path.basename(path)
    return tempfile.mkstemp(prefix=f".{name[:32]}.", suffix=f".tmp{Path(name).suffix[:16]}",
                            dir=_parent(path))


def _replace_checked(tmp: str, path: str, option: str, force: bool) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:  # what check_output saw may have changed while the command ran
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
            raise InputError(f"{option} {path}: now {file_kind(st.st_mode)}, not a regular "
                             "file; not written")
        if not force:
            raise InputError(f"{option} {path}: the file appeared while this command ran; "
                             "pass --force to replace it")
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; an output gets the usual mode
    os.replace(tmp, path)


@contextmanager
def atomic_output(path: str | os.PathLike[str], option: str, *,
                  force: bool = True) -> Iterator[str]:
    """A temporary path beside ``path`` for a writer that needs a file name (matplotlib,
    pyarrow); on success it is synced and renamed over ``path``, on failure removed.
    ``force`` False refuses a file that appeared since the up-front check."""
    target = os.fspath(path)
    try:
        fd, tmp = _temp(target)
    except OSError as err:
        raise InputError(f"{option} {target}: cannot write: {_reason(err)}") from None
    os.close(fd)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        _replace_checked(tmp, target, option, force)
    except OSError as err:
        raise InputError(f"{option} {target}: cannot write: {_reason(err)}") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def write_output_atomic(path: str | os.PathLike[str], data: str | bytes, option: str, *,
                        force: bool = True) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` through a unique temporary file, synced
    and renamed over it; every ``OSError`` an :class:`InputError` naming ``option``."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_output(path, option, force=force) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(raw)
