"""Parts of the site builder: Markdown safety, charts, the analysis cache, the CLI, serve."""

from __future__ import annotations

import threading
import urllib.request
from decimal import Decimal

import pytest
from click.testing import CliRunner

from benchclaw.cli import cli
from benchclaw.site import make_server
from benchclaw.site._charts import frontier, pass_vs_cost
from benchclaw.site._render import Scrubber, cell_slug, fmt_usd, markdown
from tests.synth_runs import synth_runs
from benchclaw.evidence.store import Store


def test_markdown_shows_raw_html_as_text_and_never_links_out():
    html = str(markdown('Hi <script>alert(1)</script> [x](https://evil.example/a) '
                        '![img](https://evil.example/i.png) <https://evil.example> **bold**'))
    assert "<script" not in html and "&lt;script&gt;" in html
    assert "<a " not in html and "<img" not in html and "src=" not in html
    assert "<strong>bold</strong>" in html
    assert "https://evil.example/a" in html  # shown as text, so a reader still sees the target


def test_frontier_is_the_cheapest_point_at_each_pass_rate():
    def p(name, rate, high):
        return {"name": name, "mode": "replayed", "rate": Decimal(rate), "low": Decimal(high), "high": Decimal(high)}
    pts = [p("a", "0.5", "1"), p("b", "0.4", "2"), p("c", "0.9", "3"), p("d", "0.9", "4"), p("e", "1", "9")]
    assert [q["name"] for q in frontier(pts)] == ["a", "c", "e"]


def test_pass_chart_escapes_names_and_draws_bounds():
    svg = str(pass_vs_cost([{"policy": "<b>x</b>", "mode": "replayed",
                             "pass_rate": {"value": "0.5", "wilson95": ["0.3", "0.7"]},
                             "cost": {"per_task": {"low": "0.001", "high": "0.002"}}}]))
    assert "&lt;b&gt;x&lt;/b&gt;" in svg and "<b>" not in svg
    assert svg.count('class="err') == 2 and "<circle" in svg


def test_money_is_shown_without_float_artifacts():
    assert fmt_usd("0.000177") == "$0.000177"
    assert fmt_usd("0.0001234567") == "$0.000123"
    assert fmt_usd("12.5") == "$12.50"
    assert fmt_usd(("0", "0.1")) == "$0–$0.1"


def test_cell_slugs_are_safe_and_distinct():
    a, b = cell_slug("quotes-x@1/direct/2"), cell_slug("quotes-x@1/direct~2")
    assert a == "quotes-x@1~direct~2" and a != b
    assert "/" not in cell_slug("../../etc/passwd") and not cell_slug("..").startswith(".")


def test_scrubber_removes_paths_and_keys():
    scrub = Scrubber(["/home/alice/project/runs"], keys=["sk-live-1234567890"])
    text = scrub("at /home/alice/project/runs/x with sk-live-1234567890 and /root")
    assert text == "at …/x with [REDACTED] and /root"


def test_what_the_site_caches_of_a_run_is_what_the_analysis_reads_of_it(tmp_path):
    """Every run's cached entry gives exactly the view the analysis makes from the run's full
    records (denials read ``action.reason``, cut-off calls ``call.turn``/``attempt``): a
    cache that kept a pick of record fields would lose one the analysis reads."""
    from benchclaw.formats import jsonio
    from benchclaw.analysis import view_run
    from benchclaw.analysis.inputs import call_keys
    from benchclaw.site import build_site
    from benchclaw.site._experiment import CachedRuns

    synth_runs(tmp_path / "runs", 30)
    store, _ = _denials_and_mismatches(tmp_path)
    build_site(store.root, tmp_path / "site")
    rows = [jsonio.loads(line) for line in
            (tmp_path / "site" / ".benchclaw-build" / "records.jsonl").read_bytes().splitlines()]
    payloads = {run_id: jsonio.dumps(row) for run_id, row in rows}
    cached = dict(CachedRuns(list(payloads), payloads.get))
    runs = {r.run_id: r for r in store.iter_runs()}
    assert set(cached) == set(runs) and any(c.view.denials for c in cached.values() if c)
    for run_id, c in cached.items():
        records = runs[run_id].records
        assert c is not None and c.view == view_run(run_id, records), run_id
        attempt = (runs[run_id].start.get("policy") or {}).get("attempt")
        assert c.attempt == attempt and c.keys == (call_keys(records) if attempt else ())
        assert c.task == runs[run_id].start.get("task")


