"""A simulated full disk, for machines where the disk suite may not mount a tmpfs.

``install(root, budget)`` makes every write under ``root`` (through ``open`` in binary
write/append mode or ``os.write``) count against ``budget`` bytes. The write that crosses
it lands partly, as on a real file system that fills up mid-write, and then fails with
``ENOSPC``; every later write fails at once. A child process installs it from the
environment (``BENCHCLAW_TEST_ENOSPC=<root>:<budget>``) before the CLI starts.
"""

from __future__ import annotations

import builtins
import errno
import os
import threading

_state = {"root": None, "left": 0}
_lock = threading.Lock()
_real_open = builtins.open
_real_write = os.write


def _enospc() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _take(n: int) -> int:
    """Bytes of an ``n``-byte write that still fit (0 = none)."""
    with _lock:
        fit = min(n, _state["left"])
        _state["left"] -= fit
        return fit


class _Quota:
    def __init__(self, f) -> None:
        self._f = f

    def write(self, data) -> int:
        fit = _take(len(data))
        if fit < len(data):
            if fit:
                self._f.write(data[:fit])
                self._f.flush()
            raise _enospc()
        return self._f.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()

    def __getattr__(self, name):
        return getattr(self._f, name)


def _open(file, mode="r", *args, **kw):
    f = _real_open(file, mode, *args, **kw)
    if any(m in mode for m in "wax") and _under_root(file):
        return _Quota(f)  # creating an empty file takes no data blocks; its first write may fail
    return f


def _write(fd: int, data) -> int:
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        path = ""
    if not _under_root(path):
        return _real_write(fd, data)
    fit = _take(len(data))
    if fit == 0 and len(data):
        raise _enospc()
    return _real_write(fd, bytes(data[:fit]))  # a short write, as the kernel reports one


def _under_root(path) -> bool:
    try:
        return _state["root"] is not None and os.path.abspath(os.fspath(path)).startswith(_state["root"])
    except TypeError:
        return False


def install(root: str | None = None, budget: int | None = None) -> None:
    if root is None:
        spec = os.environ.get("BENCHCLAW_TEST_ENOSPC")
        if not spec:
            return
        root, _, b = spec.rpartition(":")
        budget = int(b)
    _state["root"], _state["left"] = os.path.abspath(root), int(budget)
    builtins.open = _open
    os.write = _write
