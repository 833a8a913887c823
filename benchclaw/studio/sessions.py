"""Visitor sessions: who a request belongs to, whether it may change anything, and how often.

Why it is built this way:
- **Nothing to steal on disk.** A session is a random public id (it names the session's
  ledger and appears in evidence) plus an HMAC of it under the studio's secret, carried in
  an HttpOnly, SameSite=Lax cookie. Knowing a session id (from published evidence) is not
  enough to act as that session; the server keeps no session table to fill up.
- **Cross-site forgery.** Every state-changing request carries a form token that is an HMAC
  of the session id under a separate purpose string, and is refused when its ``Origin`` or
  ``Sec-Fetch-Site`` says another site sent it. A forged form from another site has neither
  the token nor the cookie (Lax), and says where it comes from.
- **Rate limits** are sliding windows in memory: they protect the process, while money is
  protected by the durable ledgers (``budgets``), which a restart does not reset.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

__all__ = ["SessionKeys", "RateLimiter", "load_secret", "COOKIE", "SESSION_ID_HEX"]

COOKIE = "benchclaw_studio"
SESSION_ID_HEX = 16


def load_secret(path: str | None) -> bytes:
    """The HMAC secret: read from ``path`` (created with 32 random bytes, mode 0600, when
    missing), or a fresh random one for this process when ``path`` is None (sessions then
    end when the studio restarts; budgets do not). Raises InputError when unreadable."""
    if path is None:
        return secrets.token_bytes(32)
    p = Path(path)
    try:
        if not p.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_hex(32).encode())
        data = p.read_bytes().strip()
    except OSError as e:
        raise InputError(f"{p}: cannot read or create the studio secret ({e.strerror or e})") from None
    if len(data) < 32:
        raise InputError(f"{p}: the studio secret must hold at least 32 characters")
    return data


@dataclass(frozen=True)
class SessionKeys:
    secret: bytes

    def _mac(self, purpose: str, sid: str) -> str:
        return hmac.new(self.secret, f"{purpose}:{sid}".encode(), hashlib.sha256).hexdigest()[:32]

    def new_session(self) -> tuple[str, str]:
        """A fresh session id and its cookie value."""
        sid = secrets.token_hex(SESSION_ID_HEX // 2)
        return sid, f"{sid}.{self._mac('session', sid)}"

    def session_of(self, cookie: str | None) -> str | None:
        """The session id a cookie proves, or None (missing, malformed or forged)."""
        if not cookie or len(cookie) != SESSION_ID_HEX + 33 or cookie[SESSION_ID_HEX] != ".":
            return None
        sid, mac = cookie[:SESSION_ID_HEX], cookie[SESSION_ID_HEX + 1:]
        if not all(c in "0123456789abcdef" for c in sid):
            return None
        return sid if hmac.compare_digest(mac, self._mac("session", sid)) else None

    def csrf_token(self, sid: str) -> str:
        return self._mac("csrf", sid)

    def csrf_ok(self, sid: str, token: str | None) -> bool:
        return isinstance(token, str) and hmac.compare_digest(token.encode(), self.csrf_token(sid).encode())


class RateLimiter:
    """At most ``limit`` events per ``window`` seconds per key (sliding window)."""

    def __init__(self, limit: int, window: float = 60.0, clock=time.monotonic, max_keys: int = 100_000):
        self.limit, self.window, self.clock, self.max_keys = limit, window, clock, max_keys
        self._hits: dict[str, deque] = {}

    def allow(self, key: str) -> bool:
        """Count one event for ``key`` if the window has room; False (nothing counted) if not."""
        now = self.clock()
        q = self._hits.get(key)
        if q is None:
            if len(self._hits) >= self.max_keys:
                self._prune(now)
            q = self._hits[key] = deque()
        while q and q[0] <= now - self.window:
            q.popleft()
        if len(q) >= self.limit:
            return False
        q.append(now)
        return True

    def _prune(self, now: float) -> None:
        for k in [k for k, q in self._hits.items() if not q or q[-1] <= now - self.window]:
            del self._hits[k]
