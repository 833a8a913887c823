"""Charts as inline SVG, drawn at build time from the analysis's summary.

Why SVG strings built here rather than a charting library or JavaScript: the site must
work opened from disk with no script and no network, and a page must be byte-identical
for the same inputs. Coordinates are computed in ``Decimal`` (money is never a float) and
written with one decimal place, so output is stable across platforms. Every label that
comes from data (policy and tier names) is escaped; styling comes from classes in
``style.css`` so the charts follow the page's typography and colours.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

__all__ = ["pass_vs_cost", "tokens_per_tier", "time_per_policy", "across_experiments", "claim_strip",
           "throughput_by_quarter"]

_W, _PAD_L, _PAD_R, _PAD_T, _PAD_B = 760, 64, 170, 20, 46
_ZERO = Decimal(0)


def _esc(text) -> str:
    from markupsafe import escape

    return str(escape(str(text)))


def _n(d: Decimal) -> str:
    return format(d.quantize(Decimal("0.1")), "f")


def _dec(text) -> Decimal | None:
    try:
        return None if text is None else Decimal(str(text))
    except InvalidOperation:
        return None


def _svg(height: int, title: str, body: list[str]) -> str:
    from markupsafe import Markup

    return Markup(f'<svg class="chart" viewBox="0 0 {_W} {height}" role="img" aria-label="{_esc(title)}" '
                  f'xmlns="http://www.w3.org/2000/svg"><title>{_esc(title)}</title>{"".join(body)}</svg>')


# ---------------------------------------------------------------------------- pass rate vs cost

def _points(policies: list[dict]) -> list[dict]:
    pts = []
    for p in policies:
        rate = _dec((p.get("pass_rate") or {}).get("value"))
        per = (p.get("cost") or {}).get("per_task") or {}
        low, high = _dec(per.get("low")), _dec(per.get("high"))
        if rate is None or low is None or high is None:
            continue
        w = (p.get("pass_rate") or {}).get("wilson95") or [None, None]
        pts.append({"name": p.get("policy"), "mode": p.get("mode"), "rate": rate, "low": low, "high": high,
                    "w_lo": _dec(w[0]), "w_hi": _dec(w[1])})
    return pts


def frontier(points: list[dict]) -> list[dict]:
    """The cheapest point at each pass rate: sorted by worst-case cost per task, a point is
    on the frontier when it passes more than every point at least as cheap."""
    best, out = Decimal(-1), []
    for p in sorted(points, key=lambda p: (p["high"], -p["rate"], str(p["name"]), str(p["mode"]))):
        if p["rate"] > best:
            out.append(p)
            best = p["rate"]
    return out


def pass_vs_cost(policies: list[dict]) -> str:
    """Pass rate (y) against cost per task (x): cost bounds as horizontal error bars, the
    95% pass-rate interval as vertical ones, the frontier as a step line."""
    pts = _points(policies)
    h = 360
    plot_w, plot_h = Decimal(_W - _PAD_L - _PAD_R), Decimal(h - _PAD_T - _PAD_B)
    xmax = max((p["high"] for p in pts), default=Decimal(1)) * Decimal("1.08") or Decimal(1)
    x = lambda c: Decimal(_PAD_L) + c / xmax * plot_w  # noqa: E731
    y = lambda r: Decimal(_PAD_T) + (1 - r) * plot_h  # noqa: E731
    body = _axes_pass(x, y, xmax, h)
    front = frontier(pts)
    if len(front) > 1:
        steps = []
        for a, b in zip(front, front[1:]):
            steps.append(f"{_n(x(a['high']))},{_n(y(a['rate']))} {_n(x(b['high']))},{_n(y(a['rate']))} "
                         f"{_n(x(b['high']))},{_n(y(b['rate']))}")
        body.append(f'<polyline class="frontier" points="{" ".join(steps)}"/>')
    on_front = {(p["name"], p["mode"]) for p in front}
    placed: list[Decimal] = []
    for p in sorted(pts, key=lambda p: (-p["rate"], p["high"], str(p["name"]))):
        px, py = x(p["high"]), y(p["rate"])
        cls = "pt front" if (p["name"], p["mode"]) in on_front else "pt"
        body.append(f'<line class="err" x1="{_n(x(p["low"]))}" y1="{_n(py)}" x2="{_n(px)}" y2="{_n(py)}"/>')
        if p["w_lo"] is not None and p["w_hi"] is not None:
            body.append(f'<line class="err ci" x1="{_n(px)}" y1="{_n(y(p["w_lo"]))}" x2="{_n(px)}" y2="{_n(y(p["w_hi"]))}"/>')
        if p["mode"] == "live":
            body.append(f'<rect class="{cls} live" x="{_n(px - 5)}" y="{_n(py - 5)}" width="10" height="10" '
                        f'transform="rotate(45 {_n(px)} {_n(py)})"/>')
        else:
            body.append(f'<circle class="{cls}" cx="{_n(px)}" cy="{_n(py)}" r="5"/>')
        ly = py + 4
        while any(abs(ly - q) < 13 for q in placed):
            ly += 13
        placed.append(ly)
        label = f'{p["name"]}{" (live)" if p["mode"] == "live" else ""}'
        body.append(f'<text class="plbl" x="{_n(px + 9)}" y="{_n(ly)}">{_esc(label)}</text>')
    if not pts:
        body.append(f'<text class="plbl" x="{_PAD_L + 10}" y="{_PAD_T + 30}">no complete trials yet</text>')
    return _svg(h, "Pass rate against cost per task", body)


def _axes_pass(x, y, xmax: Decimal, h: int) -> list[str]:
    body = [f'<line class="axis" x1="{_PAD_L}" y1="{h - _PAD_B}" x2="{_W - _PAD_R}" y2="{h - _PAD_B}"/>',
            f'<line class="axis" x1="{_PAD_L}" y1="{_PAD_T}" x2="{_PAD_L}" y2="{h - _PAD_B}"/>']
    for i in range(0, 11, 2):
        r = Decimal(i) / 10
        body.append(f'<line class="gridline" x1="{_PAD_L}" y1="{_n(y(r))}" x2="{_W - _PAD_R}" y2="{_n(y(r))}"/>')
        body.append(f'<text class="tick" x="{_PAD_L - 8}" y="{_n(y(r) + 4)}" text-anchor="end">{i * 10}%</text>')
    for i in range(0, 5):
        c = xmax * i / 4
        body.append(f'<text class="tick" x="{_n(x(c))}" y="{h - _PAD_B + 16}" text-anchor="middle">{_money_tick(c)}</text>')
    body.append(f'<text class="axis-title" x="{(_W - _PAD_R + _PAD_L) // 2}" y="{h - 8}" text-anchor="middle">'
                'cost per task (USD; bar = known-to-worst-case bounds)</text>')
    body.append(f'<text class="axis-title" x="14" y="{_PAD_T + 120}" transform="rotate(-90 14 {_PAD_T + 120})" '
                'text-anchor="middle">pass rate</text>')
    return body


def _money_tick(c: Decimal) -> str:
    if c == 0:
        return "$0"
    digits = max(2, -c.adjusted() + 1)
    return "$" + format(c.quantize(Decimal(1).scaleb(-digits)), "f")


# ---------------------------------------------------------------------------- tokens per tier

_TOKEN_PARTS = (("prompt", "uncached prompt"), ("cached", "cached prompt"), ("completion", "completion"),
                ("reasoning", "reasoning"))


def _token_split(t: dict) -> dict[str, int]:
    prompt, cached = int(t.get("prompt", 0)), int(t.get("cached_read", 0)) + int(t.get("cache_write", 0))
    completion, reasoning = int(t.get("completion", 0)), int(t.get("reasoning", 0))
    return {"prompt": max(0, prompt - cached), "cached": cached, "completion": max(0, completion - reasoning),
            "reasoning": reasoning}


def tokens_per_tier(tiers: list[dict]) -> str:
    """Mean tokens per run of each tier, split into uncached prompt, cached prompt,
    completion and reasoning (stacked bars)."""
    rows = []
    for t in tiers:
        tok = (t.get("tokens") or {}).get(t.get("tier")) or {}
        n = int(t.get("samples") or 0)
        if n:
            rows.append((t.get("tier"), {k: Decimal(v) / n for k, v in _token_split(tok).items()}))
    h = _PAD_T + 34 * max(1, len(rows)) + 56
    total_max = max((sum(parts.values()) for _, parts in rows), default=Decimal(1)) or Decimal(1)
    plot_w = Decimal(_W - _PAD_L - 40 - _PAD_R + 60)
    body = []
    for i, (tier, parts) in enumerate(rows):
        y0, xcur = _PAD_T + 34 * i, Decimal(_PAD_L + 40)
        body.append(f'<text class="tick" x="{_PAD_L + 32}" y="{y0 + 17}" text-anchor="end">{_esc(tier)}</text>')
        for key, _label in _TOKEN_PARTS:
            w = parts[key] / total_max * plot_w
            if w > 0:
                body.append(f'<rect class="tk tk-{key}" x="{_n(xcur)}" y="{y0 + 4}" width="{_n(w)}" height="20">'
                            f'<title>{_esc(tier)} {key}: {int(parts[key]):,} tokens per run</title></rect>')
            xcur += w
        body.append(f'<text class="plbl" x="{_n(xcur + 6)}" y="{y0 + 18}">{int(sum(parts.values())):,} / run</text>')
    ly = _PAD_T + 34 * max(1, len(rows)) + 16
    for j, (key, label) in enumerate(_TOKEN_PARTS):
        lx = _PAD_L + 40 + j * 150
        body.append(f'<rect class="tk tk-{key}" x="{lx}" y="{ly}" width="12" height="12"/>'
                    f'<text class="tick" x="{lx + 17}" y="{ly + 11}">{label}</text>')
    if not rows:
        body.append(f'<text class="plbl" x="{_PAD_L + 10}" y="{_PAD_T + 20}">no runs with usage yet</text>')
    return _svg(h, "Tokens per run by tier", body)


# ---------------------------------------------------------------------------- time per policy

def time_per_policy(policies: list[dict]) -> str:
    """Mean wall time per task (seconds) of each policy, live and replayed."""
    rows = [(f'{p.get("policy")}{" (live)" if p.get("mode") == "live" else ""}', _dec((p.get("time_s") or {}).get("mean")),
             p.get("mode")) for p in policies]
    rows = [r for r in rows if r[1] is not None]
    h = _PAD_T + 26 * max(1, len(rows)) + 30
    tmax = max((r[1] for r in rows), default=Decimal(1)) or Decimal(1)
    x0, plot_w = Decimal(_PAD_L + 110), Decimal(_W - _PAD_L - 110 - _PAD_R + 80)
    body = []
    for i, (label, secs, mode) in enumerate(rows):
        y0 = _PAD_T + 26 * i
        w = secs / tmax * plot_w
        body.append(f'<text class="tick" x="{_n(x0 - 8)}" y="{y0 + 15}" text-anchor="end">{_esc(label)}</text>')
        body.append(f'<rect class="bar {"bar-live" if mode == "live" else ""}" x="{_n(x0)}" y="{y0 + 3}" '
                    f'width="{_n(w)}" height="17"/>')
        body.append(f'<text class="plbl" x="{_n(x0 + w + 6)}" y="{y0 + 16}">{secs.quantize(Decimal("0.01"))} s</text>')
    if not rows:
        body.append(f'<text class="plbl" x="{_PAD_L + 10}" y="{_PAD_T + 20}">no timed trials yet</text>')
    return _svg(h, "Mean time per task by policy", body)


# ---------------------------------------------------------------------------- across experiments

_AXES = ("rate", "money", "change")


def _span(axis: str, pts: list) -> tuple[Decimal, Decimal]:
    """(bottom, top) of the y axis: 0-100% for a rate, $0 up for money, and around 0 for a
    change (a cost change against the baseline can be either side of it)."""
    if axis == "rate":
        return Decimal(0), Decimal(1)
    hi = max((v[2] for v in pts), default=Decimal(1))
    if axis == "money":
        return Decimal(0), (hi * Decimal("1.1")) or Decimal(1)
    lo = min((v[0] for v in pts), default=Decimal(-1))
    lo, hi = min(lo, Decimal(0)) * Decimal("1.1"), max(hi, Decimal(0)) * Decimal("1.1")
    return (lo, hi) if hi > lo else (Decimal(-1), Decimal(1))


def _tick(axis: str, v: Decimal) -> str:
    if axis == "money":
        return _money_tick(v)
    pct = v * 100
    return f"{pct:+.0f}%" if axis == "change" and pct else f"{pct:.0f}%"


def across_experiments(ids: list[str], series: list[tuple[str, list]], *, axis: str, title: str) -> str:
    """How a figure moved from one experiment to the next: one line per policy over the
    experiments in order, each point with a vertical bar over its bounds (``(low, point,
    high)`` as Decimals, or None where the experiment has no such figure). ``axis``:
    ``rate`` (0-100%), ``money`` (from $0) or ``change`` (a fraction either side of 0)."""
    assert axis in _AXES
    h, n = 300, max(1, len(ids))
    plot_w, plot_h = Decimal(_W - _PAD_L - _PAD_R), Decimal(h - _PAD_T - _PAD_B)
    pts = [v for _, vals in series for v in vals if v is not None]
    bottom, top = _span(axis, pts)
    x = lambda i: Decimal(_PAD_L) + plot_w * (2 * i + 1) / (2 * n)  # noqa: E731
    y = lambda v: Decimal(_PAD_T) + (top - v) / (top - bottom) * plot_h  # noqa: E731
    body = [f'<line class="axis" x1="{_PAD_L}" y1="{h - _PAD_B}" x2="{_W - _PAD_R}" y2="{h - _PAD_B}"/>',
            f'<line class="axis" x1="{_PAD_L}" y1="{_PAD_T}" x2="{_PAD_L}" y2="{h - _PAD_B}"/>']
    for k in range(5):
        v = bottom + (top - bottom) * k / 4
        body.append(f'<line class="gridline" x1="{_PAD_L}" y1="{_n(y(v))}" x2="{_W - _PAD_R}" y2="{_n(y(v))}"/>'
                    f'<text class="tick" x="{_PAD_L - 8}" y="{_n(y(v) + 4)}" text-anchor="end">{_tick(axis, v)}</text>')
    if axis == "change":
        body.append(f'<line class="axis zero" x1="{_PAD_L}" y1="{_n(y(Decimal(0)))}" x2="{_W - _PAD_R}" '
                    f'y2="{_n(y(Decimal(0)))}"/>')
    for i, exp in enumerate(ids):
        body.append(f'<text class="tick" x="{_n(x(i))}" y="{h - _PAD_B + 16}" text-anchor="middle">{_esc(exp)}</text>')
    placed: list[Decimal] = []
    for j, (name, vals) in enumerate(series):
        cls = f"ser ser-{j % 4}"
        line = [f"{_n(x(i))},{_n(y(v[1]))}" for i, v in enumerate(vals) if v is not None]
        if len(line) > 1:
            body.append(f'<polyline class="{cls} trend" points="{" ".join(line)}"/>')
        for i, v in enumerate(vals):
            if v is None:
                continue
            px = x(i) + Decimal(2 * j - len(series) + 1) * 3  # side by side, so bars do not hide each other
            body.append(f'<line class="{cls} band" x1="{_n(px)}" y1="{_n(y(v[0]))}" x2="{_n(px)}" y2="{_n(y(v[2]))}"/>'
                        f'<circle class="{cls} dot" cx="{_n(px)}" cy="{_n(y(v[1]))}" r="4">'
                        f'<title>{_esc(name)} in {_esc(ids[i])}: {_esc(_value_text(v, axis))}</title></circle>')
        last = next((i for i in range(len(vals) - 1, -1, -1) if vals[i] is not None), None)
        if last is not None:
            ly = y(vals[last][1]) + 4
            while any(abs(ly - q) < 13 for q in placed):
                ly += 13
            placed.append(ly)
            body.append(f'<text class="plbl {cls}-lbl" x="{_W - _PAD_R + 8}" y="{_n(ly)}">{_esc(name)}</text>')
    if not pts:
        body.append(f'<text class="plbl" x="{_PAD_L + 10}" y="{_PAD_T + 30}">no figures to compare</text>')
    return _svg(h, title, body)


def _value_text(v, axis: str) -> str:
    if axis == "money":
        return f"${v[1]}" if v[0] == v[2] else f"${v[0]} to ${v[2]}"
    if axis == "change":
        lo, hi = (f"{d * 100:+.1f}%" for d in (v[0], v[2]))
        return lo if lo == hi else f"{lo} to {hi}"
    return f"{v[1] * 100:.1f}% (95% interval {v[0] * 100:.1f}% to {v[2] * 100:.1f}%)"


def claim_strip(ids: list[str], claims: list[dict]) -> str:
    """Each claim's decision in each experiment, as a row of coloured cells (supported,
    refuted, inconclusive, error, not tested) with how it moved at the end."""
    row_h, label_w, cell_w = 30, 300, 96
    h = _PAD_T + row_h * max(1, len(claims)) + 30
    body = []
    for i, exp in enumerate(ids):
        body.append(f'<text class="tick" x="{label_w + cell_w * i + cell_w // 2}" y="{_PAD_T + 4}" '
                    f'text-anchor="middle">{_esc(exp)}</text>')
    for r, claim in enumerate(claims):
        y0 = _PAD_T + 12 + row_h * r
        text = claim["text"] if len(claim["text"]) <= 46 else claim["text"][:45] + "…"
        body.append(f'<text class="plbl" x="4" y="{y0 + 17}">{_esc(" / ".join(claim["ids"]))}: {_esc(text)}'
                    f'<title>{_esc(claim["text"])}</title></text>')
        for i, res in enumerate(claim["results"]):
            dec = res["decision"] if res else "untested"
            x0 = label_w + cell_w * i
            body.append(f'<rect class="cs cs-{_esc(dec)}" x="{x0 + 3}" y="{y0 + 3}" width="{cell_w - 6}" height="{row_h - 6}">'
                        f'<title>{_esc(ids[i])}: {_esc(dec)}</title></rect>'
                        f'<text class="cs-lbl" x="{x0 + cell_w // 2}" y="{y0 + 19}" text-anchor="middle">{_esc(dec)}</text>')
        body.append(f'<text class="plbl mv mv-{_esc(claim["movement"])}" x="{label_w + cell_w * len(ids) + 10}" '
                    f'y="{y0 + 19}">{_esc(claim["movement"].replace("_", " "))}</text>')
    if not claims:
        body.append(f'<text class="plbl" x="10" y="{_PAD_T + 30}">no hypotheses to compare</text>')
    return _svg(h, "How each claim moved across experiments", body)


def throughput_by_quarter(tiers: list[dict]) -> str:
    """Median output tokens per second of each tier in each quarter of the experiment's
    duration (``health.tokens_per_s.windows``): a provider that slowed down mid-experiment
    shows as uneven bars."""
    rows = []
    for t in tiers:
        tps = ((t.get("health") or {}).get("tokens_per_s") or {})
        wins = [_dec(w) for w in tps.get("windows") or []]
        if any(w is not None for w in wins):
            rows.append((t.get("tier"), wins, tps.get("spread")))
    h = _PAD_T + 30 * max(1, len(rows)) + 30
    vmax = max((w for _, wins, _ in rows for w in wins if w is not None), default=Decimal(1)) or Decimal(1)
    x0 = Decimal(_PAD_L + 110)
    slot = Decimal(_W - _PAD_L - 110 - _PAD_R + 80) / 4
    body = []
    for i, (tier, wins, spread) in enumerate(rows):
        y0 = _PAD_T + 30 * i
        body.append(f'<text class="tick" x="{_n(x0 - 8)}" y="{y0 + 17}" text-anchor="end">{_esc(tier)}</text>')
        for q, w in enumerate(wins):
            if w is None:
                continue
            bw = w / vmax * (slot - 8)
            body.append(f'<rect class="bar" x="{_n(x0 + slot * q)}" y="{y0 + 4}" width="{_n(bw)}" height="18">'
                        f'<title>{_esc(tier)}, quarter {q + 1}: {_esc(w)} tok/s</title></rect>')
        if spread:
            body.append(f'<text class="plbl" x="{_n(x0 + slot * 4 + 4)}" y="{y0 + 18}">{_esc(spread)}x</text>')
    if not rows:
        body.append(f'<text class="plbl" x="{_PAD_L + 10}" y="{_PAD_T + 20}">no answered calls with usage yet</text>')
    for q in range(4):
        body.append(f'<text class="tick" x="{_n(x0 + slot * q)}" y="{h - 10}">quarter {q + 1}</text>')
    return _svg(h, "Output tokens per second by tier, per quarter of the experiment", body)
