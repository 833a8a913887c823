"""``benchclaw compare``: chosen policies, spec differences and claims across experiments."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import UsageError
from ._common import echo_err, runs_option


@click.command()
@click.argument("experiments", nargs=-1, required=True)
@runs_option
@click.option("--policy", "policies", multiple=True, metavar="POLICY",
              help="A policy to compare (repeatable; the last always:<tier> is the baseline) "
                   "[default: the live policies and those the hypotheses name, then always:<dearest tier>].")
@click.option("--json", "json_path", is_flag=False, flag_value="-", default=None, metavar="[PATH]",
              help="Write the comparison as JSON (docs/FORMAT.md, \"Comparison\"; default PATH: - for stdout).")
@click.option("--markdown", "md_path", is_flag=False, flag_value="-", default=None, metavar="[PATH]",
              help="Write Markdown tables (default PATH: - for stdout).")
def compare(experiments: tuple[str, ...], runs_dir: Path, policies: tuple[str, ...],
            json_path: str | None, md_path: str | None) -> None:
    """Compare experiments: chosen policies side by side, what differs, how each claim moved.

    For each experiment, in the order given: the chosen policies' pass rate (95% Wilson
    interval), cost per task (with bounds, and its change against the baseline, worst
    case at each end) and mean time, from the same summaries `benchclaw report` prints;
    the spec differences that matter (output tokens, tiers, tasks, dates); each
    hypothesis, matched across experiments by its text, with its decisions and whether it
    held, flipped or became inconclusive; and every recorded correction.

    Example: benchclaw compare E01 E02 E04 --runs runs/ --markdown comparison.md
    """
    from ..formats import jsonio
    from ..analysis import render_compare_markdown, render_compare_terminal
    from ..analysis.report import build_comparison
    from ..evidence.store import Store

    if len(set(experiments)) < 2:
        raise UsageError("compare needs at least two different experiments (e.g. benchclaw compare E01 E02)")
    twice = next((e for i, e in enumerate(experiments) if e in experiments[:i]), None)
    if twice is not None:
        raise UsageError(f"experiment {twice} is named twice")
    comparison = build_comparison(Store.existing(runs_dir), list(experiments), list(policies) or None)
    outputs = [(json_path, (jsonio.dumps(comparison) + b"\n").decode("utf-8")),
               (md_path, render_compare_markdown(comparison))]
    if "-" not in (json_path, md_path):
        click.echo(render_compare_terminal(comparison), nl=False)
    for path, text in outputs:
        if path == "-":
            click.echo(text, nl=False)
        elif path:
            _write(Path(path), text)
            echo_err(f"wrote {path}")


def _write(path: Path, text: str) -> None:
    from ..errors import InputError

    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise InputError(f"{path}: cannot write ({e.strerror})") from None
