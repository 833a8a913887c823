"""Through a real gateway (issue 13): a LiteLLM proxy in front of ``benchclaw sim serve``.

The suite starts both on loopback itself: ``benchclaw sim serve`` (the real command) on a
free port, and the LiteLLM proxy (a test dependency, ``litellm[proxy]``) on another, its
config pointing each model at the simulator's OpenAI-compatible base URL, with every
offline knob set so it never reaches the internet (local model cost map, no telemetry,
no blog posts, no retries of its own). The proxy's master key is a realistic key whose
digits include the correct ``cents-invoices`` amount (123456789), and the tiers send it.

A small grid (2 tasks x 2 profiles x 2 tiers) then runs through the proxy from a catalog
that claims *real* tiers, and the same grid runs in process on the ``sim`` catalog. What
must hold: the same pass/fail and the same costs cell by cell; a request id on every call;
the simulated label on every call, run, the report and the site although the catalog
claimed otherwise; the key nowhere in runs/, the site or the bundle; the bundle verifies.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchclaw.evidence.store import Store

from .helpers import (bodies, build_products, experiment_runs, record_figures, register_and_run, verdict_text,
                      write_spec)

# Found, not imported: importing litellm here would make this process fetch its model cost
# map from the internet; only the proxy subprocess imports it, with the offline knobs set.
if importlib.util.find_spec("litellm") is None:  # pragma: no cover - the test extra installs it
    pytest.skip("litellm[proxy] is in the test extra: pip install -e '.[test]'", allow_module_level=True)

KEY = "sk-bc7Qm2x123456789Zt4K9pL0aR3vW8yN6cJ5hE1fD"
KEY_ENV = "BENCHCLAW_LITELLM_KEY"
TASKS = ("cents-invoices", "quotes-incident")
PROFILES = ("direct", "checker")
TIERS = ("lightning", "ultra")
READY_S = 120  # LiteLLM imports a lot; on a loaded 2-core machine it has taken 16 s

CATALOG = """v = 1
name = "via-litellm"
description = "tiers behind a LiteLLM proxy (which, unknown to this catalog, fronts the simulator)"
order = ["lightning", "ultra"]
[tiers.lightning]
provider = "openai"
model = "sim/lightning"
base_url = "{url}"
key_env = "{env}"
expect_model = "openai/sim/lightning"
prices = {{ input = "0.05", cached_input = "0.01", output = "0.20" }}
[tiers.ultra]
provider = "openai"
model = "sim/ultra"
base_url = "{url}"
key_env = "{env}"
expect_model = "openai/sim/ultra"
prices = {{ input = "1.00", cached_input = "0.25", cache_write = "1.25", output = "4.00" }}
"""

PROXY_CONFIG = """model_list:
{models}
router_settings:
  num_retries: 0
litellm_settings:
  telemetry: false
  num_retries: 0
  request_timeout: 60
"""
PROXY_MODEL = """  - model_name: {name}
    litellm_params:
      model: openai/{name}
      api_base: {base}
      api_key: sim-upstream-needs-no-key
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[:3]} exited {proc.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=2):
                return
        time.sleep(0.3)
    raise RuntimeError(f"not ready within {timeout} s: {url}: {log.read_text()[-2000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _offline_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_LOCAL_BLOG_POSTS="True", LITELLM_TELEMETRY="False",
               LITELLM_TELEMETRY_GROUPS="", LITELLM_LOG="ERROR", NO_PROXY="127.0.0.1,localhost",
               LITELLM_MASTER_KEY=KEY, DISABLE_SCHEMA_UPDATE="True")
    return env


@contextlib.contextmanager
def proxy_in_front_of_sim(tmp: Path):
    """``benchclaw sim serve`` and a LiteLLM proxy before it; yields the proxy's base URL."""
    sim_port, proxy_port = _free_port(), _free_port()
    sim_log, proxy_log = tmp / "sim.log", tmp / "litellm.log"
    sim = subprocess.Popen([sys.executable, "-c", "import sys; from benchclaw.cli import main; "
                            "sys.argv[0] = 'benchclaw'; main()", "sim", "serve", "--port", str(sim_port),
                            "--latency-scale", "0"], stdout=sim_log.open("wb"), stderr=subprocess.STDOUT)
    procs = [sim]
    try:
        _wait(f"http://127.0.0.1:{sim_port}/v1/models", sim, sim_log, 30)
        config = tmp / "litellm.yaml"
        base = f"http://127.0.0.1:{sim_port}/v1"
        config.write_text(PROXY_CONFIG.format(models="".join(PROXY_MODEL.format(name=f"sim/{t}", base=base)
                                                             for t in TIERS)))
        proxy = subprocess.Popen([sys.executable, "-c", "from litellm.proxy.proxy_cli import run_server; "
                                  "run_server()", "--config", str(config), "--host", "127.0.0.1",
                                  "--port", str(proxy_port)], stdout=proxy_log.open("wb"),
                                 stderr=subprocess.STDOUT, env=_offline_env(), cwd=tmp)
        procs.append(proxy)
        _wait(f"http://127.0.0.1:{proxy_port}/health/readiness", proxy, proxy_log, READY_S)
        yield f"http://127.0.0.1:{proxy_port}/v1"
    finally:
        for p in reversed(procs):
            _stop(p)