def test_cli_build_then_serve(tmp_path):
    synth_runs(tmp_path / "runs", 6)
    runner = CliRunner()
    result = runner.invoke(cli, ["build", "--runs", str(tmp_path / "runs"), "-o", str(tmp_path / "site")])
    assert result.exit_code == 0, result.output
    assert "index.html" in result.output
    server = make_server(tmp_path / "site", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        assert server.server_address[0] == "127.0.0.1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html") as resp:
            assert b"Experiments" in resp.read()
            assert resp.headers["X-Content-Type-Options"] == "nosniff"
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/runs/")
    finally:
        server.shutdown()
        server.server_close()


def test_cli_reports_a_missing_runs_dir(tmp_path):
    from benchclaw.cli import run_cli

    assert run_cli(cli, ["build", "--runs", str(tmp_path / "nope"), "-o", str(tmp_path / "s")]) == 2
    assert run_cli(cli, ["serve", str(tmp_path / "nothing"), "--port", "0"]) == 2


def test_commands_have_help_with_an_example():
    for name in ("build", "serve"):
        result = CliRunner().invoke(cli, [name, "--help"])
        assert result.exit_code == 0 and "Example:" in result.output


def test_site_summary_is_the_reports_summary(tmp_path):
    from benchclaw.formats import jsonio
    from benchclaw.analysis.report import build_summary
    from benchclaw.site import build_site

    synth_runs(tmp_path / "runs", 24)
    build_site(tmp_path / "runs", tmp_path / "site")
    state = jsonio.loads((tmp_path / "site" / ".benchclaw-build" / "state.json").read_bytes())
    assert state["experiments"]["E01"]["summary"] == build_summary(Store(tmp_path / "runs"), "E01")


def _denials_and_mismatches(tmp_path):
    from tests.analysis_factories import Exp, call, write_store

    e = Exp()
    mismatch = {**call("0.003"), "model_mismatch": True, "model_echoed": "other"}
    e.grid("quotes-a@1/direct/1", {"lightning": False, "ultra": True}, injection_attempts=1, denials=2)
    e.add("quotes-a@1/direct/1", "super", True, calls=[mismatch])
    store = Store(tmp_path / "runs")
    write_store(e, store)
    return store, e.experiment


def test_site_experiment_summary_is_the_report_summary(tmp_path):
    """The site's cached view of a run is condensed from its full records: denials (whose
    reason the condensed records used to drop) and model mismatches count as in the report."""
    import json

    from benchclaw.analysis.report import build_summary
    from benchclaw.site import build_site

    store, exp = _denials_and_mismatches(tmp_path)
    build_site(store.root, tmp_path / "site")
    state = json.loads((tmp_path / "site" / ".benchclaw-build" / "state.json").read_bytes())
    expected = build_summary(store, exp)
    assert state["experiments"][exp]["summary"] == json.loads(json.dumps(expected))
    tiers = {t["tier"]: t for t in expected["primary"]["tiers"]}
    assert tiers["lightning"]["injection"]["denials"] == 2 and tiers["super"]["finish"]["model_mismatch"] == 1


