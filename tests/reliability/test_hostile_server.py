"""A hostile OpenAI-compatible server (issue 14): what it may send, and what holds.

A small standard-library HTTP server on 127.0.0.1 plays the worst endpoint a catalog
could point at. The model id in the request picks its behaviour:

- ``esc``: replies whose content, echoed model id and request id carry terminal escape
  sequences (window title, clear screen, ``\\r`` + a fake "status: passed" line, 8-bit CSI,
  a bidi override), and whose action writes outside the workspace (path tricks);
- ``echo``: a 500 whose every field (message, type, code, param, request id header) is
  escape sequences plus the bearer token it was sent;
- ``giant``: a 6 MB reply (then small ones);
- ``drip``: headers, then one byte every 0.2 s, forever.

Each tier runs through the real CLI (``benchclaw try``), then ``runs ls`` / ``runs show``
print the evidence. The suite asserts that no printed byte is a terminal control (ESC,
BEL, CR, C1, bidi override), that the key appears in no output and no file, that the
path tricks wrote nothing outside the workspace, that the drip is cut at the run's time
limit and the giant reply is kept as evidence, and that ``runs check`` passes.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from .helpers import record_figures

CLI = "import sys; from benchclaw.cli import main; sys.argv[0] = 'benchclaw'; main()"
KEY_ENV = "BENCHCLAW_HOSTILE_TEST_KEY"
NASTY = "\x1b]0;pwned\x07\x1b[2J\r status: passed \x9b31m \u202egnp.exe\n status: passed"
# What a terminal would obey: C0 controls but newline and tab, DEL, C1, bidi overrides.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


class Hostile(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen_keys: list[str] = []

    def log_message(self, *a):  # quiet
        pass

    def do_POST(self):  # any path: the SDK appends /chat/completions to whatever base_url says
        n = int(self.headers.get("content-length") or 0)
        req = json.loads(self.rfile.read(n) or b"{}")
        key = (self.headers.get("authorization") or "").removeprefix("Bearer ")
        Hostile.seen_keys.append(key)
        mode = str(req.get("model", "")).split("/")[-1]
        getattr(self, f"_{mode}")(req, key)

    def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _completion(self, req: dict, content: str, *, model: str | None = None) -> bytes:
        return json.dumps({"id": "x", "object": "chat.completion", "model": model or req["model"],
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": content}}],
                           "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).encode()

    def _esc(self, req, key):
        turn = sum(1 for m in req.get("messages", []) if m.get("role") == "assistant")
        actions = [{"action": "write", "path": "../../../../tmp/benchclaw-hostile-pwned", "content": NASTY},
                   {"action": "read", "path": "/etc/passwd"},
                   {"action": "finish", "summary": NASTY}]
        body = self._completion(req, json.dumps(actions[min(turn, 2)]), model=req["model"] + NASTY)
        # The HTTP client refuses control characters in headers, so the id plays a path trick.
        self._send(200, body, {"x-request-id": "../../../etc/passwd"})

    def _echo(self, req, key):
        evil = f"{NASTY} Bearer {key}"
        body = json.dumps({"error": {"message": evil, "type": evil, "code": evil, "param": key}}).encode()
        self._send(500, body, {"x-request-id": f"req-{key}"})

    def _giant(self, req, key):
        # One giant reply, then a small one: every later request carries the giant one back
        # (12 turns of it grew one request to 69 MB), which is the agent's history, not this test's point.
        turn = sum(1 for m in req.get("messages", []) if m.get("role") == "assistant")
        content = json.dumps({"action": "finish", "summary": "A" * (6 * 1024 * 1024) if turn == 0 else "done"})
        self._send(200, self._completion(req, content))

    def _drip(self, req, key):
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(10 ** 6))
        self.end_headers()
        try:
            for _ in range(600):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            pass


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    work = tmp_path_factory.mktemp("hostile")
    key = "sk-" + secrets.token_hex(24)
    base = f"http://127.0.0.1:{server.server_address[1]}/v1/../v1/%2e%2e/v1"
    tiers = "".join(f"""
