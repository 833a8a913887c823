"""``benchclaw build`` and ``benchclaw serve``: click glue over ``benchclaw.site``."""

from __future__ import annotations

from pathlib import Path

import click

from ._common import echo, echo_err, runs_option

__all__ = ["build", "serve"]


@click.command()
@runs_option
@click.option("--tasks", "tasks_dir", type=click.Path(path_type=Path), default=None,
              help="Task folders to show besides those the runs used [default: ./tasks if it exists].")
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), default=Path("site"),
              show_default=True, help="Output folder of the site.")
@click.option("--public", is_flag=True, help="Read-only public build: leave out private data "
              "(the full prompts as sent). See docs/site.md.")
@click.option("--bundle", "bundle_path", type=click.Path(path_type=Path), default=None,
              help="An exported bundle to publish on the verify page (file name, SHA-256, command).")
@click.option("--workers", type=click.IntRange(1, 64), default=None,
              help="Processes that render run pages [default: up to 2].")
def build(runs_dir: Path, tasks_dir: Path | None, out_dir: Path, public: bool, bundle_path: Path | None,
          workers: int | None) -> None:
    """Build the static replay site from runs, tasks and the analysis.

    Only pages whose inputs changed are rewritten, so a rebuild after a new run is quick.
    Open site/index.html straight from disk, or preview it with `benchclaw serve`.

    Example: benchclaw build --runs runs/ -o site/ --bundle bundle.zip
    """
    from ..site import build_site

    if tasks_dir is None and Path("tasks").is_dir():
        tasks_dir = Path("tasks")
    report = build_site(runs_dir, out_dir, tasks_dir=tasks_dir, public=public, bundle_path=bundle_path,
                        workers=workers)
    echo_err(f"built {out_dir}: {report.pages_written} pages written, {report.pages_skipped} unchanged, "
             f"{report.runs} runs ({report.seconds:.2f} s)")
    for warning in report.warnings:
        echo_err(f"warning: {warning}")
    echo(str(out_dir / "index.html"))


@click.command()
@click.argument("site_dir", type=click.Path(path_type=Path), default=Path("site"), required=False)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="Port on 127.0.0.1 (0 picks a free one).")
def serve(site_dir: Path, port: int) -> None:
    """Preview a built site on 127.0.0.1 (read-only; Ctrl-C stops it).

    Example: benchclaw serve site/ --port 8000
    """
    from ..errors import InputError
    from ..site import make_server

    try:
        server = make_server(site_dir, port)
    except OSError as e:
        raise InputError(f"port {port}: {e.strerror or e}") from None
    host, bound = server.server_address[:2]
    echo_err(f"serving {site_dir} at http://{host}:{bound}/ (Ctrl-C to stop)")
    try:
        server.serve_forever()
    finally:
        server.server_close()