def test_a_damaged_analysis_cache_heals_instead_of_misreporting(tmp_path):
    from benchclaw.site import build_site
    from tests.synth_runs import add_run

    synth_runs(tmp_path / "runs", 12)
    out = tmp_path / "site"
    build_site(tmp_path / "runs", out)
    cache = out / ".benchclaw-build" / "records.jsonl"
    lines = cache.read_bytes().splitlines()
    cache.write_bytes(b"\n".join([b'["' + lines[0][2:66] + b'", {"view": [1, 2]}]'] + lines[2:]) + b"\n")
    add_run(tmp_path / "runs", experiment="E01", seed=77)  # the experiment is analysed again
    build_site(tmp_path / "runs", out)
    fresh = tmp_path / "fresh"
    build_site(tmp_path / "runs", fresh)
    page = "experiments/E01.html"
    assert (out / page).read_bytes() == (fresh / page).read_bytes()
    assert "unreadable" not in (out / page).read_text().lower()


def test_site_counts_calls_cut_off_in_flight_like_the_report(tmp_path):
    """A call cut off mid-flight has no call record, only a ledger reservation: the site's
    experiment page must count it at its bound exactly as `benchclaw report` does."""
    import json

    from benchclaw.analysis.report import build_summary
    from benchclaw.site import build_site
    from benchclaw.evidence.store import ChainFile
    from tests.analysis_factories import Exp, call, write_store

    e = Exp()
    cell = "quotes-a@1/direct/1"
    e.add(cell, "lightning", False, status="aborted", attempt="a1", calls=[call("0.001", turn=0)])
    e.add(cell, "super", True, attempt="a2", calls=[call("0.003", turn=0)])
    store = Store(tmp_path / "runs")
    write_store(e, store)
    ledger = ChainFile(store.root / "ledgers" / "l1.jsonl")
    for kind, body in [("reserve", {"id": "r1", "attempt": "a1", "key": "0.0", "usd": "0.002"}),
                       ("settle", {"id": "r1", "known": True, "usd": "0.001"}),
                       ("reserve", {"id": "r2", "attempt": "a1", "key": "1.0", "usd": "0.005"}),
                       ("settle", {"id": "r2", "known": False, "usd": "0.005"})]:
        ledger.append(kind, body)
    build_site(store.root, tmp_path / "site")
    state = json.loads((tmp_path / "site" / ".benchclaw-build" / "state.json").read_bytes())
    expected = build_summary(store, e.experiment)
    lightning = {t["tier"]: t for t in expected["primary"]["tiers"]}["lightning"]
    assert lightning["finish"]["cut_off"] == 1  # the report counts it ...
    assert state["experiments"][e.experiment]["summary"] == json.loads(json.dumps(expected))  # ... and so does the site


def test_spill_gives_back_each_runs_bytes_and_summaries_read_them_in_run_order():
    """The build keeps run summaries and analysis payloads in a temporary file (``Spill``):
    every key gives back its own bytes (a later write wins), whatever the order of writes,
    and ``Summaries`` reads them back in the (at, id) order of its facts, whole or sliced."""
    from benchclaw.site._cache import Spill, compact_dumps
    from benchclaw.site._state import RunFacts, Summaries

    spill = Spill()
    entries = {f"{i:064x}": {"s": {"id": f"{i:064x}", "at": f"2026-01-01T00:00:{59 - i % 60:02d}Z",
                                   "tier": "t" * (i % 7), "usage": {"b": i, "a": None}}, "l": [str(i)]}
               for i in range(300)}
    for run_id in reversed(list(entries)):
        spill[run_id] = compact_dumps({"s": {}, "l": []})  # overwritten below
    for run_id, entry in entries.items():
        spill[run_id] = compact_dumps(entry)
    assert len(spill) == 300 and "0" * 64 in spill and "x" not in spill
    assert all(spill[k] == compact_dumps(v) for k, v in entries.items())
    facts = sorted((RunFacts(e["s"]["at"], k, None, False) for k, e in entries.items()), key=lambda f: (f.at, f.id))
    summaries = Summaries(spill, facts)
    want = sorted((e["s"] for e in entries.values()), key=lambda s: (s["at"], s["id"]))
    assert list(summaries) == want and summaries[100:200] == want[100:200] and summaries[-1] == want[-1]
    assert list(summaries[7]["usage"]) == list(want[7]["usage"])  # key order kept: pages iterate dicts
    for i, run_id in enumerate(entries):  # a second value (the analysis payload), for some runs
        if i % 3:
            spill.put(run_id, compact_dumps(entries[run_id]), b"[%d]" % i)
    assert all(spill[k] == compact_dumps(v) for k, v in entries.items())
    assert sorted(spill.second) == sorted(k for i, k in enumerate(entries) if i % 3)
    assert all(spill.second[k] == b"[%d]" % i for i, k in enumerate(entries) if i % 3)
    assert "0" * 64 not in spill.second and f"{1:064x}" in spill.second and "x" not in spill.second
    spill.close()


