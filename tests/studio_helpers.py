"""Shared by the studio's tests and ``bench/studio.py``: start a real ``benchclaw studio``
process on a free loopback port, and act as a visitor over plain HTTP (``http.client``:
explicit headers, no redirects followed, cookies kept by hand).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode, urlsplit

CLI = "import sys; from benchclaw.cli import main; sys.argv[0] = 'benchclaw'; main()"
_URL = re.compile(r"serving on (http://[0-9.]+:[0-9]+)")
_CSRF = re.compile(r'name="csrf" value="([0-9a-f]+)"')


def write_config(path: Path, *, catalog: str = "sim", tasks=("quotes-incident",), policies=("always:lightning",),
                 profiles=("direct",), session_usd="0.01", session_tokens=1_000_000, session_runs=50,
                 day_usd="1.00", day_tokens=50_000_000, per_call_usd="0.05", session_concurrency=1,
                 global_concurrency=64, starts_per_minute=60, global_starts_per_minute=6000,
                 max_tokens=1024, turns=12, seconds=60, latency_scale=None, secret_file=None,
                 extra: str = "") -> Path:
    lines = ['v = 1', f'catalog = "{catalog}"', f"tasks = {json.dumps(list(tasks))}",
             f"policies = {json.dumps(list(policies))}", f"profiles = {json.dumps(list(profiles))}", extra,
             "[run]", f"max_tokens = {max_tokens}", f"turns = {turns}", f"seconds = {seconds}",
             "[budget.session]", f'usd = "{session_usd}"', f"tokens = {session_tokens}", f"runs = {session_runs}",
             "[budget.day]", f'usd = "{day_usd}"', f"tokens = {day_tokens}", f'per_call_usd = "{per_call_usd}"',
             "[limits]", f"session_concurrency = {session_concurrency}", f"global_concurrency = {global_concurrency}",
             f"starts_per_minute = {starts_per_minute}", f"global_starts_per_minute = {global_starts_per_minute}"]
    if secret_file:
        lines += ["[server]", f'secret_file = "{secret_file}"']
    if latency_scale is not None:
        lines += ["[sim]", f"latency_scale = {latency_scale}"]
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class StudioProcess:
    """``benchclaw studio`` in a child process; ``url`` once it listens."""

    config: Path
    runs: Path
    env: dict = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    url: str = ""
    log: Path | None = None

    def start(self, timeout: float = 30.0) -> "StudioProcess":
        env = {**os.environ, **self.env}
        self.log = self.runs.parent / f"studio-{time.monotonic_ns()}.log"
        self._logf = open(self.log, "wb")
        self.proc = subprocess.Popen([sys.executable, "-c", CLI, "studio", "--config", str(self.config),
                                      "--runs", str(self.runs), "--port", "0", "--log-level", "warning"],
                                     stdout=self._logf, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = _URL.search(self.log.read_text(errors="replace"))
            if m:
                self.url = m.group(1)
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"studio exited {self.proc.returncode}: {self.log.read_text()}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"studio did not start: {self.log.read_text()}")

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, as a power cut or the OOM killer."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._logf.close()

    def stop(self) -> int:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._logf.close()
        return self.proc.returncode

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


@dataclass
class Response:
    status: int
    headers: dict
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class Visitor:
    """One browser's worth of state: a cookie, the last form token."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.cookie: str | None = None
        self.csrf: str | None = None
        self.seen: list[Response] = []

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
                timeout: float = 30.0) -> Response:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        h = dict(headers or {})
        if self.cookie and "Cookie" not in h:
            h["Cookie"] = self.cookie
        try:
            conn.request(method, path, body=body, headers=h)
            r = conn.getresponse()
            resp = Response(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()
        set_cookie = resp.headers.get("set-cookie")
        if set_cookie:
            self.cookie = set_cookie.split(";")[0]
        self.seen.append(resp)
        return resp

    def home(self) -> Response:
        r = self.request("GET", "/")
        m = _CSRF.search(r.text)
        self.csrf = m.group(1) if m else self.csrf
        return r

    def start(self, task: str, policy: str, profile: str = "direct", *, headers: dict | None = None,
              csrf: str | None = None) -> Response:
        if self.cookie is None:
            self.home()
        form = urlencode({"csrf": self.csrf if csrf is None else csrf, "task": task, "policy": policy,
                          "profile": profile}).encode()
        h = {"Content-Type": "application/x-www-form-urlencoded", "Origin": f"http://{self.host}:{self.port}",
             "Sec-Fetch-Site": "same-origin", **(headers or {})}
        return self.request("POST", "/start", form, h)

    def events(self, job_path: str, timeout: float = 120.0, t0: float | None = None
               ) -> tuple[list[tuple[str, dict]], float | None, bytes]:
        """Follow a job's event stream to its end: (events, ms from ``t0`` (default: the
        stream opening) to the first call/action event, raw bytes)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        t0 = time.monotonic() if t0 is None else t0
        first = None
        out, raw = [], b""
        try:
            conn.request("GET", job_path + "/events", headers={"Cookie": self.cookie or ""})
            r = conn.getresponse()
            assert r.status == 200, r.status
            assert r.getheader("content-type", "").startswith("text/event-stream")
            kind = None
            while True:
                line = r.fp.readline()
                if not line:
                    break
                raw += line
                line = line.rstrip(b"\r\n")
                if line.startswith(b"event: "):
                    kind = line[7:].decode()
                elif line.startswith(b"data: "):
                    out.append((kind, json.loads(line[6:])))
                    if first is None and kind in ("call", "action"):
                        first = (time.monotonic() - t0) * 1000
                    if kind == "done":
                        break
        finally:
            conn.close()
        return out, first, raw
