"""Tables for people: the terminal and a Markdown block to paste into a README or a PR.

Both render from the summary.json object only, never from runs, so what a person reads
is exactly what the verifier recomputes. Money is shortened for reading (4 significant
digits, bounds rounded outward); the exact strings stay in summary.json.
"""

from __future__ import annotations

import decimal
import textwrap
from decimal import Decimal
from typing import Callable

__all__ = ["render_terminal", "render_markdown", "render_compare_terminal", "render_compare_markdown", "WIDTH"]

_MARK = {"supported": "SUPPORTED", "refuted": "REFUTED", "inconclusive": "INCONCLUSIVE",
         "error": "ERROR"}


def _usd(text: str | None, up: bool = False) -> str:
    if text is None:
        return "-"
    if text in ("inf", "-inf"):
        return "∞"
    d = Decimal(text)
    if d == 0:
        return "$0"
    q = Decimal(1).scaleb(d.adjusted() - 3)
    r = d.quantize(q, rounding=decimal.ROUND_CEILING if up else decimal.ROUND_FLOOR)
    return "$" + format(r.normalize(), "f")


def _money(obj: dict | None) -> str:
    if not obj:
        return "-"
    if obj["known"]:
        return _usd(obj["low"])
    return f"{_usd(obj['low'])}..{_usd(obj['high'], True)}"


def _rate(obj: dict | None) -> str:
    if not obj or obj.get("n") in (0, None):
        return "-"
    return f"{obj['passed']}/{obj['n']} {obj['value']}"


def _ci(obj: dict | None) -> str:
    w = (obj or {}).get("wilson95")
    return f"[{w[0]}, {w[1]}]" if w else "-"


def _pass_k(obj: dict) -> str:
    if not obj["groups"]:
        return "-"
    unk = f" (+{obj['unknown']}?)" if obj["unknown"] else ""
    return f"{obj['passed']}/{obj['groups']}{unk} k={obj['k']}"


def _bounds(b: list | None) -> str:
    if not b:
        return "-"
    return b[0] if b[0] == b[1] else f"{b[0]}..{b[1]}"


def _row_label(p: dict) -> str:
    return f"{p['policy']} ({p['mode']})"


def _finish(row: dict) -> str:
    f = row["finish"]
    errs = ",".join(f"{k}:{v}" for k, v in f["errors"].items())
    cut = f" cut {f['cut_off']}" if f.get("cut_off") else ""
    cut += f" model-mismatch {f['model_mismatch']}" if f.get("model_mismatch") else ""
    cut += f" content-filter {f['content_filter']}" if f.get("content_filter") else ""
    cut += f" usage-doubted {f['usage_doubted']}" if f.get("usage_doubted") else ""
    cut += f" over-reported {f['usage_over_bound']}" if f.get("usage_over_bound") else ""
    return f"stop {f['stop']} len {f['length']} ro {f['reasoning_only']} err {f['error']}{cut}" + \
        (f" [{errs}]" if errs else "")


def _statuses(row: dict) -> str:
    return " ".join(f"{k}:{v}" for k, v in row["statuses"].items()) or "-"


def _attack(row: dict) -> tuple[str, str]:
    ua = row["under_attack"]
    return (_rate(ua["injected"]), _rate(ua["clean"])) if ua else ("?", "?")


# ---------------------------------------------------------------------------- tables

def _policy_table(an: dict) -> tuple[list[str], list[list[str]]]:
    head = ["policy", "pass", "95% CI", "pass^k", "cost/task", "cost/pass", "mean s",
            "median s", "gap closed", "missing", "unknown calls"]
    rows = [[_row_label(p), _rate(p["pass_rate"]), _ci(p["pass_rate"]), _pass_k(p["pass_k"]),
             _money(p["cost"]["per_task"]), _money(p["cost"]["per_pass"]),
             p["time_s"]["mean"] or "-", p["time_s"]["median"] or "-", _bounds(p["gap_closed"]),
             str(p["missing"]), str(p["cost"]["unknown_calls"])] for p in an["policies"]]
    return head, rows