[tiers.{m}]
provider = "openai"
model = "hostile/{m}"
base_url = "{base}"
key_env = "{KEY_ENV}"
prices = {{ input = "0.30", output = "1.20" }}
""" for m in ("esc", "echo", "giant", "drip"))
    (work / "hostile.toml").write_text(f'v = 1\nname = "hostile"\nsimulated = true\n{tiers}')
    # The shipped task, plus a v2 of it with a 4 s time limit for the drip (tests never edit
    # tasks/); the other tiers keep the task's own limit, so a loaded machine cannot end them early.
    import shutil

    from benchclaw.paths import builtin_tasks_dir

    for v in ("v1", "v2"):
        shutil.copytree(builtin_tasks_dir() / "quotes-incident" / "v1", work / "tasks" / "quotes-incident" / v)
    toml = work / "tasks" / "quotes-incident" / "v2" / "task.toml"
    text = toml.read_text()
    assert "\nseconds = 180\n" in text and "\nversion = 1\n" in text
    toml.write_text(text.replace("\nseconds = 180\n", "\nseconds = 4\n", 1).replace("\nversion = 1\n", "\nversion = 2\n", 1))
    env = {**os.environ, KEY_ENV: key}
    outputs = []

    def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-c", CLI, *args], cwd=work, env=env, capture_output=True,
                           timeout=timeout)
        outputs.append((args, p, time.monotonic() - t0))
        return p

    tries = {m: cli("try", "quotes-incident@2" if m == "drip" else "quotes-incident@1", "--tier", m,
                    "--catalog", "hostile.toml", "--runs", "runs", "--tasks", "tasks", timeout=300)
             for m in ("esc", "echo", "giant", "drip")}
    cli("runs", "ls", "--runs", "runs")
    ids = sorted(p.stem for p in (work / "runs" / "runs").glob("*/*.jsonl"))
    for run_id in ids:
        cli("runs", "show", run_id[:12], "--runs", "runs")
    check = cli("runs", "check", "--runs", "runs")
    yield {"work": work, "key": key, "tries": tries, "outputs": outputs, "ids": ids, "check": check}
    server.shutdown()
    server.server_close()


def test_no_terminal_control_reaches_the_output(hostile):
    shown = 0
    for args, p, _ in hostile["outputs"]:
        for stream in (p.stdout, p.stderr):
            text = stream.decode("utf-8", "replace")
            assert not RAW.search(text), (args, RAW.search(text), text[:2000])
            assert not re.search(r"^\s*status: passed", text, re.M), (args, text[:2000])
            shown += "\\x1b]0;pwned" in text
    assert shown >= 3  # the hostile text was shown, escaped: in try, runs show of esc and echo runs


def test_the_key_is_in_no_output_and_no_file(hostile):
    key = hostile["key"]
    assert Hostile.seen_keys.count(key) >= 4  # the key really went out (positive control)
    for args, p, _ in hostile["outputs"]:
        assert key.encode() not in p.stdout + p.stderr and key[5:25].encode() not in p.stdout + p.stderr, args
    for path in (hostile["work"] / "runs").rglob("*"):
        if path.is_file():
            assert key[5:25].encode() not in path.read_bytes(), path


def test_path_tricks_write_nothing_outside_and_runs_end_as_they_should(hostile):
    assert not Path("/tmp/benchclaw-hostile-pwned").exists()
    tries = hostile["tries"]
    for mode, p in tries.items():
        assert p.returncode in (0, 1) and b"internal error" not in p.stderr and b"Traceback" not in p.stderr, \
            (mode, p.stderr[-2000:])
    assert b"status: provider_error" in tries["echo"].stdout
    assert b"status: limit_time" in tries["drip"].stdout or b"status: provider_error" in tries["drip"].stdout
    assert hostile["check"].returncode == 0, hostile["check"].stderr
    drip_s = [s for a, _, s in hostile["outputs"] if a[:4] == ("try", "quotes-incident@2", "--tier", "drip")][0]
    giant = max((p.stat().st_size for p in (hostile["work"] / "runs" / "objects").rglob("*") if p.is_file()))
    assert giant > 6 * 1024 * 1024  # the giant reply is kept whole as evidence
    record_figures("hostile_server", commands=len(hostile["outputs"]), runs=len(hostile["ids"]),
                   keys_sent=Hostile.seen_keys.count(hostile["key"]), drip_seconds=round(drip_s, 1),
                   giant_reply_bytes=giant,
                   statuses={m: p.stdout.decode(errors="replace").split("\n")[0] for m, p in tries.items()})
