"""A consistent forger's toolkit: edit a bundle, then re-derive everything that follows.

No tests here. ``Forgery`` (built on ``test_bundle_support.Forger``, which re-chains a run,
renames it to its new id and swaps the id in the journal) adds the re-derivations an
outsider reading docs/FORMAT.md would do after any edit, so a forgery differs from an
honest bundle only in what the verifier must *recompute* to notice:

- ``redo_costs``: every call's cost and bound from its usage and the run's prices, the
  run totals, and the ledger reservations and settlements of those calls;
- ``sync_journal``: every journal ``run`` record's status, claims and cost from its run,
  and every ``trial`` recomputed with ``benchclaw.formats.policies.outcome``;
- ``reclose_ledgers``: ``carried`` spend and ``ledger.close`` totals replayed;
- ``finish``: all of the above, then ``summary.json`` and the manifest (``pack``).

Each edit helper (``swap_written_file``, ``change_task_input``, ``scale_prices``,
``drop_run``, ...) does its edit and leaves the re-derivation to ``finish``, so a new
forgery of the same kind is a few lines.
"""

from __future__ import annotations

import hashlib
from decimal import Decimal

from benchclaw.formats import jsonio
from benchclaw.formats.catalog import parse_catalog
from benchclaw.checks.digest import task_digest
from benchclaw.formats.ledger import LedgerState, apply_record, totals
from benchclaw.formats.money import Prices, Usage, cost_bounds, fmt_usd, sum_usage
from benchclaw.formats.policies import Attempt, outcome
from benchclaw.formats.records import Record, split_lines
from benchclaw.checks.tasks import Task, check_artifacts
from benchclaw.verify.manifest import MANIFEST, object_path, run_path

from tests.test_bundle_support import EXP, Forger

JOURNAL = f"journals/{EXP}/"


def _lit(s: str) -> str:
    import re
    return "literal:" + s if re.match(r"^sha256:[0-9a-f]{64}$", s) else s