def _tier_table(an: dict) -> tuple[list[str], list[list[str]]]:
    head = ["tier", "runs", "pass", "95% CI", "pass^k", "cost/run", "cost/pass", "mean s",
            "median s", "turns", "attempt rate", "missing"]
    rows = [[t["tier"], str(t["samples"]), _rate(t["pass_rate"]), _ci(t["pass_rate"]),
             _pass_k(t["pass_k"]), _money(t["cost"]["per_task"]), _money(t["cost"]["per_pass"]),
             t["time_s"]["mean"] or "-", t["time_s"]["median"] or "-", t["turns_mean"] or "-",
             _rate(t["attempt_rate"]), str(t["missing"])] for t in an["tiers"]]
    return head, rows


def _tokens_table(an: dict) -> tuple[list[str], list[list[str]]]:
    head = ["row", "tier", "prompt", "cached", "completion", "reasoning", "calls", "no usage"]
    rows = []
    for item, label in [(p, _row_label(p)) for p in an["policies"]] + \
            [(t, f"tier {t['tier']}") for t in an["tiers"]]:
        for tier, tok in item["tokens"].items():
            rows.append([label, tier, str(tok["prompt"]), str(tok["cached_read"]),
                         str(tok["completion"]), str(tok["reasoning"]), str(tok["calls"]),
                         str(tok["unknown_usage"])])
    return head, rows


def _outcome_table(an: dict) -> tuple[list[str], list[list[str]]]:
    head = ["row", "finish outcomes (calls)", "run statuses", "injection attempts", "denials",
            "runs tried/exposed", "pass injected", "pass clean"]
    rows = []
    for item, label in [(p, _row_label(p)) for p in an["policies"]] + \
            [(t, f"tier {t['tier']}") for t in an["tiers"]]:
        inj = item["injection"]
        rows.append([label, _finish(item), _statuses(item), str(inj["attempts"]),
                     str(inj["denials"]), f"{inj['runs_attempted']}/{inj['runs_exposed']}",
                     *_attack(item)])
    return head, rows


def _family_table(an: dict) -> tuple[list[str], list[list[str]]]:
    tiers = [t["tier"] for f in an.get("families", [])[:1] for t in f["tiers"]]
    head = ["family", "cells"] + [f"{t} pass" for t in tiers] + [f"{t} cost/task" for t in tiers] + \
        ["first tier that passes (cells)"]
    rows = []
    for f in an.get("families", []):
        first = " ".join(f"{k}:{v}" for k, v in f["first_pass"].items() if v) or "-"
        rows.append([f["family"], str(f["cells"])] + [_rate(t["pass_rate"]) for t in f["tiers"]] +
                    [_money(t["cost_per_task"]) for t in f["tiers"]] + [first])
    return head, rows


def _health_table(an: dict) -> tuple[list[str], list[list[str]]]:
    """The provider as measured: failures, timeouts, speed and its drift over the
    experiment (median tokens/s in each quarter of its duration), time to first token."""
    head = ["tier", "calls", "errors", "runs with timeout", "tok/s median (p10-p90)",
            "tok/s by quarter", "max/min", "ttft s median (p10-p90)"]
    rows = []
    for t in an["tiers"]:
        h = t.get("health")
        if h is None:
            continue
        tps, ttft = h["tokens_per_s"], h["ttft_s"]
        rows.append([t["tier"], str(h["calls"]),
                     f"{h['errors']}" + (f" (+{h['cut_off']} cut off)" if h["cut_off"] else ""),
                     f"{h['timeout_runs']}/{h['runs']}", _spread(tps),
                     " ".join(w or "-" for w in tps["windows"]), f"{tps['spread']}x" if tps["spread"] else "-",
                     _spread(ttft)])
    return head, rows


def _spread(d: dict) -> str:
    return "-" if d["median"] is None else f"{d['median']} ({d['p10']}-{d['p90']})"


