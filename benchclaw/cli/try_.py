"""``benchclaw try``: one agent run of one task on one tier, outside any experiment."""

from __future__ import annotations

import sys
import unicodedata
from pathlib import Path

import click

from ..errors import CheckFailed
from ._common import echo, echo_err, emit_json, one_line, runs_option


@click.command("try")
@click.argument("task_id")
@click.option("--tier", required=True, help="Tier name in the catalog (e.g. lightning, super, ultra).")
@click.option("--profile", default="direct", show_default=True,
              help="Agent profile: a shipped name (direct, checker) or a profile file.")
@click.option("--provider", type=click.Choice(["sim", "openai"]), default=None,
              help="Refuse to run unless the tier uses this provider.")
@click.option("--catalog", default="sim", show_default=True, help="Tier catalog: a shipped name or a file.")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed sent with every call.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=8192, show_default=True,
              help="max_tokens of every call.")
@click.option("--tasks", "tasks_root", type=click.Path(path_type=Path), default=None,
              help="Folder of task fixtures (default: the built-in tasks).")
@runs_option
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def try_cmd(task_id, tier, profile, provider, catalog, seed, max_tokens, tasks_root, runs_dir, as_json) -> None:
    """Run one agent run of TASK_ID on one tier and say where its evidence is.

    Exits 0 when the run passed every check, 1 otherwise (the run is kept either way).
    On a terminal, a tier with stream = true shows each reply (stderr) as it arrives.

    Example: benchclaw try quotes-incident --tier ultra --profile checker
    """
    from ..agent.single import try_task
    from ..formats.money import fmt_usd

    live = _show_stream if not as_json and sys.stderr.isatty() else None
    res = try_task(task_id, tier=tier, runs_dir=runs_dir, profile=profile, catalog=catalog, provider=provider,
                   seed=seed, max_tokens=max_tokens, tasks_root=tasks_root, on_text=live)
    if live is not None:
        sys.stderr.write("\n")
    if as_json:
        emit_json({"run_id": res.run_id, "status": res.status, "passed": res.passed, "gate_passed": res.gate_passed,
                   "reason": res.reason, "turns": res.turns, "calls": res.calls, "denials": res.denials,
                   "injection_attempts": res.injection_attempts, "cost_low": fmt_usd(res.cost_low),
                   "cost_high": fmt_usd(res.cost_high), "simulated": res.simulated, "elapsed_ms": res.elapsed_ms, "path": res.path})
    else:
        low, high = fmt_usd(res.cost_low), fmt_usd(res.cost_high)
        cost = low if low == high else f"{low}..{high}"
        label = "  [SIMULATED: evidence about the simulator, not a model]" if res.simulated else ""
        echo(f"status: {res.status} ({one_line(res.reason)}){label}")
        echo(f"turns: {res.turns}  calls: {res.calls}  denials: {res.denials}  "
                   f"injection attempts: {res.injection_attempts}  cost: {cost} USD  time: {res.elapsed_ms} ms")
        echo(f"run: {res.run_id}")
        echo(f"evidence: {res.path}")
        echo_err(f"see it: benchclaw runs show {res.run_id[:12]} --runs {runs_dir}")
    if res.status != "passed":
        raise CheckFailed(f"the run did not pass: {res.status} ({one_line(res.reason)}); its evidence is kept")


def _show_stream(text: str, first: bool) -> None:
    """Write a streamed reply to the terminal as it arrives, one line per call."""
    sys.stderr.write(("\n> " if first else "") + printable(text))
    sys.stderr.flush()


def printable(text: str) -> str:
    """``text`` safe for a terminal: control and format characters (escape sequences, a
    carriage return that would overwrite the line, bidi overrides) are shown as ``\\xNN`` /
    ``\\uNNNN``, never interpreted; newlines and tabs are kept."""
    out = []
    for ch in text:
        if ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cf", "Cs"):
            out.append(ch)
        else:
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
    return "".join(out)
