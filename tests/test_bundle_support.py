"""Factories for the bundle and verifier tests: an honest experiment, a raw zip builder, a forger.

No tests here. ``honest_runs`` writes a small experiment with the real agent runtime and a
scripted provider (a prereg journal record, runs, their journal ``run`` records);
``raw_zip`` writes zip bytes field by field so a test can craft any container attack;
``Forger`` rewrites a bundle *consistently* after an edit (run ids, chains, journal
references, manifest), so that only recomputation can catch what it changed.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from benchclaw.formats import jsonio
from benchclaw.bundle._zipwrite import in_bundle_order, write_zip
from benchclaw.formats.records import GENESIS, Record, encode, line_hash, split_lines
from benchclaw.verify.manifest import MANIFEST, RUN_PATH, build_manifest, object_path, run_path

EXP = "E01"
SPEC = b"""v = 1
id = "E01"
title = "Bundle test experiment"

[grid]
tasks = ["quotes-agenttest"]
profiles = ["direct"]
seeds = [1, 2]
tiers = ["lightning", "super"]
catalog = "sim"
all_tiers = true

[policies]
live = []

[[hypotheses]]
id = "H1"
text = "super passes at least as often as lightning"
rule = 'pass_rate("always:super") >= pass_rate("always:lightning")'
"""


def _conversation(good: bool) -> list:
    from benchclaw.agent.testing import GOOD_ANSWER, act

    answer = GOOD_ANSWER if good else '{"answer": 42}'
    return [act("read", path="docs/a.md"), act("write", path="out/answer.json", content=answer),
            act("finish", summary="done")]


def honest_runs(root: Path, *, cells=((1, "lightning", False), (1, "super", True),
                                      (2, "lightning", True), (2, "super", True))) -> Path:
    """A runs directory with a registered experiment and one sealed run per (seed, tier)."""
    from benchclaw.agent import load_profile, run_agent
    from benchclaw.agent.testing import FakeClock, ScriptedProvider, make_task
    from benchclaw.providers.catalog import load_catalog
    from benchclaw.evidence.store import Store

    store = Store(root, fsync=False)
    digest = store.put_blob(SPEC)
    journal = store.journal(EXP, writer="test")
    journal.append("prereg", {"experiment": EXP, "spec_path": "experiments/E01.toml", "spec_digest": digest})
    task, catalog, profile = make_task(), load_catalog("sim"), load_profile("direct")
    cell_ids = [f"{task.id}@{task.version}/direct/{s}" for s in sorted({c[0] for c in cells})]
    journal.append("grid.start", {"invocation": "inv1", "spec_digest": digest, "ledger": None,
                                  "cells": cell_ids, "tiers": ["lightning", "super"], "policies": [],
                                  "rerun": False})
    for seed, tier, good in cells:
        cell = f"{task.id}@{task.version}/direct/{seed}"
        ctx = {"experiment": EXP, "cell": cell, "policy": "grid", "trial": None, "step": 0,
               "rerun": False, "replaces": None, "spec_digest": digest}
        clock = FakeClock()
        res = asyncio.run(run_agent(
            store=store, task=task, tier=tier, catalog=catalog, profile=profile, seed=seed,
            provider=ScriptedProvider(_conversation(good), clock=clock), limits=None,
            policy_context=ctx, ledger=None, max_tokens=256, clock=clock))
        journal.append("run", {"invocation": "inv1", "run_id": res.run_id, "cell": cell, "tier": tier,
                               "policy": "grid", "trial": None, "step": 0, "status": res.status,
                               "called_model": True, "rerun": False})
    journal.append("grid.end", {"invocation": "inv1", "status": "complete", "runs": len(cells)})
    return root


# -- reading and rewriting bundles -----------------------------------------------------------

def entries(bundle: bytes) -> dict[str, bytes]:
    """Every entry of an honest (well-formed) bundle, manifest included."""
    with zipfile.ZipFile(io.BytesIO(bundle)) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def pack(files: dict[str, bytes], tmp: Path, *, manifest: bytes | None = None, fix_manifest: bool = True) -> bytes:
    """Zip ``files`` (without manifest.json) the way export does; the manifest is rebuilt
    unless ``fix_manifest`` is False (then the given or the old one is kept)."""
    body = {k: v for k, v in files.items() if k != MANIFEST}
    if fix_manifest:
        old = jsonio.loads(files[MANIFEST]) if MANIFEST in files else {"experiments": [EXP]}
        manifest = build_manifest(old["experiments"], body).to_bytes()
    elif manifest is None:
        manifest = files[MANIFEST]
    out = tmp / "rezipped.zip"
    write_zip(out, in_bundle_order(manifest, body))
    return out.read_bytes()


def rewrite_lines(lines: list[bytes], edit: Callable[[list[dict]], list[dict]] | None = None,
                  *, rechain: bool = True) -> bytes:
    """Re-encode a record file after ``edit`` of its parsed envelopes, chain redone."""
    objs = [jsonio.loads(ln) for ln in lines]
    if edit is not None:
        objs = edit(objs)
    out, prev = [], GENESIS
    for i, o in enumerate(objs):
        if rechain:
            o["seq"], o["prev"] = i, prev
        line = encode(Record(o["seq"], o["prev"], o["at"], o["kind"], o["body"]))
        prev = line_hash(line)
        out.append(line + b"\n")
    return b"".join(out)


@dataclass
class Forger:
    """Edits a bundle and then redoes every digest, chain link, run id, journal reference,
    manifest entry and (optionally) the claimed summary, as a careful forger would."""

    files: dict[str, bytes]
    renamed: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, bundle: bytes) -> "Forger":
        return cls(entries(bundle))

    def run_ids(self) -> list[str]:
        return sorted(m.group(2) for n in self.files if (m := RUN_PATH.match(n)))

    def records(self, run_id: str) -> list[dict]:
        lines, _ = split_lines(self.files[run_path(run_id)])
        return [jsonio.loads(ln) for ln in lines]

    def put_blob(self, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.files[object_path(digest)] = data
        return digest

    def blob(self, digest: str) -> bytes:
        return self.files[object_path(digest)]

    def edit_run(self, run_id: str, edit: Callable[[list[dict]], list[dict]], *, rechain: bool = True) -> str:
        """Apply ``edit`` to a run's envelopes, re-chain, rename to the new id, fix the journal."""
        lines, _ = split_lines(self.files.pop(run_path(run_id)))
        data = rewrite_lines(lines, edit, rechain=rechain)
        new_id = hashlib.sha256(data).hexdigest()
        self.files[run_path(new_id)] = data
        self.renamed[run_id] = new_id
        self._fix_journals(run_id, new_id)
        return new_id

    def drop_run(self, run_id: str) -> None:
        del self.files[run_path(run_id)]

    def edit_journal(self, edit: Callable[[list[dict]], list[dict]]) -> None:
        for name in [n for n in self.files if n.startswith(f"journals/{EXP}/")]:
            lines, _ = split_lines(self.files[name])
            self.files[name] = rewrite_lines(lines, edit)

    def edit_chain(self, name: str, edit: Callable[[list[dict]], list[dict]]) -> None:
        """Edit any chained file (a ledger, a journal) and redo its chain."""
        lines, _ = split_lines(self.files[name])
        self.files[name] = rewrite_lines(lines, edit)

    def _fix_journals(self, old: str, new: str) -> None:
        def swap(objs):
            for o in objs:
                text = jsonio.dumps(o["body"]).replace(old.encode(), new.encode())
                o["body"] = jsonio.loads(text)
            return objs
        self.edit_journal(swap)

    def resummarise(self) -> None:
        """Recompute summary.json from the forged files, as an honest export would."""
        from benchclaw.analysis.report import summary_bytes
        from benchclaw.verify.experiment import experiment_data_from_files, summarise

        body = {k: v for k, v in self.files.items() if k not in (MANIFEST, "summary.json")}
        self.files["summary.json"] = summary_bytes(summarise(experiment_data_from_files(body, EXP)))

    def pack(self, tmp: Path, *, resummarise: bool = True) -> bytes:
        if resummarise:
            self.resummarise()
        return pack(self.files, tmp)


