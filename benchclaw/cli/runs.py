"""``benchclaw runs``: list, show, check and recover the evidence in a runs directory."""

from __future__ import annotations

from pathlib import Path

import click

from ..evidence.check import check_store, recover_store
from ..errors import IntegrityError
from ..evidence.views import run_rows, timeline
from ..evidence.store import Store
from ._common import echo, emit_json, one_line, runs_option


@click.group()
def runs() -> None:
    """List, show and check the evidence in a runs directory.

    Example: benchclaw runs check --runs runs/
    """


@runs.command("ls")
@runs_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def ls(runs_dir, as_json: bool) -> None:
    """List sealed runs: id, task, tier, profile, seed, status, cost.

    Example: benchclaw runs ls --runs runs/
    """
    rows = run_rows(Store.existing(runs_dir))
    if as_json:
        emit_json(rows)
        return
    if not rows:
        echo(f"no sealed runs in {runs_dir}", err=True)
        return
    fmt = "{:<12} {:<28} {:<10} {:<8} {:>4} {:<14} {:>12}"
    echo(fmt.format("run", "task", "tier", "profile", "seed", "status", "cost_usd"))
    for r in rows:
        echo(fmt.format(*(one_line(v) for v in (r["run_id"][:12], r["task"][:28], r["tier"][:10],
                                                  r["profile"][:8], r["seed"], r["status"][:14], r["cost"]))))


@runs.command("show")
@click.argument("run_id")
@runs_option
def show(run_id: str, runs_dir) -> None:
    """Show one run as a readable timeline (a unique prefix of the id is enough).

    Example: benchclaw runs show 3f9a1c
    """
    store = Store.existing(runs_dir)
    for line in timeline(store, run_id):
        echo(line)


@runs.command("check")
@runs_option
def check(runs_dir) -> None:
    """Verify every hash chain, run id and blob; exit 1 naming the first damage.

    Example: benchclaw runs check --runs runs/
    """
    report = check_store(Store.existing(runs_dir))
    summary = (f"{report.runs} runs, {report.blobs} blobs, {report.journals} journals, "
               f"{report.ledgers} ledgers checked")
    if report.open_runs:
        summary += f"; {report.open_runs} open run(s) (run `benchclaw runs recover`)"
    if report.unknown_kinds:
        kinds = ", ".join(f"{k} x{n}" for k, n in sorted(report.unknown_kinds.items()))
        summary += f"; unknown record kinds kept: {kinds}"
    if report.ok:
        echo(f"ok: {summary}")
        return
    echo(summary, err=True)
    for damage in report.damages[1:10]:
        echo(f"  also damaged: {damage}", err=True)
    raise IntegrityError(f"damaged: {report.damages[0]} ({len(report.damages)} damaged in all)")


@runs.command("recover")
@runs_option
def recover(runs_dir) -> None:
    """Seal runs left open by a crash as `aborted`, keeping every complete record.

    A torn last line is moved to quarantine/ and reported, never dropped. A run whose
    writer is alive (a `run` or `try` in flight holds its lock) is left alone.

    Example: benchclaw runs recover --runs runs/
    """
    results = recover_store(Store.existing(runs_dir))
    if not results:
        echo("nothing to recover")
    for r in results:
        if r.live:
            echo(f"{r.open_path}: {r.note}")
            continue
        target = f"run {r.run_id}" if r.run_id else f"set aside at {r.quarantined}"
        echo(f"{r.open_path}: {r.note} ({r.kept_records} records kept) -> {target}")


@click.command()
@click.argument("other", type=click.Path(path_type=Path))
@runs_option
def merge(other: Path, runs_dir: Path) -> None:
    """Merge OTHER (another machine's runs directory, e.g. a shard's) into --runs.

    A union of files: idempotent and independent of the order shards are merged in.
    Refuses, writing nothing, when OTHER does not verify, has open runs, or conflicts
    (a file with other bytes, another registration history, a unit run on both sides).

    Example: benchclaw merge /mnt/machine2/runs --runs runs/
    """
    from ..evidence.merge import merge_store

    report = merge_store(Store(runs_dir), Store.existing(other))
    echo(f"merged {other} into {runs_dir}: {report.line()}")