@pytest.mark.parametrize("n", [0, 1, 4095, 4096, 4097, 9000])
def test_the_cache_state_written_in_slices_is_the_whole_objects_sorted_json(tmp_path, n):
    """``state.json`` is written piece by piece (blobs, pages and runs in slices), yet its
    bytes are exactly ``fast_dumps`` of the whole state: the same inputs, the same bytes."""
    from benchclaw.site._cache import CACHE_VERSION, BuildCache, Spill, compact_dumps, fast_dumps

    cache = BuildCache(tmp_path, "r" * 64)
    objects = sorted(f"sha256:{i:064x}" for i in range(n))
    pages = {f"runs/{i % 97:02x}/{i:08x}.html": f"{i * 7919 % 100003:064x}" for i in range(n)}
    runs, want_runs = Spill(), {}
    for i in range(min(n, 300)):
        entry = {"s": {"id": f"{i:064x}", "z": [i, None, "é"], "a": {"y": 1, "b": True}}, "l": [objects[i]]}
        runs[f"{i:064x}"], want_runs[f"{i:064x}"] = compact_dumps(entry), entry
    experiments = {"E": {"key": "k", "summary": {"b": 1, "a": [1, 2]}}}
    got = b"".join(cache._state(iter(sorted(pages.items())), runs, experiments, objects))
    assert got == fast_dumps({"experiments": experiments, "objects": objects, "pages": pages,
                              "renderer": "r" * 64, "runs": want_runs, "v": CACHE_VERSION})


def test_page_writer_lists_the_run_pages_it_keeps_as_ids_among_the_other_pages_in_path_order(tmp_path):
    """Run pages are recorded by run id alone (``record_run``); ``items()`` gives them as
    (``run_url``, id) merged with every other page, in path order, as one dict sorted would."""
    import hashlib

    from benchclaw.site._cache import PageWriter
    from benchclaw.site._render import run_url

    pw = PageWriter(tmp_path, None, None, {}, {})
    ids = [hashlib.sha256(b"%d" % i).hexdigest() for i in range(50)]
    want = {}
    for i, run_id in enumerate(ids):
        pw.record_run(run_id, written=i % 2 == 0)
        want[run_url(run_id)] = run_id
    for rel in ("index.html", "runs/page-1.html", "runs/page-10.html", "runs/zz.html", "tasks/a-v1.html"):
        pw.record(rel, "k" + rel, written=True)
        want[rel] = "k" + rel
    assert list(pw.items()) == sorted(want.items()) and list(pw.items()) == sorted(want.items())
    assert (pw.written, pw.skipped) == (30, 25)


def test_digest_set_gives_every_digest_once_in_order_across_spilled_batches(monkeypatch):
    import hashlib
    import random

    from benchclaw.site._build import _not_in
    from benchclaw.site._state import DigestSet

    monkeypatch.setattr(DigestSet, "BATCH", 7)  # several batches written to its file
    digests = [hashlib.sha256(b"%d" % i).hexdigest() for i in range(40)]
    digests += ["sha256:" + d for d in digests[::3]]  # the pages' own form, held as raw bytes too
    odd = ["sha256:odd", "ABC", "sha256:" + "A" * 64, "sha256:" + "0" * 63, "sha1:" + "0" * 64]
    rng = random.Random(5)
    ds = DigestSet()
    for d in rng.choices(digests, k=120) + digests + odd:
        ds.add(d)
    want = sorted(set(digests) | set(odd))
    assert list(ds.sorted()) == want and list(ds.sorted()) == want  # one pass at a time, repeatable
    old = sorted(digests[:5] + ["0" * 64, "f" * 64])
    assert list(_not_in(old, ds.sorted())) == ["0" * 64, "f" * 64]


