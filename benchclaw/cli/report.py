"""``benchclaw report``: policy tables and pre-registered decisions of an experiment."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import FormatError
from ..formats.names import json_terminal_safe
from ._common import echo, echo_err, runs_option


@click.command()
@click.argument("experiment")
@runs_option
@click.option("--json", "json_path", is_flag=False, flag_value="summary.json", default=None,
              metavar="[PATH]", help="Write summary.json (default PATH: summary.json; - for stdout).")
@click.option("--markdown", "md_path", is_flag=False, flag_value="report.md", default=None,
              metavar="[PATH]", help="Write Markdown tables (default PATH: report.md; - for stdout).")
def report(experiment: str, runs_dir: Path, json_path: str | None, md_path: str | None) -> None:
    """Print an experiment's policy tables and decide its pre-registered hypotheses.

    Every policy is shown live (where it ran live) and replayed over the grid, with
    pass rate (95% Wilson interval), pass^k, cost per task and per pass (with bounds
    wherever usage is unknown), time, tokens, finish outcomes and injections. Exits 2
    when a hypothesis's rule cannot be evaluated.

    Example: benchclaw report E01 --runs runs/ --json summary.json --markdown
    """
    from ..analysis import render_terminal
    from ..analysis.report import build_summary, summary_bytes, write_markdown, write_summary
    from ..evidence.store import Store

    summary = build_summary(Store.existing(runs_dir), experiment)
    to_stdout = "-" in (json_path, md_path)
    if not to_stdout:
        echo(render_terminal(summary), nl=False)
    if json_path == "-":
        click.echo(json_terminal_safe(summary_bytes(summary).decode("utf-8")), nl=False)
    elif json_path:
        write_summary(summary, Path(json_path))
        echo_err(f"wrote {json_path}")
    if md_path == "-":
        from ..analysis import render_markdown
        echo(render_markdown(summary), nl=False)
    elif md_path:
        write_markdown(summary, Path(md_path))
        echo_err(f"wrote {md_path}")
    _fail_on_rule_errors(summary)


def _fail_on_rule_errors(summary: dict) -> None:
    errors = [d["error"] for d in (summary["primary"] or {}).get("decisions", []) if d["error"]]
    if errors:
        raise FormatError("; ".join(errors))