# -- raw zips for container attacks ----------------------------------------------------------

@dataclass
class RawEntry:
    name: bytes
    data: bytes
    method: int = 8
    flags: int = 0
    system: int = 3
    external_attr: int = 0o100644 << 16
    local_name: bytes | None = None     # a different name in the local header
    local_crc: int | None = None        # a different CRC in the local header
    offset: int | None = None           # point the central entry elsewhere
    crc: int | None = None
    usize: int | None = None            # a size that lies (both headers agree on the lie)


def raw_zip(items: list[RawEntry], *, prefix: bytes = b"", suffix: bytes = b"",
            count: int | None = None) -> bytes:
    """Zip bytes written field by field, so a test can make headers lie."""
    out = bytearray(prefix)
    central = bytearray()
    for e in items:
        comp = e.data if e.method == 0 else _deflate(e.data)
        crc = zlib.crc32(e.data) if e.crc is None else e.crc
        offset = len(out) if e.offset is None else e.offset
        lname = e.name if e.local_name is None else e.local_name
        lcrc = crc if e.local_crc is None else e.local_crc
        usize = len(e.data) if e.usize is None else e.usize
        out += struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, e.flags, e.method, 0, 33, lcrc,
                           len(comp), usize, len(lname), 0) + lname + comp
        central += struct.pack("<4s2B5H3L5H2L", b"PK\x01\x02", 20, e.system, 20, e.flags, e.method,
                               0, 33, crc, len(comp), usize, len(e.name), 0, 0, 0, 0,
                               e.external_attr, offset) + e.name
    cd_offset = len(out)
    out += central
    n = len(items) if count is None else count
    out += struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, n, n, len(central), cd_offset, 0)
    return bytes(out) + suffix


