"""``benchclaw prereg``, ``deviate``, ``run`` and ``correct``: pre-register, amend, execute and
correct experiments."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import EXIT_FAILED
from ..evidence.store import Store
from ._common import echo, echo_err, one_line, runs_option


@click.command()
@click.argument("spec_path", type=click.Path(path_type=Path))
@runs_option
def prereg(spec_path: Path, runs_dir: Path) -> None:
    """Pre-register an experiment spec: record its SHA-256, the catalog and every task
    version its grid resolves to, and the time, in the journal.

    Prints the registration digest (it covers the spec, the catalog with its prices and
    every task version): publish or commit it; an auditor checks a bundle against it with
    `benchclaw-verify bundle.zip --registered DIGEST`. Any later change to the spec blocks
    `benchclaw run` until it is recorded with `benchclaw deviate`.

    Example: benchclaw prereg experiments/E01.toml
    """
    from ..experiments import prereg as do_prereg

    reg = do_prereg(Store(runs_dir), spec_path)
    state = "registered" if reg.fresh else "already registered (unchanged)"
    echo_err(f"{reg.experiment} {state} at {reg.registered_at} in {runs_dir}/journals/{reg.experiment}/")
    echo_err(f"spec {reg.history[0][2]}; registration digest (publish it):")
    echo(reg.digest)


@click.command()
@click.argument("experiment")
@click.option("--reason", required=True, help="Why the spec or procedure changed.")
@click.option("--spec", "spec_path", type=click.Path(path_type=Path), default=None,
              help="The spec file (default: the path recorded at registration).")
@runs_option
def deviate(experiment: str, reason: str, spec_path: Path | None, runs_dir: Path) -> None:
    """Record a deviation (the spec's new digest and the reason) before the runs it affects.

    Example: benchclaw deviate E01 --reason "raise max_tokens: lightning ran out of tokens"
    """
    from ..experiments import deviate as do_deviate

    reg = do_deviate(Store.existing(runs_dir), experiment, reason, spec_path=spec_path)
    _, at, digest = reg.history[-1]
    echo_err(f"deviation recorded for {experiment} at {at}")
    echo(digest)


@click.command()
@click.argument("experiment")
@click.option("--spec", "spec_path", type=click.Path(path_type=Path), default=None,
              help="The spec file (default: the path recorded at registration).")
@runs_option
@click.option("--concurrency", type=click.IntRange(min=1), default=None,
              help="Runs in flight at once (default: the spec's settings.concurrency).")
@click.option("--rerun", is_flag=True,
              help="Re-run cells whose primary run was aborted or hit an error, as runs "
                   "labelled rerun (secondary analyses only; the primary runs stand).")
@click.option("--shard", "shard_text", default=None, metavar="I/N",
              help="Run only shard I of N (a deterministic slice of the cells, with its share of "
                   "the budget); join the shards' runs directories with `benchclaw merge`.")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Where runs execute: this process (local) or a Ray cluster (needs benchclaw[ray]).")
@click.option("--address", default=None, metavar="ADDRESS",
              help="With --executor ray: the cluster to join (host:port from `ray start --head`, or "
                   "auto); default: start a local Ray instance.")
def run(experiment: str, spec_path: Path | None, runs_dir: Path, concurrency: int | None,
        rerun: bool, shard_text: str | None, executor: str, address: str | None) -> None:
    """Run (or resume) a registered experiment's grid.

    Refuses (exit 2) when the spec is unregistered or changed since registration. Run
    it again after an interruption to resume: finished cells are skipped; a run that
    already called the model is kept as it stands, never silently redone. Progress goes
    to stderr; Ctrl-C seals open runs as aborted and leaves the ledger consistent.

    Example: benchclaw run E01 --concurrency 8   (or, on machine 2 of 3: --shard 2/3)
    """
    from ..experiments.grid import Shard
    from ..errors import UsageError
    from ..experiments.runner import GridInterrupted, run_experiment_sync

    shard = Shard.parse(shard_text) if shard_text is not None else None
    if address is not None and executor != "ray":
        raise UsageError("--address is for --executor ray")
    runner = None
    if executor == "ray":
        from ..experiments.ray_executor import RayExecutor, require_ray

        require_ray()
        runner = RayExecutor(address)
    store = Store(runs_dir)
    try:
        result = run_experiment_sync(store, experiment, spec_path=spec_path, concurrency=concurrency,
                                     rerun=rerun, stream=sys.stderr, shard=shard, executor=runner)
    except GridInterrupted as e:
        echo_err(f"interrupted: {e}; run `benchclaw run {experiment}` again to resume")
        raise SystemExit(130)
    for line in result.summary_lines():
        echo(one_line(line))
    if result.status != "complete":
        raise SystemExit(EXIT_FAILED)


@click.command()
@click.argument("experiment")
@click.option("--claim", required=True, help="The claim as it was published (quote it).")
@click.option("--wrong", required=True, help="What was wrong with it.")
@click.option("--why", required=True, help="Why it was wrong (the cause), and how it was found.")
@click.option("--corrected", required=True, help="The corrected figure or statement.")
@click.option("--hypothesis", default=None, help="The hypothesis id the claim was about, if any.")
@click.option("--run", "runs", multiple=True, metavar="RUN_ID",
              help="A run the correction is about (repeatable; an id or a unique prefix of 8+ "
                   "characters; the journal must name it).")
@runs_option
def correct(experiment: str, claim: str, wrong: str, why: str, corrected: str, hypothesis: str | None,
            runs: tuple[str, ...], runs_dir: Path) -> None:
    """Record in the journal that an earlier published claim was wrong, why, and the fix.

    The record is hash-chained with the rest of the journal, shown on the experiment
    and comparison pages, carried in bundles and checked by benchclaw-verify. Nothing
    written before is changed: the log says what replaced the wrong claim.

    Example: benchclaw correct E02 --claim "ladder passes 89% at 33% lower cost"
    --wrong "the cost left out a cell of unknown cost" --why "an independent review
    found it" --corrected "83% vs 78%, 1.5% to 5.5% cheaper"
    """
    from ..experiments import correct as do_correct

    body = do_correct(Store.existing(runs_dir), experiment, claim=claim, wrong=wrong, why=why,
                      corrected=corrected, hypothesis=hypothesis, runs=list(runs))
    echo_err(f"correction recorded for {experiment} in {runs_dir}/journals/{experiment}/")
    click.echo(body["corrected"])
