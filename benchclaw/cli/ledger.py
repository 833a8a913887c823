"""``benchclaw ledger``: show a benchmark invocation's token/USD ledger."""

from __future__ import annotations

import click

from ..errors import InputError
from ..experiments.ledger import read_ledger
from ..evidence.store import Store
from ._common import echo, emit_json, runs_option


@click.group()
def ledger() -> None:
    """Show a benchmark's token/USD ledger (reserved, settled, unknown, remaining).

    Example: benchclaw ledger show E01-20261130T030405Z-ab12 --runs runs/
    """


@ledger.command("show")
@click.argument("ledger_id", required=False)
@runs_option
@click.option("--json", "as_json", is_flag=True, help="Print the totals as JSON.")
def show(ledger_id: str | None, runs_dir, as_json: bool) -> None:
    """Print a ledger's reserved, settled, unknown and remaining budget.

    Without LEDGER_ID, lists the ledgers in the runs directory. Reservations never
    settled (a call in flight, or one cut off by a crash) count as spent at their
    upper bound.

    Example: benchclaw ledger show E01-20261130T030405Z-ab12 --runs runs/
    """
    store = Store.existing(runs_dir)
    if not ledger_id:
        ids = sorted(p.stem for p in (store.root / "ledgers").glob("*.jsonl"))
        if not ids:
            raise InputError(f"{store.root}/ledgers: no ledgers")
        for i in ids:
            echo(i)
        return
    summary = read_ledger(store, ledger_id).summary()
    if as_json:
        emit_json(summary)
        return
    for line in _lines(summary):
        echo(line)


def _lines(s: dict) -> list[str]:
    lim = s["limits"] or {}
    rows = [
        f"ledger      {s['ledger']}  (experiment {s['experiment']}, invocation {s['invocation']})",
        f"limits      usd {lim.get('usd')}  tokens {lim.get('tokens') or '-'}  "
        f"per-call usd {lim.get('per_call_usd') or '-'}",
    ]
    if s["carried"]["usd"] != "0" or s["carried"]["tokens"]:
        rows.append(f"carried     usd {s['carried']['usd']}  tokens {s['carried']['tokens']}  "
                    "(earlier invocations of the experiment)")
    for name, note in (("reserved", "open: in flight or cut off; counted at upper bound"),
                       ("settled", "usage reported by the provider"),
                       ("unknown", "no usage reported; counted at upper bound")):
        r = s[name]
        rows.append(f"{name:<11} usd {r['usd']}  tokens {r['tokens']}  calls {r['calls']}  ({note})")
    rows.append(f"refused     {s['refused']} call(s)")
    if s.get("doubted"):
        d = s["doubted"]
        rows.append(f"doubted     {d['calls']} call(s) reported usage not taken as the bill (counted at upper "
                    f"bound); {d['over_bound']} over-reported past their reservation")
    rows.append(f"spent       usd {s['spent']['usd']}  tokens {s['spent']['tokens']}  (worst case)")
    rem = s["remaining"]
    rows.append(f"remaining   usd {rem['usd']}  tokens {rem['tokens'] if rem['tokens'] is not None else '-'}")
    rows.append("status      " + ("closed" if s["closed"] else "not closed (running, or cut off)"))
    return rows
