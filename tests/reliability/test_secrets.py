"""The API key never leaks (issue #10, fourth bullet).

A sentinel key sits in an environment variable that a catalog's ``openai`` tiers name as
their ``key_env``; the tiers point at loopback simulator servers, one of which echoes the
bearer token back in a 401 error on every call (``auth_echo``) and one on some calls
(mixed with 500s). The user's whole journey then runs as real commands in subprocesses,
with the SDK's debug logging switched on (``OPENAI_LOG=debug``) to tempt a leak: prereg,
run, try, runs show, ledger show, report (terminal, JSON, Markdown), build, export (with
the site), benchclaw-verify. Afterwards the sentinel, any 10-character piece of it, and
its base64 form appear in no file under the runs directory, the site, the bundle (every
entry decompressed) or the printed output.

A positive control keeps the test honest: the servers count the error bodies that
really carried the key back to the client.
"""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchclaw.sim.backend import SimBackend, SimFaults
from benchclaw.sim.server import SimServer
from benchclaw.evidence.store import Store

from .helpers import bodies, experiment_runs, record_figures, write_spec

EXP = "SECRETS"
KEY_ENV = "BENCHCLAW_RELIABILITY_SENTINEL_KEY"
CLI = "import sys; from benchclaw.cli import main; sys.argv[0] = 'benchclaw'; main()"
VERIFY = "import sys; from benchclaw.verify.cli import main; sys.argv[0] = 'benchclaw-verify'; main()"

CATALOG = """v = 1
name = "keyed"
description = "SIMULATED loopback servers behind a sentinel key"
simulated = true
[tiers.keyed]
provider = "openai"
model = "sim/super"
base_url = "{mixed}"
key_env = "{env}"
prices = {{ input = "0.30", cached_input = "0.075", output = "1.20" }}
[tiers.echo]
provider = "openai"
model = "sim/lightning"
base_url = "{echo}"
key_env = "{env}"
prices = {{ input = "0.05", output = "0.20" }}
"""


class CountingBackend(SimBackend):
    """Counts the replies whose bytes carry the sentinel back to the client."""

    def __init__(self, sentinel: str, **kw) -> None:
        super().__init__(**kw)
        self.sentinel = sentinel.encode()
        self.echoed = 0
        self.authorised = 0

    def handle(self, raw_body: bytes, *, authorization: str | None = None, **kw):
        self.authorised += authorization == f"Bearer {self.sentinel.decode()}"
        reply = super().handle(raw_body, authorization=authorization, **kw)
        self.echoed += self.sentinel in reply.body
        return reply


def needles(sentinel: str) -> list[bytes]:
    """What counts as a leak: the key, every 10-character piece of it, its base64 forms."""
    pieces = {sentinel[i:i + 10] for i in range(len(sentinel) - 9)}
    b64 = [base64.b64encode(sentinel.encode()), base64.b64encode(f"Bearer {sentinel}".encode())]
    return [p.encode() for p in sorted(pieces)] + b64


def scan_bytes(data: bytes, where: str, found: list[str], keys: list[bytes]) -> int:
    for k in keys:
        if k in data:
            found.append(f"{where}: contains {k[:4]!r}…")
            break
    return len(data)


