"""``benchclaw demo``: the whole pipeline on the built-in simulator (no key, no network)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ._common import echo, echo_err


@click.command()
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="Where to write runs/, site/, bundle.zip and experiments/.")
@click.option("--concurrency", type=click.IntRange(min=1), default=None,
              help="Runs in flight at once (default: the demo spec's).")
def demo(workdir: Path, concurrency: int | None) -> None:
    """Run the whole pipeline on the built-in simulator, with no key and no network.

    Registers two demo experiments (the same ladder at 2,048 and at 4,096 output
    tokens), runs every tier on every cell plus a live ladder in each, prints the policy
    table and the comparison across the two, builds the replay site, exports the
    evidence bundle and verifies it. Every number it shows is SIMULATED: it demonstrates the tool, not any
    real model. Run it again in the same directory to resume an interrupted demo.

    Example: benchclaw demo --workdir /tmp/benchclaw-demo
    """
    from ..demo import run_demo

    run_demo(workdir, say=echo, note=echo_err, stream=sys.stderr, concurrency=concurrency)
