"""Run part of a verification in a forked child, so a second core works on it.

Why ``os.fork`` and a pipe rather than ``multiprocessing``: the verifier must not import a
networking module (``multiprocessing`` imports ``socket``), and a fork starts in
microseconds with everything already read (the zip bytes, the parsed runs) shared
copy-on-write, where a fresh interpreter would read and parse the bundle again.

The child runs one pure function and writes its JSON result (plain dicts, lists, strings
and numbers; never pickle) to a pipe, then leaves with ``os._exit`` (no cleanup handler,
no buffered output of the parent flushed twice, no file written). Whatever goes wrong in
the child is an answer, not a hang: an exception becomes an error result, a crash (no
complete result) or a child still running after ``Limits.worker_seconds`` is killed and
reported as ``UnreadableBundle`` (exit 2). Without ``fork`` (or when it fails) the function
simply runs in the calling process.
"""

from __future__ import annotations

import os
import select
import signal
import time
from typing import Callable

from ..formats import jsonio
from ._errors import UnreadableBundle

__all__ = ["start", "Pending", "Raw"]


class Raw:
    """A result the child has already written (JSON lines, say: the caller reads them one
    at a time, never all parsed at once): ``data`` (bytes or a bytearray, not copied) is
    sent as it is and handed back as a ``Raw`` again."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | bytearray):
        self.data = data


class Pending:
    """A result being computed. ``result()`` returns it (or raises UnreadableBundle);
    ``cancel()`` kills and reaps a child still running (safe to call twice)."""

    def __init__(self, value=None, *, pid: int | None = None, fd: int | None = None,
                 timeout: float = 0.0):
        self._value, self._pid, self._fd, self._timeout = value, pid, fd, timeout
        self._started = time.monotonic()

    def result(self):
        if self._pid is None:
            return self._value
        data = self._read()
        status = self._reap()
        try:
            if data.startswith(b'["raw",'):  # a header line, then the Raw bytes, all of them
                head = data.find(b"\n")
                kind, n = jsonio.loads(data[:head])
                if len(data) - head - 1 != n:
                    raise ValueError("truncated")
                del data[:head + 1]  # the header dropped in place, not the bytes copied
                return Raw(data)
            kind, value = jsonio.loads(data)
        except (ValueError, TypeError):
            raise UnreadableBundle("", f"a verification worker crashed ({_describe(status)}) "
                                   "before it returned a result") from None
        if kind != "ok":
            raise UnreadableBundle("", f"a verification worker failed: {value}")
        return value

    def cancel(self) -> None:
        if self._pid is not None:
            try:
                os.kill(self._pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap()

    def _read(self) -> bytearray:
        """Everything the child wrote, grown in place (a list of chunks joined at the end
        held the result twice)."""
        data, deadline = bytearray(), self._started + self._timeout
        while True:
            left = deadline - time.monotonic()
            ready = select.select([self._fd], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                self.cancel()
                raise UnreadableBundle("", f"a verification worker took longer than "
                                       f"{self._timeout:g} s (Limits.worker_seconds); stopped")
            chunk = os.read(self._fd, 1 << 20)
            if not chunk:
                return data
            data += chunk

    def _reap(self) -> int:
        pid, self._pid = self._pid, None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if pid is None:
            return 0
        try:
            return os.waitpid(pid, 0)[1]
        except ChildProcessError:
            return 0


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def start(fn: Callable, *args, timeout: float) -> Pending:
    """Start ``fn(*args)`` in a forked child (its return value must be JSON-able). Falls
    back to calling it here when the platform cannot fork."""
    if not hasattr(os, "fork"):
        return Pending(fn(*args))
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return Pending(fn(*args))
    if pid == 0:  # the child: never returns
        _child(fn, args, r, w)
    os.close(w)
    return Pending(pid=pid, fd=r, timeout=timeout)


def _child(fn: Callable, args: tuple, r: int, w: int) -> None:
    code = 0
    try:
        os.close(r)
        try:
            out = ["ok", fn(*args)]
        except BaseException as e:  # noqa: BLE001 - reported to the parent, never a traceback
            out = ["error", f"{type(e).__name__}: {e}"[:500]]
        try:  # a Raw result: a header line, then its bytes as they are (not copied)
            parts = ([jsonio.dumps(["raw", len(out[1].data)]) + b"\n", out[1].data] if isinstance(out[1], Raw)
                     else [jsonio.dumps(out)])
        except (TypeError, ValueError) as e:
            parts = [jsonio.dumps(["error", f"result is not transferable ({e})"[:500]])]
        for data in parts:
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
    except BaseException:  # noqa: BLE001
        code = 1
    finally:
        os._exit(code)
