"""`benchclaw sim serve`: a real process answering the official SDK on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest

from click.testing import CliRunner

from benchclaw.cli.sim import sim


def test_help_has_an_example():
    result = CliRunner().invoke(sim, ["serve", "--help"])
    assert result.exit_code == 0 and "Example: benchclaw sim serve" in result.output


def test_bad_fault_is_a_usage_error():
    from benchclaw.cli import cli, run_cli

    assert run_cli(cli, ["sim", "serve", "--port", "0", "--fault", "gremlins=0.5"]) == 2
    assert run_cli(cli, ["sim", "serve", "--port", "0", "--stream-cut-after", "-1"]) == 2


def test_serve_answers_over_http():
    proc = subprocess.Popen([sys.executable, "-c", "from benchclaw.cli import main; main()",
                             "sim", "serve", "--port", "0", "--latency-scale", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        base = proc.stdout.readline().strip()
        assert base.startswith("http://127.0.0.1:") and base.endswith("/v1")
        with urllib.request.urlopen(base + "/models", timeout=5) as r:
            assert r.headers["x-request-id"] and {m["id"] for m in json.load(r)["data"]} >= {"sim/ultra"}
        pytest.importorskip("benchclaw.sim.solvers", reason="the shipped solvers have not landed yet")
        body = json.dumps({"model": "sim/ultra", "max_tokens": 4096, "seed": 1,
                           "messages": [{"role": "user", "content": "hello"}]}).encode()
        req = urllib.request.Request(base + "/chat/completions", data=body, headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            reply = json.load(r)
            assert r.headers["x-request-id"].startswith("req-sim-")
        action = json.loads(reply["choices"][0]["message"]["content"])
        assert action["action"] == "finish"  # no task, no workspace: it can only give up
        assert reply["usage"]["prompt_tokens"] > 0
    finally:
        proc.terminate()
        proc.wait(timeout=10)
