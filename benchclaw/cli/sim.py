"""``benchclaw sim``: the built-in simulator's commands (click glue only)."""

from __future__ import annotations

from pathlib import Path

import click

from ._common import echo, echo_err

__all__ = ["sim"]


@click.group()
def sim() -> None:
    """The built-in deterministic simulator. Everything it produces is SIMULATED.

    Example: benchclaw sim serve --port 8765 --latency-scale 0.1
    """


@sim.command()
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port on 127.0.0.1 (0: any free port).")
@click.option("--latency-scale", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Multiply simulated latency (0: answer at once).")
@click.option("--fault", "faults", multiple=True, metavar="KIND=RATE",
              help="Inject a fault: timeout, rate_limited, server, connection, malformed, missing_usage, "
                   "model_mismatch, auth_echo, or for streamed replies stream_stall or stream_cut, at a "
                   "rate in [0, 1]; or schedule=KIND,none,KIND. A streamed reply with missing_usage "
                   "ends without its usage chunk.")
@click.option("--stream-cut-after", type=click.IntRange(min=0), default=8, show_default=True,
              help="Tokens a stalled or cut stream sends first.")
@click.option("--hang", "hang_s", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Seconds a timeout or stream_stall fault stays silent.")
@click.option("--retry-after", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Seconds a 429 asks the client to wait.")
@click.option("--profiles", "profiles_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Simulator profiles file (default: the shipped one).")
def serve(port: int, latency_scale: float, faults: tuple[str, ...], stream_cut_after: int, hang_s: float,
          retry_after: float, profiles_path: Path | None) -> None:
    """Serve the simulator as an OpenAI-compatible API on 127.0.0.1.

    Point any OpenAI client (or a catalog tier with provider "openai") at the printed base
    URL; the models are sim/lightning, sim/super, sim/ultra and sim/reckless. A request
    with "stream": true is answered with server-sent events, one chunk per token, and a
    final usage chunk when stream_options.include_usage is set.

    Example: benchclaw sim serve --port 8765 --fault rate_limited=0.1 --retry-after 2

    Example: benchclaw sim serve --fault stream_cut=0.2 --stream-cut-after 5
    """
    from ..sim.backend import SimFaults
    from ..sim.server import SimServer

    from ..errors import UsageError

    try:
        server = SimServer(port, latency_scale=latency_scale,
                           faults=SimFaults.parse(faults, retry_after_s=retry_after, hang_s=hang_s,
                                                  stream_cut_after=stream_cut_after),
                           profiles=str(profiles_path) if profiles_path else None)
    except OSError as e:
        raise UsageError(f"cannot listen on 127.0.0.1:{port} ({e.strerror or e}); try another --port") from None
    models = ", ".join(server.backend.profiles.models)
    echo_err(f"simulated OpenAI-compatible API on {server.base_url} (models: {models}); Ctrl-C stops it")
    echo(server.base_url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