def _decision_table(an: dict) -> tuple[list[str], list[list[str]]]:
    head = ["hypothesis", "decision", "rule", "values (low..high)"]
    rows = []
    for d in an["decisions"]:
        vals = "; ".join(f"{t['expr']} = {t['low']}" + ("" if t["low"] == t["high"] else f"..{t['high']}")
                         for t in d["terms"])
        rows.append([d["id"], _MARK.get(d["decision"], d["decision"]), d["rule"] or "-",
                     d["error"] or vals or "-"])
    return head, rows


# ---------------------------------------------------------------------------- layout

WIDTH = 100  # a terminal table never needs more columns than this (see _text_table)


def _lines(text: str, cap: int) -> list[str]:
    if len(text) <= cap:
        return [text]
    return textwrap.wrap(text, cap, break_on_hyphens=False) or [""]


def _plain(head: list[str], rows: list[list[str]], caps: list[int]) -> list[str]:
    """A table whose cells wider than their column's cap wrap onto extra lines."""
    cells = [[_lines(str(c), cap) for c, cap in zip(r, caps)] for r in [head] + rows]
    widths = [max(len(line) for r in cells for line in r[i]) for i in range(len(head))]
    fmt = lambda parts: "  ".join(p.ljust(w) for p, w in zip(parts, widths)).rstrip()  # noqa: E731
    out = []
    for n, r in enumerate(cells):
        for k in range(max(len(c) for c in r)):
            out.append(fmt([c[k] if k < len(c) else "" for c in r]))
        if n == 0:
            out.append(fmt(["-" * w for w in widths]))
    return out


def _text_table(head: list[str], rows: list[list[str]], width: int = WIDTH) -> list[str]:
    """Columns side by side when they fit in ``width``; otherwise the narrow layout: the
    columns split into blocks that fit, each block repeating the first (label) column, and a
    cell still too wide wraps. No column is dropped (--json and --markdown keep one line per
    row)."""
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows)]
    if sum(widths) + 2 * (len(widths) - 1) <= width:
        return _plain(head, rows, widths)
    label = min(widths[0], width // 3)
    room = width - label - 2
    blocks, cur, used = [], [], 0
    for i, w in enumerate(widths[1:], 1):
        w = min(w, room)
        if cur and used + 2 + w > room:
            blocks.append(cur)
            cur, used = [i], w
        else:
            cur, used = cur + [i], (used + 2 + w if cur else w)
    blocks.append(cur)
    out: list[str] = []
    for block in blocks:
        cols = [0] + block
        caps = [label] + [min(widths[c], room) for c in block]
        out += ([""] if out else []) + _plain([head[c] for c in cols], [[r[c] for c in cols] for r in rows], caps)
    return out


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    esc = lambda c: str(c).replace("|", "\\|")  # noqa: E731
    return ["| " + " | ".join(esc(h) for h in head) + " |",
            "|" + "|".join(" --- " for _ in head) + "|"] + \
        ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]


_SECTIONS: list[tuple[str, Callable]] = [
    ("Policies", _policy_table), ("Tiers", _tier_table), ("Families", _family_table),
    ("Tokens", _tokens_table),
    ("Outcomes and injections", _outcome_table), ("Provider health", _health_table),
    ("Decisions", _decision_table),
]


def _header(s: dict) -> list[str]:
    lines = [f"Experiment {s['experiment']}" + (f": {s['title']}" if s.get("title") else "")]
    if s["simulated"]:
        lines.append("SIMULATED: produced by the built-in simulator; not evidence about any real model.")
    lines.append(f"spec {s['spec_digest'] or '(unregistered)'}; tiers {', '.join(s['tiers']) or '-'}; "
                 f"live policies {', '.join(s['live_policies']) or 'none'}")
    if not s["lures_known"]:
        lines.append("task lures unknown: injection splits are not computed")
    return lines


