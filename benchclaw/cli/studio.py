"""``benchclaw studio``: the live public mode (docs/studio.md)."""

from __future__ import annotations

from pathlib import Path

import click

from ._common import runs_option


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Studio config (TOML): allowed tasks, policies, profiles, budgets, limits. "
                   "Default: the simulator with small budgets.")
@click.option("--catalog", default=None, help="Tier catalog: a shipped name or a file (overrides the config; "
                                              "default sim).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (keep loopback behind a "
                                                                     "reverse proxy).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="Port to bind (0 picks a free one).")
@runs_option
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]),
              default="info", show_default=True, help="uvicorn's log level (info logs each request line).")
def studio(config_path: Path | None, catalog: str | None, host: str, port: int, runs_dir: Path,
           log_level: str) -> None:
    """Serve BenchClaw Studio: visitors pick an allowed task, policy and profile, watch the
    run turn by turn, and replay the sealed run; budgets per session and per day are
    durable ledgers that cannot be overspent.

    Without a key or a config it serves the simulator, labelled simulated on every page.
    Runs are sealed into --runs under the exploratory journal studio-<label>; see totals
    with `benchclaw ledger show --runs DIR`.

    Example: benchclaw studio --config studio.toml --catalog my-nebius.toml --runs studio-runs/
    """
    from ..studio import load_config, serve_studio

    cfg = load_config(config_path).with_catalog(catalog)
    serve_studio(cfg, runs_dir, host=host, port=port, log_level=log_level)
