"""The studio's configuration: what visitors may pick and what they may spend.

Why it is built this way: everything a visitor can choose (tasks, policies, agent
profiles) is an allow-list the operator writes here, resolved once at start-up into loaded
objects keyed by id. A request then only ever names an id that is looked up in a dict; no
request value is ever turned into a path. Budgets are decimal strings (money is never a
float) and every limit has a safe default, so ``benchclaw studio`` with no config file
serves the simulator with small budgets.

The file is TOML (docs/studio.md "Configuration"); unknown keys are errors, like an
experiment spec's, because a mistyped budget key silently ignored would be a budget that
does not hold.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable

from ..errors import FormatError, InputError
from ..formats.money import parse_usd
from ..formats.policies import known_policy

__all__ = ["StudioConfig", "Budgets", "load_config", "default_config", "CONFIG_VERSION"]

CONFIG_VERSION = 1
DEFAULT_TASKS = ("quotes-incident", "cents-fees", "pricing-seats")


@dataclass(frozen=True)
class Budgets:
    """Per-session (``session_*``) and per-UTC-day (``day_*``) limits of the whole studio."""

    session_usd: Decimal = Decimal("0.02")
    session_tokens: int = 400_000
    session_runs: int = 12
    day_usd: Decimal = Decimal("1.00")
    day_tokens: int = 20_000_000
    per_call_usd: Decimal = Decimal("0.02")


@dataclass(frozen=True)
class StudioConfig:
    catalog: str = "sim"
    tasks: tuple[str, ...] = DEFAULT_TASKS
    tasks_root: str | None = None
    profiles: tuple[str, ...] = ("direct", "checker")
    policies: tuple[str, ...] = ()          # empty: ladder, memory and always:<tier> for each tier
    tiers: tuple[str, ...] = ()             # empty: the catalog's ladder
    max_tokens: int = 2048
    turns: int = 12
    seconds: int = 120
    budgets: Budgets = field(default_factory=Budgets)
    session_concurrency: int = 1
    global_concurrency: int = 8
    starts_per_minute: int = 6              # per session
    global_starts_per_minute: int = 120
    secret_file: str | None = None          # persistent cookie secret (sessions survive restarts)
    secure_cookies: bool = False            # set behind an https reverse proxy
    allowed_hosts: tuple[str, ...] = ()     # empty: any Host header (bind to loopback then)
    label: str = "public"
    sim_latency_scale: float | None = None  # None: $BENCHCLAW_SIM_LATENCY_SCALE or 1
    path: str | None = None

    def with_catalog(self, catalog: str | None) -> "StudioConfig":
        return self if catalog is None else replace(self, catalog=catalog)


def default_config() -> StudioConfig:
    return StudioConfig()


def load_config(path: str | Path | None) -> StudioConfig:
    """The config at ``path`` (defaults when None). Raises InputError when unreadable,
    FormatError naming ``file: key`` when a value is wrong or a key unknown."""
    if path is None:
        return default_config()
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"{p}: cannot read the studio config ({e.strerror or e})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise FormatError(f"{p}: not valid TOML: {e}") from None
    return _parse(doc, str(p))


# ----------------------------------------------------------------------------- parsing

def _parse(doc: dict, where: str) -> StudioConfig:
    top = _Table(doc, where, "")
    if top.get("v", _int(1), CONFIG_VERSION) != CONFIG_VERSION:
        raise FormatError(f"{where}: v: this BenchClaw reads studio config v = {CONFIG_VERSION}")
    d = StudioConfig()
    kw: dict[str, Any] = dict(
        catalog=top.get("catalog", _str, d.catalog),
        tasks=top.get("tasks", _strs, d.tasks),
        tasks_root=top.get("tasks_root", _str, None),
        profiles=top.get("profiles", _strs, d.profiles),
        policies=top.get("policies", _policies, ()),
        tiers=top.get("tiers", _strs, ()),
        label=top.get("label", _name, d.label),
    )
    run = _Table(top.get("run", _table, {}), where, "run.")
    kw.update(max_tokens=run.get("max_tokens", _int(1), d.max_tokens),
              turns=run.get("turns", _int(1), d.turns), seconds=run.get("seconds", _int(1), d.seconds))
    run.done()
    kw["budgets"] = _budgets(_Table(top.get("budget", _table, {}), where, "budget."), where)
    lim = _Table(top.get("limits", _table, {}), where, "limits.")
    kw.update(session_concurrency=lim.get("session_concurrency", _int(1), d.session_concurrency),
              global_concurrency=lim.get("global_concurrency", _int(1), d.global_concurrency),
              starts_per_minute=lim.get("starts_per_minute", _int(1), d.starts_per_minute),
              global_starts_per_minute=lim.get("global_starts_per_minute", _int(1), d.global_starts_per_minute))
    lim.done()
    srv = _Table(top.get("server", _table, {}), where, "server.")
    secret = srv.get("secret_file", _str, None)
    if secret is not None and not Path(secret).is_absolute():
        secret = str((Path(where).parent / secret).resolve())
    kw.update(secret_file=secret, secure_cookies=srv.get("secure_cookies", _bool, False),
              allowed_hosts=srv.get("allowed_hosts", _strs, ()))
    srv.done()
    sim = _Table(top.get("sim", _table, {}), where, "sim.")
    scale = sim.get("latency_scale", _number, None)
    kw["sim_latency_scale"] = None if scale is None else float(scale)
    sim.done()
    top.done()
    if kw["catalog"].endswith(".toml") and not Path(kw["catalog"]).is_absolute():
        kw["catalog"] = str((Path(where).parent / kw["catalog"]).resolve())
    return StudioConfig(path=where, **kw)


def _budgets(t: "_Table", where: str) -> Budgets:
    d = Budgets()
    s = _Table(t.get("session", _table, {}), where, "budget.session.")
    day = _Table(t.get("day", _table, {}), where, "budget.day.")
    out = Budgets(session_usd=s.get("usd", _usd, d.session_usd),
                  session_tokens=s.get("tokens", _int(1), d.session_tokens),
                  session_runs=s.get("runs", _int(1), d.session_runs),
                  day_usd=day.get("usd", _usd, d.day_usd), day_tokens=day.get("tokens", _int(1), d.day_tokens),
                  per_call_usd=day.get("per_call_usd", _usd, d.per_call_usd))
    s.done()
    day.done()
    t.done()
    return out


class _Table:
    def __init__(self, data: Any, where: str, prefix: str):
        if not isinstance(data, dict):
            raise FormatError(f"{where}: {prefix.rstrip('.') or 'config'}: expected a table")
        self.data, self.where, self.prefix, self.seen = data, where, prefix, set()

    def get(self, name: str, check: Callable[[Any, str], Any], default: Any) -> Any:
        self.seen.add(name)
        if name not in self.data:
            return default
        return check(self.data[name], f"{self.where}: {self.prefix}{name}")

    def done(self) -> None:
        extra = sorted(set(self.data) - self.seen)
        if extra:
            raise FormatError(f"{self.where}: {self.prefix}{extra[0]}: unknown key")


def _table(v, where):
    if not isinstance(v, dict):
        raise FormatError(f"{where}: expected a table")
    return v


def _str(v, where):
    if not isinstance(v, str) or not v.strip():
        raise FormatError(f"{where}: expected a non-empty string")
    return v


def _name(v, where):
    v = _str(v, where)
    if not all(c.isalnum() or c in "-_" for c in v) or len(v) > 40:
        raise FormatError(f"{where}: expected letters, digits, - or _ (at most 40), got {v!r}")
    return v


def _strs(v, where):
    if not isinstance(v, list) or not v:
        raise FormatError(f"{where}: expected a non-empty list of strings")
    out = tuple(_str(x, f"{where}[{i}]") for i, x in enumerate(v))
    if len(set(out)) != len(out):
        raise FormatError(f"{where}: duplicate entries")
    return out


def _policies(v, where):
    out = _strs(v, where)
    for i, p in enumerate(out):
        if not known_policy(p):
            raise FormatError(f"{where}[{i}]: unknown policy {p!r} (ladder, memory, speculative, always:<tier>)")
    return out


def _bool(v, where):
    if not isinstance(v, bool):
        raise FormatError(f"{where}: expected true or false")
    return v


def _int(minimum: int):
    def check(v, where):
        if type(v) is not int or v < minimum:
            raise FormatError(f"{where}: expected an integer >= {minimum}, got {v!r}")
        return v
    return check


def _usd(v, where):
    if isinstance(v, float):
        raise FormatError(f"{where}: money is written as a string (e.g. \"0.50\"), never a float")
    return parse_usd(v, where)


def _number(v, where):
    if type(v) not in (int, float) or v < 0:
        raise FormatError(f"{where}: expected a non-negative number")
    return v