def _grid(tmp: Path, exp: str, catalog: str) -> SimpleNamespace:
    spec = write_spec(tmp, exp, tasks=TASKS, tiers=TIERS, catalog=catalog, profiles=PROFILES,
                      settings={"seconds": 120, "retries": 1, "concurrency": 4, "max_tokens": 4096})
    store = Store(tmp / "runs")
    result = register_and_run(store, spec, exp)
    products = build_products(store, exp, tmp)
    return SimpleNamespace(store=store, result=result, products=products, runs=experiment_runs(store, exp))


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """The grid through the proxy and the same grid in process."""
    t0 = time.monotonic()
    tmp = tmp_path_factory.mktemp("litellm")
    os.environ[KEY_ENV] = KEY
    try:
        with proxy_in_front_of_sim(tmp) as url:
            ready = time.monotonic() - t0
            (tmp / "via-litellm.toml").write_text(CATALOG.format(url=url, env=KEY_ENV))
            proxied = _grid(tmp, "PROXY", "via-litellm.toml")
            # the same grid streamed through the proxy (issue 18): SSE relayed by LiteLLM
            stream_tmp = tmp_path_factory.mktemp("litellm-stream")
            (stream_tmp / "via-litellm.toml").write_text(
                CATALOG.format(url=url, env=KEY_ENV).replace("prices = {", "stream = true\nprices = {"))
            streamed = _grid(stream_tmp, "PROXY", "via-litellm.toml")
    finally:
        os.environ.pop(KEY_ENV, None)
    local_tmp = tmp_path_factory.mktemp("inprocess")
    local = _grid(local_tmp, "PROXY", "sim")
    record_figures("litellm", seconds=round(time.monotonic() - t0, 1), proxy_ready_s=round(ready, 1),
                   runs=len(proxied.runs), calls=sum(len(bodies(r, "call")) for r in proxied.runs),
                   passed=sum(r.end["passed"] for r in proxied.runs),
                   passed_in_process=sum(r.end["passed"] for r in local.runs))
    return SimpleNamespace(tmp=tmp, proxied=proxied, local=local, streamed=streamed)


def _cell(run) -> tuple:
    s = run.start
    return (s["task"]["id"], s["profile"]["name"], s["seed"], s["tier"])


def test_the_same_cells_pass_and_cost_the_same_through_the_proxy(both):
    assert both.proxied.result.status == "complete", both.proxied.result.stop_detail
    got = {_cell(r): (r.end["status"], r.end["passed"], r.end["cost"], r.end["usage"]) for r in both.proxied.runs}
    want = {_cell(r): (r.end["status"], r.end["passed"], r.end["cost"], r.end["usage"]) for r in both.local.runs}
    assert len(got) == len(TASKS) * len(PROFILES) * len(TIERS) and got == want
    assert any(passed for _, passed, _, _ in got.values())  # a verdict the key's digits could have changed


def test_every_call_has_a_request_id_and_the_upstream_model(both):
    for run in both.proxied.runs:
        for c in bodies(run, "call"):
            assert c["request_id"], c
            assert c["headers"]["x-litellm-call-id"] and c["headers"]["llm_provider-x-request-id"]
            assert c["model_upstream"] == f"openai/{run.start['model']}" and c["model_mismatch"] is False


def test_the_simulated_label_survives_the_proxy_everywhere(both):
    p = both.proxied
    for run in p.runs:
        assert run.start["simulated"] is False  # what the catalog claimed
        assert all(c["simulated"] is True for c in bodies(run, "call"))
        assert run.end["simulated"] is True and run.end["simulated_replies"] == run.end["calls"]
    assert p.products.summary["simulated"] is True
    assert "SIMULATED" in p.products.terminal
    from benchclaw.site._render import run_url

    for run in p.runs:
        page = (p.products.site / run_url(run.run_id)).read_text()
        assert "SIMULATED" in page and "the tier claimed a real model" in page, run.run_id


def test_the_key_is_nowhere_in_runs_site_or_bundle(both):
    key = KEY.encode()
    roots = [both.proxied.store.root, both.proxied.products.site]
    for root in roots:
        for f in root.rglob("*"):
            if f.is_file():
                assert key not in f.read_bytes(), f
    with zipfile.ZipFile(both.proxied.products.bundle) as z:
        for name in z.namelist():
            assert key not in z.read(name), name


def test_the_bundle_verifies(both):
    assert verdict_text(both.proxied.products.verdict) == "ok"


def test_streamed_through_the_proxy_the_same_cells_pass_and_cost_the_same(both):
    s = both.streamed
    assert s.result.status == "complete", s.result.stop_detail
    got = {_cell(r): (r.end["status"], r.end["passed"], r.end["cost"], r.end["usage"]) for r in s.runs}
    want = {_cell(r): (r.end["status"], r.end["passed"], r.end["cost"], r.end["usage"]) for r in both.local.runs}
    assert got == want
    for run in s.runs:
        for c in bodies(run, "call"):
            st = c["stream"]
            assert st["end"] == "done" and st["usage_chunk"] is True and st["ttft_ms"] is not None, c
            assert c["request_id"] and c["simulated"] is True and c["cost"]["known"] is True
    assert verdict_text(s.products.verdict) == "ok"