class Forgery(Forger):
    def edit_run(self, run_id: str, edit, *, rechain: bool = True) -> str:
        """As ``Forger.edit_run``, then every other run naming the old id (a rerun's
        ``replaces``) is rewritten too, and renamed in turn."""
        new = super().edit_run(run_id, edit, rechain=rechain)
        old_b, new_b = run_id.encode(), new.encode()
        for other in [r for r in self.run_ids() if r != new and old_b in self.files[run_path(r)]]:
            def swap(objs):
                for o in objs:
                    o["body"] = jsonio.loads(jsonio.dumps(o["body"]).replace(old_b, new_b))
                return objs
            Forgery.edit_run(self, other, swap)
        return new

    def current(self, run_id: str) -> str:
        """The id a run has now, after every rename."""
        while self.renamed.get(run_id, run_id) != run_id:  # an edit that changed nothing keeps its id
            run_id = self.renamed[run_id]
        return run_id

    def each_run(self):
        """Every run id, each resolved to its current name when its turn comes."""
        for rid in list(self.run_ids()):
            yield self.current(rid)

    # -- reading ------------------------------------------------------------------------
    def journal_names(self) -> list[str]:
        return sorted(n for n in self.files if n.startswith(JOURNAL))

    def journal(self) -> list[dict]:
        out = []
        for n in self.journal_names():
            lines, _ = split_lines(self.files[n])
            out += [jsonio.loads(ln) for ln in lines]
        return sorted(out, key=lambda o: o["at"])

    def ledger_names(self) -> list[str]:
        return sorted(n for n in self.files if n.startswith("ledgers/"))

    def ledger(self, name: str) -> list[dict]:
        lines, _ = split_lines(self.files[name])
        return [jsonio.loads(ln) for ln in lines]

    def find_run(self, pred) -> str:
        return next(r for r in self.run_ids() if pred(self.records(r)))

    def task(self, recs: list[dict]) -> tuple[str, Task]:
        t = recs[0]["body"]["task"]
        prefix = f"tasks/{t['id']}/v{t['version']}"
        files = {n[len(prefix) + 1:]: v for n, v in self.files.items() if n.startswith(prefix + "/")}
        return prefix, Task.from_files(files, prefix)

    def prices_of(self, recs: list[dict]) -> Prices:
        return Prices.from_dict(recs[0]["body"]["prices"], "prices")

    # -- edits of one kind each ---------------------------------------------------------
    def swap_written_files(self, run_id: str, new: dict[str, bytes], *, rejudge: bool = True) -> str:
        """Replace what a run's permitted writes wrote to each path in ``new`` (the writes'
        content blobs and observations, the artifacts) and re-judge its checks; the model's
        replies are left as they were."""
        recs = self.records(run_id)
        _, task = self.task(recs)
        blobs = {p: self.put_blob(d) for p, d in new.items()}

        def edit(objs):
            for o in objs:
                b = o["body"]
                if o["kind"] == "action" and b.get("name") == "write" and b.get("permitted"):
                    path = b["args"].get("resolved", b["args"]["path"])
                    if path in new:
                        b["args"]["content"], b["args"]["bytes"] = blobs[path], len(new[path])
                        b["observation"] = self.put_blob(jsonio.dumps(
                            {"ok": True, "action": "write", "path": path, "bytes": len(new[path])}))
                if o["kind"] == "artifact" and b["path"] in new:
                    b["digest"], b["size"] = blobs[b["path"]], len(new[b["path"]])
            return self._rejudge(objs, task) if rejudge else objs
        return self.edit_run(run_id, edit)

    def written_paths(self, run_id: str) -> list[str]:
        return sorted({o["body"]["args"].get("resolved", o["body"]["args"]["path"]) for o in self.records(run_id)
                       if o["kind"] == "action" and o["body"]["name"] == "write" and o["body"]["permitted"]})

    def _rejudge(self, objs: list[dict], task: Task) -> list[dict]:
        arts = {o["body"]["path"]: self.blob(o["body"]["digest"]) for o in objs if o["kind"] == "artifact"}
        results = check_artifacts(task, arts, include_heldout=True)
        checks = iter(results)
        for o in objs:
            if o["kind"] == "check":
                r = next(checks)
                o["body"] = {**r.to_dict(), "detail": _lit(r.detail)}
        end = objs[-1]["body"]
        end["passed"] = all(r.passed for r in results)
        end["gate_passed"] = all(r.passed for r in results if r.gate)
        if end["status"] in ("passed", "failed"):
            end["status"] = "passed" if end["passed"] else "failed"
            end["reason"] = "all checks passed" if end["passed"] else end["reason"]
        return objs

    def change_task_input(self, prefix: str, path: str, data: bytes) -> str:
        """Change one input file of a task version and rewrite its digest in every run."""
        self.files[f"{prefix}/{path}"] = data
        self.put_blob(data)
        files = {n[len(prefix) + 1:]: v for n, v in self.files.items() if n.startswith(prefix + "/")}
        listing = "".join(f"sha256:{hashlib.sha256(v).hexdigest()}  {p}\n" for p, v in sorted(files.items()))
        new = self.put_blob(listing.encode())
        assert new == task_digest(files)
        for rid in self.each_run():
            recs = self.records(rid)
            t = recs[0]["body"]["task"]
            if f"tasks/{t['id']}/v{t['version']}" == prefix:
                def edit(objs):
                    objs[0]["body"]["task"]["digest"] = new
                    return objs
                self.edit_run(rid, edit)
        return new

    def scale_prices(self, factor: Decimal) -> None:
        """Every price of the catalog times ``factor``: a new catalog file (name and digest),
        ``run.start`` ``catalog``/``prices`` in every run; ``finish`` redoes the costs."""
        old = next(n for n in self.files if n.startswith("catalogs/"))
        text = self.files.pop(old).decode()
        import re

        def scaled(m):
            return f'{m.group(1)}"{fmt_usd(Decimal(m.group(2)) * factor)}"'
        text = re.sub(r'((?:input|cached_input|cache_write|output)\s*=\s*)"([0-9.]+)"', scaled, text)
        data = text.encode()
        digest = self.put_blob(data)
        name = old.split("/")[1].rsplit("-", 1)[0]
        self.files[f"catalogs/{name}-{digest[7:19]}.toml"] = data
        cat = parse_catalog(data, "forged")
        for rid in self.each_run():
            def edit(objs):
                b = objs[0]["body"]
                b["catalog"] = {**b["catalog"], "digest": digest}
                b["prices"] = cat.tier(b["tier"]).prices.to_dict()
                return objs
            self.edit_run(rid, edit)
        self.costs_dirty = True

    def drop_run(self, run_id: str) -> dict:
        """Remove a run, its journal record and its ledger reservations; returns its run.start."""
        recs = self.records(run_id)
        start = recs[0]["body"]
        del self.files[run_path(run_id)]
        attempt = start["policy"]["attempt"]
        self.edit_journal(lambda objs: [o for o in objs if o["body"].get("run_id") != run_id])
        for name in self.ledger_names():
            ids = {o["body"]["id"] for o in self.ledger(name) if o["kind"] == "reserve"
                   and o["body"].get("attempt") == attempt}
            self.edit_chain(name, lambda objs: [o for o in objs if not (
                o["kind"] in ("reserve", "refuse") and o["body"].get("attempt") == attempt
                or o["kind"] == "settle" and o["body"].get("id") in ids)])
        return start

    def set_usage(self, run_id: str, line: int, usage_raw: dict) -> str:
        """Forge one call's raw usage blob and its normalised usage (``finish`` redoes costs)."""
        from benchclaw.formats.money import normalise_usage

        digest = self.put_blob(jsonio.dumps(usage_raw))

        def edit(objs):
            b = objs[line - 1]["body"]
            b["usage_raw"], b["usage"] = digest, normalise_usage(usage_raw).to_dict()
            return objs
        self.costs_dirty = True
        return self.edit_run(run_id, edit)

    def add_journal_record(self, kind: str, body: dict, *, before_kind: str, invocation: str) -> None:
        """Insert a record just before the invocation's ``before_kind`` record, same time."""
        def edit(objs):
            for i, o in enumerate(objs):
                if o["kind"] == before_kind and o["body"].get("invocation") == invocation:
                    objs.insert(i, {"at": o["at"], "kind": kind, "body": body, "seq": 0, "prev": ""})
                    break
            return objs
        self.edit_journal(edit)

    # -- re-derivation --------------------------------------------------------------------
    costs_dirty: bool = False

    def redo_costs(self) -> None:
        """Every call's cost from its usage and the run's prices, run totals, and the ledger
        reserve/settle amounts of those calls."""
        fixes: dict[tuple, tuple] = {}
        for rid in self.each_run():
            recs = self.records(rid)
            prices = self.prices_of(recs)
            attempt = (recs[0]["body"].get("policy") or {}).get("attempt")

            def edit(objs, prices=prices, attempt=attempt):
                usages, total = [], None
                for o in objs:
                    if o["kind"] != "call":
                        continue
                    b = o["body"]
                    u = Usage.from_dict(b["usage"]) if isinstance(b.get("usage"), dict) else None
                    cb = cost_bounds(u, b["prompt_estimate"], b["params"]["max_tokens"], prices)
                    b["cost"] = cb.to_dict()
                    bound = cost_bounds(None, b["prompt_estimate"], b["params"]["max_tokens"], prices).high
                    fixes[(attempt, f"{b['turn']}.{b['attempt']}")] = (fmt_usd(bound), u, cb)
                    total = cb if total is None else total + cb
                    if u is not None:
                        usages.append(u)
                end = objs[-1]["body"]
                if total is not None:
                    end["cost"] = total.to_dict()
                end["usage"] = sum_usage(usages).to_dict()
                return objs
            self.edit_run(rid, edit)
        for name in self.ledger_names():
            rid_fix: dict[str, tuple] = {}

            def edit(objs):
                for o in objs:
                    b = o["body"]
                    if o["kind"] == "reserve" and (b.get("attempt"), b.get("key")) in fixes:
                        bound, u, cb = fixes[(b["attempt"], b["key"])]
                        b["usd"] = bound
                        rid_fix[b["id"]] = (bound, u, cb)
                    elif o["kind"] == "settle" and b.get("id") in rid_fix:
                        bound, u, cb = rid_fix[b["id"]]
                        if b.get("known"):
                            b["tokens"], b["usd"] = u.total, cb.to_dict()["low"]
                        else:
                            b["usd"] = bound
                return objs
            self.edit_chain(name, edit)

    def sync_journal(self) -> None:
        """Journal ``run`` records follow their runs; ``trial`` records are recomputed."""
        runs = {rid: self.records(rid) for rid in self.run_ids()}
        tiers = {o["body"]["invocation"]: o["body"]["tiers"] for o in self.journal() if o["kind"] == "grid.start"}

        def edit(objs):
            for o in objs:
                b = o["body"]
                if o["kind"] == "run" and b.get("run_id") in runs:
                    end = runs[b["run_id"]][-1]["body"]
                    for k in ("status", "passed", "gate_passed"):
                        if k in b:
                            b[k] = end.get(k) if k == "status" else bool(end.get(k))
                    if "cost" in b:
                        c = end.get("cost") or {}
                        b["cost"] = {"known": bool(c.get("known")), "low": c.get("low", "0"), "high": c.get("high", "0")}
                elif o["kind"] == "trial" and all(r in runs for r in b.get("runs") or []):
                    atts = []
                    for r in b["runs"]:
                        s, e = runs[r][0]["body"], runs[r][-1]["body"]
                        c = e.get("cost") or {}
                        atts.append(Attempt(s["tier"], bool(e.get("gate_passed")), bool(e.get("passed")),
                                            Decimal(c.get("low", "0")), Decimal(c.get("high", "0")),
                                            int(e.get("elapsed_ms") or 0), r, int(s["policy"].get("batch") or 0)))
                    out = outcome(b["policy"], tiers.get(b["invocation"], []), atts)
                    b["passed"], b["tier"] = out.passed, out.taken.tier if out.taken else None
                    if "cost" in b:
                        b["cost"] = {"low": fmt_usd(out.cost_low), "high": fmt_usd(out.cost_high)}
                    if "elapsed_ms" in b:
                        b["elapsed_ms"] = out.elapsed_ms
            return objs
        self.edit_journal(edit)

    def reclose_ledgers(self) -> None:
        """``carried`` (what the earlier ledgers spent) and ``ledger.close`` totals, replayed."""
        spent: dict[str, tuple[Decimal, int]] = {}
        for name in sorted(self.ledger_names(), key=lambda n: self.ledger(n)[0]["at"]):
            lid = name[len("ledgers/"):-len(".jsonl")]

            def edit(objs):
                st = LedgerState(ledger=lid)
                for o in objs:
                    if o["kind"] == "ledger.open":
                        named = (o["body"].get("carried") or {}).get("ledgers") or []
                        if all(n in spent for n in named):
                            o["body"]["carried"]["usd"] = fmt_usd(sum((spent[n][0] for n in named), Decimal(0)))
                            o["body"]["carried"]["tokens"] = sum(spent[n][1] for n in named)
                    if o["kind"] == "ledger.close":
                        o["body"] = {"status": o["body"].get("status"), **totals(st)}
                    apply_record(st, Record(0, "", o["at"], o["kind"], o["body"]), name)
                spent[lid] = (st.spent_usd - st.carried_usd, st.spent_tokens - st.carried_tokens)
                return objs
            self.edit_chain(name, edit)

    def finish(self, tmp, *, costs: bool | None = None) -> bytes:
        """Re-derive everything (costs when prices or usage were edited), then summary and manifest."""
        if costs or (costs is None and self.costs_dirty):
            self.redo_costs()
        self.sync_journal()
        self.reclose_ledgers()
        return self.pack(tmp)


def of(bundle: bytes) -> Forgery:
    from tests.test_bundle_support import entries

    return Forgery(entries(bundle))


__all__ = ["Forgery", "of", "JOURNAL", "MANIFEST", "object_path"]
