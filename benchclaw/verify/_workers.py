"""Run part of a verification in a forked child, so a second core works on it.

Why ``os.fork`` and a pipe rather than ``multiprocessing``: the verifier must not import a
networking module (``multiprocessing`` imports ``socket``), and a fork starts in
microseconds with everything already read (the zip bytes, the parsed runs) shared
copy-on-write, where a fresh interpreter would read and parse the bundle again.

The child runs one pure function and writes its JSON result (plain dicts, lists, strings
and numbers; never pickle) to a pipe, then leaves with ``os._exit`` (no cleanup handler,
no buffered output of the parent flushed twice, no file created; a function with a bulky
result writes it into an unlinked temporary file the parent opened, ``_reading``). Whatever goes wrong in
the child is an answer, not a hang: an exception becomes an error result, a crash (no
complete result) or a child still running after ``Limits.worker_seconds`` is killed and
reported as ``UnreadableBundle`` (exit 2). Without ``fork`` (or when it fails) the function
simply runs in the calling process.

How the work is split: not in halves fixed in advance (the parent has other work besides
its half, and either core may be busy with another program), but as it goes (``Shares``):
the child takes items from the front, the parent from the back, until they meet.
"""

from __future__ import annotations

import mmap
import os
from collections import deque
import select
import signal
import time
from typing import Callable

from ..formats import jsonio
from ._errors import UnreadableBundle

__all__ = ["start", "Pending", "Raw", "Shares", "Received"]


_FREE, _FRONT, _BACK = 0, 1, 2


class Shares:
    """Items ``0 .. n-1`` shared out between a forked child, which takes them from the front
    (``front()``), and this process, which takes them from the back (``back()``), each until
    it meets an item the other took: whichever is slower takes fewer. One byte an item, in
    an anonymous mapping shared across the fork, says who took it; each side marks an item
    before it works on it and stops at the first the other marked, so no item is left out.
    Both may take the one item where they meet (each read the other's mark too late): the
    caller keeps either result, which are equal. Without a fork the child's function runs
    first, here, and takes every item."""

    def __init__(self, n: int):
        self.n = n
        self._board = mmap.mmap(-1, max(n, 1))  # MAP_SHARED | MAP_ANONYMOUS: the child writes to the same pages

    def front(self):
        """The items, from the first, as long as the parent took none of them (in the child)."""
        board = self._board
        for i in range(self.n):
            if board[i] == _BACK:
                return
            board[i] = _FRONT
            yield i

    def back(self):
        """The items, from the last, as long as the child took none of them (here)."""
        board = self._board
        for i in range(self.n - 1, -1, -1):
            if board[i] == _FRONT:
                return
            board[i] = _BACK
            yield i

    def close(self) -> None:
        self._board.close()


class Raw:
    """A result the child has already written (JSON lines, say: the caller reads them one
    at a time, never all parsed at once): ``data`` (bytes or a bytearray, not copied) is
    sent as it is, then each buffer of ``more`` (so a child need not join its parts into
    one copy), and handed back as a ``Raw`` of them all."""

    __slots__ = ("data", "more")

    def __init__(self, data: bytes | bytearray, more: tuple = ()):
        self.data, self.more = data, more


class Pending:
    """A result being computed. ``result()`` returns it (or raises UnreadableBundle);
    ``cancel()`` kills and reaps a child still running (safe to call twice)."""

    def __init__(self, value=None, *, pid: int | None = None, fd: int | None = None,
                 timeout: float = 0.0):
        self._value, self._pid, self._fd, self._timeout = value, pid, fd, timeout
        self._started = time.monotonic()

    def result(self, chunked: bool = False):
        """The child's result; ``chunked``: a ``Raw`` one as ``Received`` (the chunks it
        came in, never joined), else as one bytearray."""
        if self._pid is None:
            value = self._value
            if isinstance(value, Raw):
                parts = [bytes(value.data), *map(bytes, value.more)]
                return Raw(Received(parts)) if chunked else Raw(bytearray(b"".join(parts)))
            return value
        data = Received(list(self._chunks())) if chunked else self._read()
        status = self._reap()
        try:
            if chunked:
                head = data.readline(64)
                if head.startswith(b'["raw",'):
                    kind, n = jsonio.loads(head)
                    if data.left != n:
                        raise ValueError("truncated")
                    return Raw(data)
                data = head + data.read(data.left)
            elif data.startswith(b'["raw",'):  # a header line, then the Raw bytes, all of them
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
        data = bytearray()
        for chunk in self._chunks():
            data += chunk
        return data

    def _chunks(self):
        """Everything the child wrote, the chunks as they come."""
        deadline = self._started + self._timeout
        while True:
            left = deadline - time.monotonic()
            ready = select.select([self._fd], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                self.cancel()
                raise UnreadableBundle("", f"a verification worker took longer than "
                                       f"{self._timeout:g} s (Limits.worker_seconds); stopped")
            chunk = os.read(self._fd, 1 << 20)
            if not chunk:
                return
            yield chunk

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


class Received:
    """A child's bytes as the chunks they came in, read front to back: each chunk is
    dropped once read past, so a result copied out a piece at a time (readings kept as
    separate values) is never held twice."""

    def __init__(self, chunks: list[bytes]):
        self._chunks, self._pos = deque(c for c in chunks if c), 0
        self.left = sum(map(len, self._chunks))  # bytes not yet read

    def read(self, n: int) -> bytes:
        """The next ``n`` bytes. Raises ValueError when fewer are left."""
        if n > self.left or n < 0:
            raise ValueError("truncated")
        self.left -= n
        chunks, pos = self._chunks, self._pos
        if n and pos + n <= len(chunks[0]):
            first = chunks[0]
            out = first if pos == 0 and n == len(first) else first[pos:pos + n]
            pos += n
            if pos == len(first):
                chunks.popleft()
                pos = 0
            self._pos = pos
            return out
        parts = []
        while n:
            first = chunks[0]
            take = min(n, len(first) - pos)
            parts.append(first[pos:pos + take])
            n, pos = n - take, pos + take
            if pos == len(first):
                chunks.popleft()
                pos = 0
        self._pos = pos
        return b"".join(parts)

    def readline(self, limit: int) -> bytes:
        """The next line, its newline included, or the next ``limit`` bytes (fewer: those
        left) when no newline comes within them."""
        seen, pos = 0, self._pos
        for chunk in self._chunks:
            end = chunk.find(b"\n", pos, pos + limit - seen)
            if end >= 0:
                return self.read(seen + end + 1 - pos)
            seen += len(chunk) - pos
            pos = 0
            if seen >= limit:
                break
        return self.read(min(limit, self.left))


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
            parts = ([jsonio.dumps(["raw", len(out[1].data) + sum(map(len, out[1].more))]) + b"\n", out[1].data,
                      *out[1].more] if isinstance(out[1], Raw) else [jsonio.dumps(out)])
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
