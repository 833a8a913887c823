"""Small helpers shared by CLI modules: option decorators and output."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["runs_option", "emit_json", "echo_err"]


def runs_option(f):
    """``--runs DIR``: the evidence directory (default ``./runs``)."""
    return click.option(
        "--runs", "runs_dir", type=click.Path(path_type=Path), default=Path("runs"),
        show_default=True, help="The runs directory.",
    )(f)


def emit_json(obj) -> None:
    """Print stable, sorted, indented JSON to stdout (machine output)."""
    import json

    click.echo(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False))


def echo_err(msg: str) -> None:
    """Status for people goes to stderr; data goes to stdout."""
    click.echo(msg, err=True)
