"""BenchClaw Studio: a live public mode where visitors run real tasks, watch every turn,
and can never overspend (docs/studio.md).

``serve_studio`` is the whole program: load the config's allow-lists (``config``), take the
runs directory and recover what a killed studio left (``service.Studio.open``), serve the
Starlette app (``app``) with uvicorn until a signal, then cancel running jobs (their runs
are sealed ``aborted``) and release the runs directory. Budgets are durable ledgers
(``budgets``); sessions are signed cookies (``sessions``).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Callable

from .config import Budgets, StudioConfig, default_config, load_config
from .service import Refusal, Studio

__all__ = ["serve_studio", "Studio", "StudioConfig", "Budgets", "load_config", "default_config", "Refusal"]


def serve_studio(config: StudioConfig, runs_dir: Path | str, *, host: str = "127.0.0.1", port: int = 8000,
                 log_level: str = "info", sim_options: Any = None, fsync: bool = True,
                 on_ready: Callable[[str], None] | None = None) -> None:
    """Serve the studio until SIGINT/SIGTERM. ``on_ready`` gets the base URL once the socket
    listens (``port=0`` picks a free port). Raises UsageError (runs directory in use, bad
    allow-list), InputError/FormatError (config, catalog, task) before serving."""
    import uvicorn

    from .app import create_app

    _Server = _server_class()
    from .sessions import SessionKeys, load_secret

    studio = Studio(config, runs_dir, sim_options=sim_options, fsync=fsync)
    _redact_logs()
    keys = SessionKeys(load_secret(config.secret_file))
    studio.open()
    app = create_app(studio, keys)
    server = _Server(uvicorn.Config(
        app, host=host, port=port, lifespan="off", log_level=log_level, server_header=False,
        proxy_headers=True, forwarded_allow_ips="127.0.0.1", timeout_graceful_shutdown=3,
        h11_max_incomplete_event_size=16 * 1024, limit_concurrency=1000, timeout_keep_alive=5))
    asyncio.run(_serve(server, studio, on_ready or _announce))


def _server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, except that SIGINT/SIGTERM only ask it to exit: uvicorn
        re-raises a captured signal after serving, which would end the process before the
        studio seals its running jobs."""

        @contextlib.contextmanager
        def capture_signals(self):
            loop = asyncio.get_running_loop()
            sigs = (signal.SIGINT, signal.SIGTERM)
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            for s in sigs:
                loop.add_signal_handler(s, self.handle_exit, s, None)
            try:
                yield
            finally:
                for s in sigs:
                    loop.remove_signal_handler(s)

    return Server


def _redact_logs() -> None:
    """The vault's redacting filter on the studio's and uvicorn's loggers too (the provider
    installs it on the SDK's): no log line can carry a live key."""
    import logging

    from ..providers.vault import RedactingFilter

    for name in ("benchclaw.studio", "uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactingFilter) for f in logger.filters):
            logger.addFilter(RedactingFilter())


def _announce(url: str) -> None:
    print(f"studio: serving on {url}  (Ctrl-C stops it; running jobs are sealed aborted)", file=sys.stderr,
          flush=True)


async def _serve(server, studio: Studio, on_ready: Callable[[str], None]) -> None:
    task = asyncio.create_task(server.serve())
    try:
        while not server.started and not task.done():
            await asyncio.sleep(0.02)
        if server.started:
            host, port = server.servers[0].sockets[0].getsockname()[:2]
            on_ready(f"http://{host}:{port}")
        await task
    finally:
        await studio.close()
