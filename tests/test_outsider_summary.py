"""docs/FORMAT.md "Summary" is precise enough to re-implement: a reader written from the page
alone (``tests/outsider/summary_from_format.py``, no benchclaw import) reproduces a bundle's
``summary.json`` byte for byte.

The bundles: the demo's, the eventful grid of ``test_bundle_equals_report`` (deviations, a
spend stop, unknown usage, provider errors, reruns), and consistent variants of the latter
whose summary the package re-claims (``Forger.resummarise``): hypotheses reading every
metric and every evaluation error, unknown lures, missing grid runs, real-provider calls
(speed windows, streams, doubted usage, a content filter, an aborted run), calls cut off in
flight, duplicate and cell-spanning trials, and a spec without ``all_tiers``. A rule that
lives only in the code shows up here as a difference; fix FORMAT.md, not the reader.
"""

from __future__ import annotations

import ast
import io
import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from benchclaw.formats import jsonio
from benchclaw.bundle import export_bundle
from tests.outsider import summary_from_format as outsider
from tests.test_bundle_support import EXP, GRID_SPEC, Forger, eventful_runs, rewrite_lines

READER = Path(outsider.__file__)


def _unpack(files: dict[str, bytes], root: Path) -> Path:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def _assert_reproduced(root: Path) -> None:
    claimed = (root / "summary.json").read_bytes()
    mine = outsider.summary_bytes(str(root))
    if mine != claimed:  # name the first differing JSON path, not 40 KB of bytes
        a, b = json.loads(mine), json.loads(claimed)
        raise AssertionError(f"summary.json differs from FORMAT.md's rules at {_first_diff(a, b, '$')}")