def _deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def manifest_for(files: dict[bytes, bytes]) -> bytes:
    return build_manifest([EXP], {k.decode(): v for k, v in files.items()}).to_bytes()


# -- a real grid, through the runner and the simulator ---------------------------------------

GRID_SPEC = """v = 1
id = "E01"
title = "Bundle forgery suite: a small grid on the simulator"

[grid]
tasks = ["quotes-incident", "cents-fees"]
profiles = ["direct"]
seeds = [1, 2]
tiers = ["lightning", "super", "ultra"]
catalog = "sim"
all_tiers = true

[settings]
max_tokens = 4096
concurrency = 4

[budget]
usd = "5.00"
tokens = 50000000
per_call_usd = "0.10"

[policies]
live = ["ladder"]

[[hypotheses]]
id = "H1"
text = "The ladder passes at least as many cells as always-lightning."
rule = 'pass_rate("ladder") >= pass_rate("always:lightning")'
"""


def grid_runs(root: Path) -> Path:
    """A runs directory made by the real runner on the simulator: ledger, trials and all."""
    from benchclaw.experiments import prereg
    from benchclaw.experiments.runner import run_experiment
    from benchclaw.evidence.store import Store

    root.mkdir(parents=True, exist_ok=True)
    spec = root.parent / "E01.toml"
    spec.write_text(GRID_SPEC)
    prereg(Store(root, fsync=False), spec)
    asyncio.run(run_experiment(Store(root, fsync=False), EXP, spec_path=spec, handle_signals=False,
                               sim_options={"latency_scale": 0}))
    return root


# -- a grid with everything an analysis must handle -------------------------------------------

def eventful_runs(root: Path) -> Path:
    """A runs directory holding what a bundle must carry whole: a deviation recorded before
    the first run, a spend stop (first invocation), unknown usage and provider errors from
    injected simulator faults, a resumed second invocation under a second deviation, and a
    rerun invocation."""
    from benchclaw.experiments import deviate, prereg
    from benchclaw.experiments.runner import run_experiment
    from benchclaw.sim.backend import SimFaults
    from benchclaw.evidence.store import Store

    root.mkdir(parents=True, exist_ok=True)
    spec = root.parent / "E01.toml"
    spec.write_text(GRID_SPEC)
    prereg(Store(root, fsync=False), spec)
    stop = '\n[[stopping]]\nrule = "spend"\nusd = "{}"\n'
    spec.write_text(GRID_SPEC + stop.format("0.05"))
    deviate(Store(root, fsync=False), EXP, "stop early: spend cap before the first run", spec_path=spec)
    faults = SimFaults(rates={"missing_usage": 0.1, "server": 0.5}, retry_after_s=0)
    opts = {"latency_scale": 0, "faults": faults}
    for rerun in (False, None, True):
        if rerun is None:  # the second invocation continues under a raised cap
            spec.write_text(GRID_SPEC + stop.format("4.00"))
            deviate(Store(root, fsync=False), EXP, "raise the spend cap", spec_path=spec)
        asyncio.run(run_experiment(Store(root, fsync=False), EXP, spec_path=spec, handle_signals=False,
                                   sim_options=opts, rerun=bool(rerun)))
    return root


def test_run_ids_hold_the_journal_ids_as_raw_digests_and_answer_as_a_set():
    from benchclaw.bundle._collect import RunIds

    ids = [f"{i:064x}" for i in range(0, 300, 7)] + ["not-a-digest", "A" * 64]
    got = RunIds(ids)
    assert all(i in got for i in ids)
    assert f"{1:064x}" not in got and "zz" not in got and "a" * 64 not in got
    assert sorted(got) == sorted(ids)
    assert got.difference(ids[:3]) == set(ids[3:])