def test_build_store_finds_packed_blobs_as_a_store_does_without_indexing_them_all(tmp_path, monkeypatch):
    """``BuildStore`` reads the pack index files for the digests asked (or scans a pack that has
    none) and finds the same copy ``PackIndex`` does; it never builds a whole index for a few."""
    import os

    from benchclaw.evidence import packs
    from benchclaw.evidence.packs import finish_packs, list_packs
    from benchclaw.site import _blobs
    from benchclaw.site._blobs import BuildStore

    store = Store(tmp_path / "runs", fsync=False)
    store.ensure()
    digests = [store.stage_blob(b"blob %d" % i) for i in range(300)]
    store.commit_sync()
    finish_packs(str(tmp_path / "runs" / "objects"))
    built = []
    monkeypatch.setattr(_blobs, "PackIndex", lambda objects: built.append(objects) or packs.PackIndex(objects))
    plain, few = Store(tmp_path / "runs", fsync=False), BuildStore(tmp_path / "runs", fsync=False)
    for d in digests[::37] + [digests[-1]]:
        assert few.find_blob(d) == plain.find_blob(d) is not None
        assert few.get_blob(d) == plain.get_blob(d)
    assert few.find_blob("sha256:" + "0" * 64) is None and not few.has_blob("sha256:" + "1" * 64)
    assert built == [] and len(few._packs._found) == 10  # looked up in the index files, not a writer's
    (pack,) = list_packs(str(tmp_path / "runs" / "objects"))
    os.unlink(pack[:-len(".pack")] + ".idx")  # no index file: the pack's headers are scanned
    scanned = BuildStore(tmp_path / "runs", fsync=False)
    assert [scanned.find_blob(d) for d in digests[::50]] == [plain.find_blob(d) for d in digests[::50]]
    monkeypatch.setattr(_blobs, "_LOOKUPS_MAX", 3)  # past it, a whole index after all
    many = BuildStore(tmp_path / "runs", fsync=False)
    assert [many.find_blob(d) for d in digests[:5]] == [plain.find_blob(d) for d in digests[:5]]
    assert len(built) == 1


def test_worker_store_finds_packed_blobs_through_the_shared_index(tmp_path):
    """A render worker's ``WorkerStore`` finds every packed blob through the parent's
    ``SharedIndex`` (the same copy a ``Store`` finds, a blob in two packs included) and a
    digest the index does not hold as a plain ``Store`` would."""
    from benchclaw.evidence.packs import PACK_MAGIC, entry_bytes, finish_packs
    from benchclaw.site._blobs import SharedIndex, WorkerStore

    store = Store(tmp_path / "runs", fsync=False)
    store.ensure()
    digests = [store.stage_blob(b"blob %d" % i) for i in range(300)]
    store.commit_sync()
    objects = tmp_path / "runs" / "objects"
    finish_packs(str(objects))
    other = objects / "packs" / ("0" * 32 + ".pack")  # named first: its copy is the one found
    other.write_bytes(PACK_MAGIC + entry_bytes(digests[5][7:], b"blob 5"))
    shared = SharedIndex(str(objects))
    plain = Store(tmp_path / "runs", fsync=False)
    WorkerStore.shared = shared
    try:
        worker = WorkerStore(tmp_path / "runs", fsync=False)
    finally:
        WorkerStore.shared = None
    assert [worker.find_blob(d) for d in digests] == [plain.find_blob(d) for d in digests]
    assert worker.find_blob(digests[5]).path == str(other)
    assert worker._packs._whole is None  # every one found in the shared index
    assert worker.find_blob("sha256:" + "0" * 64) is None  # not there: looked up as a Store does
