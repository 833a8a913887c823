"""Small helpers shared by CLI modules: option decorators and output."""

from __future__ import annotations

from pathlib import Path

import click

from ..formats.names import json_terminal_safe, terminal_safe

__all__ = ["runs_option", "emit_json", "echo", "echo_err", "one_line"]


def runs_option(f):
    """``--runs DIR``: the evidence directory (default ``./runs``)."""
    return click.option(
        "--runs", "runs_dir", type=click.Path(path_type=Path), default=Path("runs"),
        show_default=True, help="The runs directory.",
    )(f)


def emit_json(obj) -> None:
    """Print stable, sorted, indented JSON to stdout (machine output)."""
    import json

    click.echo(json_terminal_safe(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False)))


def echo(text: str = "", *, err: bool = False, nl: bool = True) -> None:
    """Every line a person reads goes through here: whatever models, providers, tasks or
    bundles put in it, control characters are escaped (``names.terminal_safe``)."""
    click.echo(terminal_safe(str(text)), err=err, nl=nl)


def echo_err(msg: str) -> None:
    """Status for people goes to stderr; data goes to stdout."""
    echo(msg, err=True)


def one_line(value) -> str:
    """A field shown inside one line: newlines escaped too, so it cannot fake a line."""
    return terminal_safe(str(value), keep_newlines=False)