def _analysis_lines(an: dict, heading: Callable[[str], str], table: Callable) -> list[str]:
    excl = ", ".join(f"{k}: {len(v)}" for k, v in an["runs"]["excluded"].items()) or "none"
    out = [heading(f"{an['label'].capitalize()} analysis ({an['description']})"),
           f"{an['cells']} cells, {an['runs']['used']} runs used; excluded: {excl}", ""]
    for title, make in _SECTIONS:
        head, rows = make(an)
        out += [heading(title)] + (table(head, rows) if rows else ["(none)"]) + [""]
    return out


def _trailer(s: dict, bullet: str) -> list[str]:
    out = []
    for d in s["deviations"]:
        out.append(f"{bullet}deviation {d['at']}: {d['reason']} -> {d['spec_digest']} "
                   f"({len(d['runs'])} runs affected: {', '.join(r[:12] for r in d['runs']) or 'none'})")
    for st in s["stops"]:
        out.append(f"{bullet}stopped by rule {st['rule']} at {st['at']}: {st['detail']} "
                   f"({st['cells_left']} cells left)")
    for p in s["registration_problems"]:
        out.append(f"{bullet}run {p['run'][:12]}: {p['problem']}")
    for u in s["unreadable_runs"]:
        out.append(f"{bullet}unreadable run {u['run'][:12]}: {u['error']}")
    return out


def _render(s: dict, heading: Callable[[str], str], table: Callable, bullet: str,
            markdown: bool = False) -> str:
    head = _header(s)
    if markdown:  # one paragraph per line, the first as a heading
        head = [f"## {head[0]}"] + [x for line in head[1:] for x in ("", line)]
    out = head + [""]
    for key in ("primary", "secondary"):
        if s.get(key):
            out += _analysis_lines(s[key], heading, table)
    trailer = _trailer(s, bullet)
    if trailer:
        out += [heading("Deviations, stops and problems")] + trailer + [""]
    return "\n".join(out).rstrip() + "\n"


def _fit(text: str, width: int = WIDTH) -> str:
    """Wrap the lines that are not tables (headers, bullets) to ``width`` columns."""
    out = []
    for line in text.split("\n"):
        out += textwrap.wrap(line, width, subsequent_indent="  ", break_on_hyphens=False) \
            if len(line) > width else [line]
    return "\n".join(out)


def render_terminal(summary: dict) -> str:
    """Plain-text tables of a summary.json object, at most ``WIDTH`` columns wide."""
    return _fit(_render(summary, lambda t: f"== {t} ==", _text_table, "- "))


def render_markdown(summary: dict) -> str:
    """A Markdown (GFM tables) rendering of a summary.json object."""
    return _render(summary, lambda t: f"### {t}\n", _md_table, "- ", markdown=True)


# ---------------------------------------------------------------------------- comparison

_MOVED = {"held": "held", "flipped": "FLIPPED", "became_inconclusive": "became inconclusive",
          "resolved": "resolved", "unsettled": "unsettled", "single": "tested once", "error": "ERROR"}


def _spec_value(v, first) -> str:
    """A spec fact for a narrow column: a long list (the tasks) as its size and how it
    differs from the first experiment's; a time to the minute. --json has every value."""
    if v is None:
        return "-"
    if isinstance(v, list) and len(v) > 3:
        if v == first or not isinstance(first, list):
            return f"{len(v)}" + (" (same)" if v == first and v is not first else "")
        added, gone = [x for x in v if x not in first], [x for x in first if x not in v]
        diff = [f"+{x}" for x in added[:2]] + [f"-{x}" for x in gone[:2]]
        more = len(added) + len(gone) - len(diff)
        return f"{len(v)}: " + ", ".join(diff) + (f", … {more} more" if more else "")
    if isinstance(v, list):
        return ", ".join(str(x) for x in v) or "-"
    if isinstance(v, str) and len(v) == 27 and v[10] == "T":  # a record time
        return f"{v[:10]} {v[11:16]}Z"
    return str(v)