def scan_tree(root: Path, found: list[str], keys: list[bytes]) -> tuple[int, int]:
    files = size = 0
    for p in sorted(root.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            files += 1
            size += scan_bytes(data, str(p), found, keys)
            if p.suffix == ".zip":
                with zipfile.ZipFile(p) as z:
                    for name in z.namelist():
                        size += scan_bytes(z.read(name), f"{p}!{name}", found, keys)
                        files += 1
    return files, size


@pytest.fixture(scope="module")
def journey(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secrets")
    sentinel = "sk-sentinel-" + secrets.token_hex(20)
    echo = CountingBackend(sentinel, faults=SimFaults(rates={"auth_echo": 1.0}), latency_scale=0)
    mixed = CountingBackend(sentinel, faults=SimFaults(rates={"auth_echo": 0.05, "server": 0.1},
                                                       schedule=(None, "auth_echo"), retry_after_s=0.01),
                            latency_scale=0)
    servers = [SimServer(backend=b).start() for b in (mixed, echo)]
    env = {**os.environ, KEY_ENV: sentinel, "OPENAI_LOG": "debug", "PYTHONUNBUFFERED": "1"}
    runs, site, bundle = tmp / "runs", tmp / "site", tmp / "bundle.zip"
    outputs: list[tuple[list[str], subprocess.CompletedProcess]] = []

    def cli(*args: str, verify: bool = False) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-c", VERIFY if verify else CLI, *args], cwd=tmp, env=env,
                              capture_output=True, timeout=120)
        outputs.append((list(args), proc))
        return proc

    try:
        (tmp / "keyed.toml").write_text(CATALOG.format(mixed=servers[0].base_url, echo=servers[1].base_url,
                                                       env=KEY_ENV), encoding="utf-8")
        write_spec(tmp, EXP, tasks=["cents-fees", "quotes-vendor"], tiers=["keyed", "echo"],
                   catalog="keyed.toml", settings={"concurrency": 4, "seconds": 30, "retries": 1})
        steps = [
            ("prereg", f"{EXP}.toml", "--runs", str(runs)),
            ("--verbose", "run", EXP, "--runs", str(runs)),
            ("try", "pricing-annual", "--tier", "echo", "--catalog", "keyed.toml", "--runs", str(runs)),
            ("try", "quotes-incident", "--tier", "keyed", "--catalog", "keyed.toml", "--runs", str(runs)),
            ("runs", "ls", "--runs", str(runs)),
            ("ledger", "show", "--runs", str(runs)),
            ("report", EXP, "--runs", str(runs), "--json", str(tmp / "summary.json"),
             "--markdown", str(tmp / "report.md")),
            ("build", "--runs", str(runs), "-o", str(site)),
            ("export", EXP, "--runs", str(runs), "-o", str(bundle), "--include-site", str(site)),
        ]
        codes = {s[0] if s[0] != "--verbose" else s[1]: cli(*s).returncode for s in steps}
        store = Store(runs)
        shown = sorted(store.iter_runs(), key=lambda r: (r.end.get("status") != "provider_error", r.run_id))
        for run in shown[:5]:  # `runs show` prints a run, its error messages included
            cli("runs", "show", run.run_id, "--runs", str(runs))
        codes["verify"] = cli(str(bundle), verify=True).returncode
    finally:
        for s in servers:
            s.stop()
    return SimpleNamespace(tmp=tmp, sentinel=sentinel, runs=runs, site=site, bundle=bundle, store=store,
                           outputs=outputs, codes=codes, backends=(mixed, echo))


def test_the_journey_ran_and_the_key_really_was_echoed(journey):
    mixed, echo = journey.backends
    assert journey.codes["prereg"] == 0 and journey.codes["export"] == 0, journey.outputs
    assert journey.codes["verify"] == 0, journey.outputs[-1][1].stdout.decode()
    assert mixed.authorised + echo.authorised > 0, "the sentinel was never sent as the bearer token"
    assert echo.echoed > 0 and mixed.echoed > 0, "no error body carried the key back: the test proves nothing"
    runs = experiment_runs(journey.store, EXP)
    auth_errors = [c for r in runs for c in bodies(r, "call") if (c["error"] or {}).get("kind") == "auth"]
    assert len(auth_errors) >= echo.echoed // 2
    assert all("[REDACTED]" in c["error"]["message"] for c in auth_errors)
    assert any(r.end["status"] == "provider_error" for r in runs)
    assert any(c["error"] is None for r in runs for c in bodies(r, "call")), "no call succeeded"


def test_the_sentinel_is_in_no_file_and_no_output(journey):
    keys = needles(journey.sentinel)
    found: list[str] = []
    for product in (journey.runs, journey.site, journey.bundle, journey.tmp / "summary.json",
                    journey.tmp / "report.md"):
        assert product.exists(), product
    # Everything the journey wrote lives under tmp: runs/, site/, the bundle (each entry
    # decompressed), summary.json, report.md, the spec and the catalog (which names only
    # the environment variable).
    files, size = scan_tree(journey.tmp, found, keys)
    printed = 0
    for args, proc in journey.outputs:
        for name, data in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            printed += scan_bytes(data, f"`benchclaw {' '.join(args)}` {name}", found, keys)
    assert not found, "\n".join(found)
    assert printed > 0 and files > 0
    record_figures("secrets", commands=len(journey.outputs), files_scanned=files, bytes_scanned=size + printed,
                   printed_bytes=printed, key_echoes=sum(b.echoed for b in journey.backends),
                   bearer_calls=sum(b.authorised for b in journey.backends))
