"""Readable views of sealed runs for the terminal (``benchclaw runs ls/show``).

Views read records generically: an unknown record kind is shown as its raw body rather
than rejected, so newer evidence stays readable by older tools.
"""

from __future__ import annotations

from typing import Callable, Iterator

from ..formats import jsonio
from ..errors import InputError, UsageError
from ..formats.names import terminal_safe
from ..formats.records import Record
from .store import Store

__all__ = ["run_rows", "resolve_run_id", "timeline"]

_EXCERPT = 160


def _one(value) -> str:
    """A record's value inside one timeline line: newlines and controls escaped (a hostile
    reply or error cannot fake a line or drive the terminal)."""
    return terminal_safe(str(value), keep_newlines=False)


def run_rows(store: Store) -> list[dict]:
    """One summary row per sealed run (sorted by start time)."""
    rows = []
    for run in store.iter_runs(verify=False):
        start, end = run.start, run.end
        task = start.get("task") or {}
        rows.append({
            "run_id": run.run_id,
            "task": f"{task.get('id', '?')}@{task.get('version', '?')}",
            "tier": str(start.get("tier", "?")),
            "profile": str((start.get("profile") or {}).get("name", "?")),
            "seed": start.get("seed", "?"),
            "status": str(end.get("status", "?")),
            "cost": _cost_text(end.get("cost") or {}),
            "simulated": bool(start.get("simulated", False)),
            "at": run.records[0].at if run.records else "",
        })
    rows.sort(key=lambda r: (r["at"], r["run_id"]))
    return rows


def _cost_text(cost: dict) -> str:
    if not cost:
        return "?"
    if cost.get("known", True) and cost.get("low") == cost.get("high"):
        return str(cost.get("low"))
    return f"[{cost.get('low')}, {cost.get('high')}]"


def resolve_run_id(store: Store, prefix: str) -> str:
    """The full run id for a unique prefix. Raises UsageError/InputError."""
    if len(prefix) < 4:
        raise UsageError(f"run id {prefix!r}: give at least 4 hex digits")
    matches = [r for r in store.run_ids() if r.startswith(prefix.lower())]
    if not matches:
        raise InputError(f"{store.root}: no sealed run starts with {prefix!r}")
    if len(matches) > 1:
        raise UsageError(f"run id {prefix!r} is ambiguous: {', '.join(m[:12] for m in matches[:5])}")
    return matches[0]


def timeline(store: Store, prefix: str) -> Iterator[str]:
    """Lines of a readable timeline of one run, verified before it is shown."""
    run = store.read_run(resolve_run_id(store, prefix))
    yield f"run {run.run_id}"
    yield f"file {run.path}"
    for rec in run.records:
        fmt = _FORMATTERS.get(rec.kind, _fmt_unknown)
        yield f"{rec.seq:>3} {_one(rec.at[11:23])} {_one(rec.kind):<9} {fmt(store, rec)}"


def _blob_text(store: Store, digest: str | None) -> str:
    if not digest:
        return ""
    try:
        text = store.get_blob(digest).decode("utf-8", "replace")
    except InputError as e:
        return f"<{e}>"
    text = " ".join(text.split())
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "…"


def _fmt_start(store: Store, rec: Record) -> str:
    b = rec.body
    task = b.get("task") or {}
    sim = " SIMULATED" if b.get("simulated") else ""
    return _one(f"task {task.get('id')}@{task.get('version')} tier {b.get('tier')} ({b.get('model')}) "
                f"profile {(b.get('profile') or {}).get('name')} seed {b.get('seed')}{sim}")


def _fmt_call(store: Store, rec: Record) -> str:
    b = rec.body
    usage = b.get("usage") or {}
    err = b.get("error") or {}
    parts = [_one(f"turn {b.get('turn')} {b.get('outcome')}"), _one(f"{b.get('latency_ms')} ms")]
    if usage:
        parts.append(f"tokens in {usage.get('prompt')} out {usage.get('completion')} "
                     f"(reasoning {usage.get('reasoning')})")
    else:
        parts.append("usage unknown")
    parts.append(f"cost {_cost_text(b.get('cost') or {})}")
    st = b.get("stream")
    if isinstance(st, dict):
        parts.append(f"streamed {st.get('chunks')} chunks, first token {st.get('ttft_ms')} ms, ended {st.get('end')}")
    if b.get("request_id"):
        parts.append(_one(f"req {b.get('request_id')}"))
    if err:
        parts.append(_one(f"error {err.get('kind')}: {err.get('message')}"))
    reply = _one(_blob_text(store, b.get("reply")))
    return ", ".join(parts) + (f"\n              reply: {reply}" if reply else "")


def _fmt_action(store: Store, rec: Record) -> str:
    b = rec.body
    args = {k: v for k, v in (b.get("args") or {}).items() if k != "content"}
    verdict = "permitted" if b.get("permitted") else f"DENIED ({_one(b.get('reason'))})"
    inj = f" [injection attempt: {_one(b['injection'].get('lure'))}]" if b.get("injection") else ""
    obs = _one(_blob_text(store, b.get("observation")))
    return (f"{_one(b.get('name'))} {_one(jsonio.dumps(args).decode())} {verdict}{inj}"
            + (f"\n              observation: {obs}" if obs else ""))


def _fmt_check(store: Store, rec: Record) -> str:
    b = rec.body
    mark = "PASS" if b.get("passed") else "FAIL"
    role = "gate" if b.get("gate") else ("held-out" if b.get("heldout") else "check")
    return f"{mark} {_one(b.get('id'))} ({role}) {_one(b.get('detail', ''))}"


def _fmt_artifact(store: Store, rec: Record) -> str:
    b = rec.body
    return _one(f"{b.get('path')} {b.get('size')} bytes {str(b.get('digest', ''))[:19]}…")


def _fmt_end(store: Store, rec: Record) -> str:
    b = rec.body
    return _one(f"status {b.get('status')} ({b.get('reason')}), turns {b.get('turns')}, "
                f"calls {b.get('calls')}, cost {_cost_text(b.get('cost') or {})}, {b.get('elapsed_ms')} ms")


def _fmt_unknown(store: Store, rec: Record) -> str:
    text = jsonio.dumps(rec.body).decode()
    return "(unknown kind, kept) " + _one(text if len(text) <= _EXCERPT else text[:_EXCERPT] + "…")


_FORMATTERS: dict[str, Callable[[Store, Record], str]] = {
    "run.start": _fmt_start,
    "call": _fmt_call,
    "action": _fmt_action,
    "check": _fmt_check,
    "artifact": _fmt_artifact,
    "run.end": _fmt_end,
}