def _first_diff(a, b, path: str) -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k} (only in {'the bundle' if k in b else 'the reader'})"
            if a[k] != b[k]:
                return _first_diff(a[k], b[k], f"{path}.{k}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_diff(x, y, f"{path}[{i}]")
    return f"{path}: reader {json.dumps(a)[:200]} bundle {json.dumps(b)[:200]}"


@pytest.fixture(scope="module")
def eventful_bundle(tmp_path_factory) -> bytes:
    root = tmp_path_factory.mktemp("outsider")
    runs = eventful_runs(root / "runs")
    export_bundle(runs, EXP, root / "b.zip")
    return (root / "b.zip").read_bytes()


def test_the_reader_shares_no_code_with_the_package():
    tree = ast.parse(READER.read_text(encoding="utf-8"))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert "benchclaw" not in imported and "tests" not in imported
    assert imported <= {"__future__", "datetime", "glob", "json", "math", "os", "sys", "tomllib",
                        "decimal", "fractions"}


def test_the_demo_bundle_summary_follows_from_format_md(demo_result, tmp_path):
    with zipfile.ZipFile(demo_result.bundle) as zf:
        zf.extractall(tmp_path / "b")
    _assert_reproduced(tmp_path / "b")


def test_the_eventful_bundle_summary_follows_from_format_md(eventful_bundle, tmp_path):
    with zipfile.ZipFile(io.BytesIO(eventful_bundle)) as zf:
        zf.extractall(tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_bytes())
    assert summary["secondary"] is not None and summary["stops"] and summary["deviations"]
    _assert_reproduced(tmp_path)


def test_live_routers_without_all_tiers_follow_from_format_md(tmp_path):
    """Live speculative (batches of two), memory and always:<tier> trials; tier rows whose
    cells are only those their runs touched; every replayed row missing."""
    import asyncio

    from benchclaw.experiments import prereg
    from benchclaw.experiments.runner import run_experiment
    from benchclaw.evidence.store import Store

    spec = tmp_path / "E01.toml"
    spec.write_text(GRID_SPEC.replace("all_tiers = true", "all_tiers = false")
                    .replace('live = ["ladder"]', 'live = ["speculative", "memory", "always:super"]')
                    .replace("seeds = [1, 2]", "seeds = [1, 2, 3]"))
    runs = tmp_path / "runs"
    prereg(Store(runs, fsync=False), spec)
    asyncio.run(run_experiment(Store(runs, fsync=False), EXP, spec_path=spec, handle_signals=False,
                               sim_options={"latency_scale": 0}))
    export_bundle(runs, EXP, tmp_path / "b.zip")
    with zipfile.ZipFile(tmp_path / "b.zip") as zf:
        zf.extractall(tmp_path / "b")
    rows = json.loads((tmp_path / "b" / "summary.json").read_bytes())["primary"]["policies"]
    assert {(r["policy"], r["mode"]) for r in rows if r["samples"]} == {
        ("speculative", "live"), ("memory", "live"), ("always:super", "live")}
    _assert_reproduced(tmp_path / "b")


# -- consistent variants, re-claimed by the package ------------------------------------------

def _records(f: Forger) -> dict[str, list[dict]]:
    return {rid: f.records(rid) for rid in f.run_ids()}


def _runs_where(f: Forger, pred) -> list[str]:
    return [rid for rid, recs in _records(f).items() if pred(recs[0]["body"], recs)]


def _journal(f: Forger) -> str:
    return next(n for n in f.files if n.startswith(f"journals/{EXP}/"))


def _registered(f: Forger) -> list[dict]:
    lines = [json.loads(x) for x in f.files[_journal(f)].splitlines()]
    return [r for r in lines if r["kind"] in ("prereg", "deviation")]


def _deviate_with(f: Forger, extra: bytes) -> None:
    """Register (as a last deviation) the spec in force plus ``extra`` TOML."""
    last = _registered(f)[-1]["body"]
    spec = f.blob(last["spec_digest"]) + extra
    new = f.put_blob(spec)
    f.files[f"experiments/{EXP}.toml"] = spec

    def add(objs):
        body = {**last, "reason": "outsider variant", "previous_digest": last["spec_digest"], "spec_digest": new}
        objs.append({"v": 1, "seq": 0, "prev": "", "at": objs[-1]["at"][:-2] + "9Z", "kind": "deviation",
                     "body": body})
        return objs
    f.edit_chain(_journal(f), add)


RULES = b'''
[[hypotheses]]
id = "H2"
text = "every policy metric"
rule = 'cost_per_pass("always:lightning") > 0 and pass_k("ladder", "live") >= pass_k("memory") or total_cost("oracle") < 1 and mean_time("speculative") > median_time("speculative") - 1'

[[hypotheses]]
id = "H3"
text = "lures and gaps"
rule = "pass_rate_injected('ladder') >= pass_rate_clean('ladder') and gap_closed('ladder') > 0.5 and -gap_closed('memory') * 2 / 3 < 1"

[[hypotheses]]
id = "H4"
text = "tier metrics"
rule = 'turns("ultra") > 2 and attempt_rate("lightning") <= 1 and tier_pass_rate("super") != 0.5 and error_rate("super") < 0.9 and timeout_rate("ultra") == 0 and throughput("super") > throughput_spread("super") and ttft("lightning") > 0'

[[hypotheses]]
id = "H5"
text = "a policy the grid does not have"
rule = 'pass_rate("always:mega") > 0'

[[hypotheses]]
id = "H6"
text = "a live result of a replayed-only policy"
rule = 'pass_rate("speculative", "live") > 0'

[[hypotheses]]
id = "H7"
text = "a tier the grid does not have"
rule = 'turns("mega") > 0'

[[hypotheses]]
id = "H8"
text = "one term read twice"
rule = 'not (pass_rate("ladder") == pass_rate("ladder")) or cost_per_task("always:ultra") <= cost_per_task("always:ultra")'
'''


def _rules(f: Forger) -> None:
    _deviate_with(f, RULES)


def _lures_unknown(f: Forger) -> None:
    start = _records(f)[f.run_ids()[0]][0]["body"]
    for line in f.blob(start["task"]["digest"]).decode().splitlines():
        digest, _, path = line.partition("  ")
        if path == "task.toml":
            del f.files[f"objects/{digest[7:9]}/{digest[7:]}"]


def _missing_grid(f: Forger) -> None:
    for rid in _runs_where(f, lambda s, _: s["policy"]["policy"] == "grid" and (
            (s["tier"] == "super" and s["policy"]["cell"] == "cents-fees@1/direct/1")
            or (s["tier"] == "lightning" and s["policy"]["cell"] == "quotes-incident@1/direct/2"))):
        f.drop_run(rid)


def _real_provider_calls(f: Forger) -> None:
    def realise(objs):
        objs[0]["body"]["simulated"] = False
        for i, o in enumerate(objs):
            if o["kind"] == "call":
                o["body"]["simulated"] = False
                o["body"]["stream"] = {"chunks": 5, "text_chunks": 4, "ttft_ms": 100 + 37 * i,
                                       "usage_chunk": True, "end": "done"}
                if i % 3 == 0:
                    o["body"]["usage_doubts"] = ["over_bound"] if i % 2 else ["prompt_zero"]
                o["body"]["model_mismatch"] = i % 5 == 0
        return objs

    def filtered(objs):
        call = next(o for o in objs if o["kind"] == "call" and o["body"].get("outcome") == "stop")
        call["body"]["outcome"] = "content_filter"
        return objs

    def aborted(objs):
        objs[-1]["body"]["status"] = "aborted"
        return objs
    for rid in _runs_where(f, lambda s, _: s["tier"] == "super"):
        f.edit_run(rid, realise)
    f.edit_run(_runs_where(f, lambda s, recs: s["tier"] == "ultra" and any(
        r["kind"] == "call" and r["body"].get("outcome") == "stop" for r in recs))[0], filtered)
    f.edit_run(_runs_where(f, lambda s, recs: s["tier"] == "lightning" and recs[-1]["body"].get("passed"))[0],
               aborted)


def _cut_off(f: Forger) -> None:
    def cut(objs):  # the last call's record never written: its reservation stays in the ledger
        last = max(i for i, o in enumerate(objs) if o["kind"] == "call")
        return [o for i, o in enumerate(objs) if i < last or o["kind"] == "run.end"]
    for rid in _runs_where(f, lambda s, _: s["tier"] == "ultra")[:2]:
        f.edit_run(rid, cut)


def _duplicates(f: Forger) -> None:
    rid = _runs_where(f, lambda s, _: s["policy"]["policy"] == "grid" and not s["policy"]["rerun"])[0]
    lines = f.files[f"runs/{rid[:2]}/{rid}.jsonl"].splitlines()
    first = jsonio.loads(lines[0])
    first["at"] = first["at"][:-2] + ("1Z" if first["at"][-2] == "0" else "0Z")
    data = rewrite_lines([jsonio.dumps(first)] + lines[1:])
    twin = hashlib.sha256(data).hexdigest()
    f.files[f"runs/{twin[:2]}/{twin}.jsonl"] = data

    def move(objs):
        objs[0]["body"]["policy"]["cell"] = "quotes-incident@1/direct/1"
        return objs
    for rid in _runs_where(f, lambda s, _: s["policy"]["policy"] == "ladder" and s["policy"]["step"] == 1)[:1]:
        f.edit_run(rid, move)


def _live_cut_short(f: Forger) -> None:
    """A live ladder trial's last run dropped (with its record): the trial is incomplete."""
    last = _runs_where(f, lambda s, _: s["policy"]["policy"] == "ladder" and s["policy"]["step"] == 2
                       and not s["policy"]["rerun"])[0]
    f.drop_run(last)
    f.edit_journal(lambda objs: [o for o in objs if o["body"].get("run_id") != last
                                 and not (o["kind"] == "trial" and last in o["body"]["runs"])])


def _not_all_tiers(f: Forger) -> None:
    old = _registered(f)[-1]["body"]["spec_digest"]
    new = f.put_blob(f.blob(old).replace(b"all_tiers = true", b"all_tiers = false")
                     .replace(b'live = ["ladder"]', b'live = ["ladder", "speculative"]'))

    def swap(objs):  # the runs keep the old digest: every one is a registration problem
        for o in objs:
            if o["body"].get("spec_digest") == old:
                o["body"]["spec_digest"] = new
        return objs
    f.edit_chain(_journal(f), swap)


VARIANTS = {"rules": _rules, "lures_unknown": _lures_unknown, "missing_grid": _missing_grid,
            "real_provider_calls": _real_provider_calls, "cut_off": _cut_off, "duplicates": _duplicates,
            "live_cut_short": _live_cut_short, "not_all_tiers": _not_all_tiers}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_variant_summary_follows_from_format_md(eventful_bundle, tmp_path, variant):
    f = Forger.of(eventful_bundle)
    before = f.files["summary.json"]
    VARIANTS[variant](f)
    f.resummarise()
    assert f.files["summary.json"] != before  # the variant reached the summary
    _assert_reproduced(_unpack(f.files, tmp_path))