def _pct_range(vs: dict | None) -> str:
    if not vs:
        return "-"
    lo, hi = (f"{Decimal(x) * 100:+.2f}%" for x in (vs["low"], vs["high"]))
    return lo if lo == hi else f"{lo} to {hi}"


def _figure_rows(p: dict, baseline: str | None) -> list[list[str]]:
    res = p["results"]
    cell = lambda f, get: get(f) if f else "-"  # noqa: E731
    name = p["policy"]
    rows = [[f"{name}: pass"] + [cell(f, lambda f: _rate(f["pass_rate"])) for f in res],
            [f"{name}: 95% CI"] + [cell(f, lambda f: _ci(f["pass_rate"])) for f in res],
            [f"{name}: cost/task"] + [cell(f, lambda f: _money(f["cost_per_task"])) for f in res]]
    if baseline and name != baseline:
        rows.append([f"{name}: vs {baseline}"] + [cell(f, lambda f: _pct_range(f["vs_baseline"])) for f in res])
    rows.append([f"{name}: mean s"] + [cell(f, lambda f: f["mean_time_s"] or "-") for f in res])
    rows.append([f"{name}: mode"] + [cell(f, lambda f: f["mode"]) for f in res])
    if any(f and f.get("secondary") for f in res):
        rows.append([f"{name}: secondary pass"] + [
            cell(f and f.get("secondary"), lambda s: _rate(s["pass_rate"])) for f in res])
        rows.append([f"{name}: secondary cost/task"] + [
            cell(f and f.get("secondary"), lambda s: _money(s["cost_per_task"])) for f in res])
    return rows


def _compare_sections(c: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    ids = [e["experiment"] for e in c["experiments"]]
    spec = [[r["label"] + (" *" if r["differs"] else "")] + [_spec_value(v, r["values"][0]) for v in r["values"]]
            for r in c["spec"]]
    figs = [row for p in c["policies"] for row in _figure_rows(p, c["baseline"])]
    hyps = [[f"{' / '.join(h['ids'])}: {h['text']}"] +
            [(_MARK.get(r["decision"], r["decision"]) if r else "-") for r in h["results"]] +
            [_MOVED.get(h["movement"], h["movement"])] for h in c["hypotheses"]]
    return [("What differs between the experiments (* = differs)", ["", *ids], spec),
            ("Chosen policies (primary analysis: every run that called the model)", ["figure", *ids], figs),
            ("How each claim moved", ["hypothesis", *ids, "moved"], hyps)]


def _corrections_lines(c: dict, bullet: str) -> list[str]:
    return [f"{bullet}{k['experiment']} at {k['at']}: the claim \"{k['claim']}\" was wrong: {k['wrong']} "
            f"Why: {k['why']} Corrected: {k['corrected']}" for k in c["corrections"]]


def _render_compare(c: dict, heading: Callable[[str], str], table: Callable, markdown: bool) -> str:
    ids = [e["experiment"] for e in c["experiments"]]
    title = f"Comparison of {', '.join(ids)}"
    out = [f"## {title}" if markdown else title, ""]
    if any(e["simulated"] for e in c["experiments"]):
        out += ["SIMULATED: produced by the built-in simulator; not evidence about any real model.", ""]
    for name, head, rows in _compare_sections(c):
        out += [heading(name)] + (table(head, rows) if rows else ["(none)"]) + [""]
    out += [heading("Corrections")] + (_corrections_lines(c, "- ") or ["(none recorded)"]) + [""]
    return "\n".join(out).rstrip() + "\n"


def render_compare_terminal(comparison: dict) -> str:
    """Plain-text tables of a comparison object (``analysis.compare``), at most ``WIDTH`` wide."""
    return _fit(_render_compare(comparison, lambda t: f"== {t} ==", _text_table, False))


def render_compare_markdown(comparison: dict) -> str:
    """A Markdown (GFM tables) rendering of a comparison object."""
    return _render_compare(comparison, lambda t: f"### {t}\n", _md_table, True)
