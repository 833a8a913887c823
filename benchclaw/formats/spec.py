"""Experiment specs (FORMAT.md §9): parse and validate the bytes of ``experiments/<id>.toml``.

Why it is built this way: a spec is pre-registered by the SHA-256 of its exact bytes, so
the parser keeps those bytes and their digest next to the parsed values, and every later
step (prereg, run, deviate, the report, the offline verifier) talks about the same bytes.
Validation happens here, at the boundary, with one error naming the file and the key
(``E01.toml: budget.usd: ...``); once a ``Spec`` exists it is valid. Unknown keys are
errors, because a mistyped key silently ignored would change what was pre-registered.

It is a pure module (standard library, ``money``, ``policies``, ``names``) rather than
part of ``benchclaw.experiments``, whose package also holds pre-registration (which
writes journals through the store): the verifier and the analysis parse specs from
bundle bytes with this very parser and must not import the store. ``load_spec`` reads a
spec file for everyone else.

Task globs and the catalog are kept as written and resolved by the runner, so a spec can
be validated (and registered) without loading tasks or providers.
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable

from ..errors import FormatError, InputError
from .money import parse_usd
from .names import safe_name
from .policies import PolicyError, parse_policy

__all__ = ["Spec", "Grid", "Settings", "Budget", "Hypothesis", "StopRule", "parse_spec", "load_spec",
           "STOP_RULES", "spec_digest", "SPEC_VERSION"]

SPEC_VERSION = 1


@dataclass(frozen=True)
class Grid:
    tasks: tuple[str, ...]
    profiles: tuple[str, ...]
    seeds: tuple[int, ...]
    tiers: tuple[str, ...]
    catalog: str
    all_tiers: bool = False


@dataclass(frozen=True)
class Settings:
    max_tokens: int = 8192
    temperature: Decimal = Decimal(0)
    turns: int = 12
    seconds: int = 180
    output_bytes: int = 32768
    concurrency: int = 4
    retries: int = 2
    tier_concurrency: dict = field(default_factory=dict)  # tier -> cap on runs in flight


@dataclass(frozen=True)
class Budget:
    usd: Decimal
    tokens: int | None = None
    per_call_usd: Decimal | None = None


@dataclass(frozen=True)
class Hypothesis:
    id: str
    text: str
    rule: str
    parsed: Any = None  # the analysis engineer's parsed rule, when that module is present


@dataclass(frozen=True)
class StopRule:
    rule: str
    params: dict


@dataclass(frozen=True)
class Spec:
    id: str
    title: str
    notes: str
    grid: Grid
    settings: Settings
    budget: Budget
    live: tuple[str, ...]
    hypotheses: tuple[Hypothesis, ...]
    stopping: tuple[StopRule, ...]
    path: Path
    source: bytes = field(repr=False)
    digest: str = ""

    def catalog_ref(self) -> str:
        """The catalog as ``load_catalog`` takes it: a shipped name, or a path resolved
        relative to the spec's folder."""
        c = self.grid.catalog
        if "/" in c or c.endswith(".toml"):
            return str((self.path.parent / c).resolve())
        return c


def spec_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- small typed readers

class _Table:
    """A TOML table being read: typed getters that name ``file: key``; ``done`` rejects
    the keys nobody asked for."""

    def __init__(self, data: Any, where: str, prefix: str):
        if not isinstance(data, dict):
            raise FormatError(f"{where}: {prefix or 'spec'}: expected a table")
        self.data, self.where, self.prefix, self.seen = data, where, prefix, set()

    def key(self, name: str) -> str:
        return f"{self.where}: {self.prefix}{name}"

    def get(self, name: str, check: Callable[[Any, str], Any], default: Any = ..., ) -> Any:
        self.seen.add(name)
        if name not in self.data:
            if default is ...:
                raise FormatError(f"{self.key(name)}: missing")
            return default
        return check(self.data[name], self.key(name))

    def done(self) -> None:
        extra = sorted(set(self.data) - self.seen)
        if extra:
            raise FormatError(f"{self.key(extra[0])}: unknown key")


def _str(v, where):
    if not isinstance(v, str) or not v.strip():
        raise FormatError(f"{where}: expected a non-empty string")
    return v


def _text(v, where):
    if not isinstance(v, str):
        raise FormatError(f"{where}: expected a string")
    return v


def _bool(v, where):
    if not isinstance(v, bool):
        raise FormatError(f"{where}: expected true or false")
    return v


def _posint(v, where):
    if type(v) is not int or v < 1:
        raise FormatError(f"{where}: expected a positive integer, got {v!r}")
    return v


def _usd(v, where):
    if isinstance(v, float):
        raise FormatError(f"{where}: money is written as a string (e.g. \"5.00\"), never a float")
    return parse_usd(v, where)


def _temperature(v, where):
    if not isinstance(v, str):
        raise FormatError(f"{where}: write the temperature as a decimal string (e.g. \"0\")")
    try:
        d = Decimal(v)
    except ArithmeticError:
        raise FormatError(f"{where}: not a decimal number: {v!r}") from None
    if not d.is_finite() or d < 0 or d > 2:
        raise FormatError(f"{where}: expected a decimal between 0 and 2, got {v!r}")
    return d


def _list_of(item: Callable, *, unique: bool = True):
    def check(v, where):
        if not isinstance(v, list) or not v:
            raise FormatError(f"{where}: expected a non-empty list")
        out = tuple(item(x, f"{where}[{i}]") for i, x in enumerate(v))
        if unique and len(set(out)) != len(out):
            raise FormatError(f"{where}: duplicate entries")
        return out
    return check


def _nonneg(v, where):
    if type(v) is not int or v < 0:
        raise FormatError(f"{where}: expected a non-negative integer, got {v!r}")
    return v


# --------------------------------------------------------------------------- sections

def _grid(t: _Table) -> Grid:
    g = _Table(t.get("grid", lambda v, w: v), t.where, "grid.")
    grid = Grid(tasks=g.get("tasks", _list_of(_str)), profiles=g.get("profiles", _list_of(_str)),
                seeds=g.get("seeds", _list_of(_nonneg)), tiers=g.get("tiers", _list_of(_str)),
                catalog=g.get("catalog", _str), all_tiers=g.get("all_tiers", _bool, False))
    g.done()
    return grid


def _settings(t: _Table, tiers: tuple[str, ...]) -> Settings:
    s = _Table(t.get("settings", lambda v, w: v, {}), t.where, "settings.")
    caps = s.get("tier_concurrency", lambda v, w: v, {})
    ct = _Table(caps, t.where, "settings.tier_concurrency.")
    caps = {name: ct.get(name, _posint) for name in list(caps)}
    unknown = sorted(set(caps) - set(tiers))
    if unknown:
        raise FormatError(f"{ct.key(unknown[0])}: not a tier of the grid {list(tiers)}")
    retries = s.get("retries", _nonneg, 2)
    out = Settings(max_tokens=s.get("max_tokens", _posint, 8192),
                   temperature=s.get("temperature", _temperature, Decimal(0)),
                   turns=s.get("turns", _posint, 12), seconds=s.get("seconds", _posint, 180),
                   output_bytes=s.get("output_bytes", _posint, 32768),
                   concurrency=s.get("concurrency", _posint, 4), retries=retries,
                   tier_concurrency=caps)
    s.done()
    return out


def _budget(t: _Table) -> Budget:
    b = _Table(t.get("budget", lambda v, w: v), t.where, "budget.")
    out = Budget(usd=b.get("usd", _usd), tokens=b.get("tokens", _posint, None),
                 per_call_usd=b.get("per_call_usd", _usd, None))
    b.done()
    return out


def _policies(t: _Table, tiers: tuple[str, ...]) -> tuple[str, ...]:
    p = _Table(t.get("policies", lambda v, w: v, {}), t.where, "policies.")
    live = p.get("live", lambda v, w: () if v == [] else _list_of(_str)(v, w), ())
    p.done()
    for i, name in enumerate(live):
        try:
            parse_policy(name, tiers)(tiers, [])
        except PolicyError as e:
            raise FormatError(f"{p.key('live')}[{i}]: {e}") from None
    return live


def _hypotheses(t: _Table) -> tuple[Hypothesis, ...]:
    raw = t.get("hypotheses", lambda v, w: v if isinstance(v, list) else _fail(w, "expected [[hypotheses]]"), [])
    out, ids = [], set()
    for i, item in enumerate(raw):
        h = _Table(item, t.where, f"hypotheses[{i}].")
        hyp = Hypothesis(id=h.get("id", _str), text=h.get("text", _text, ""), rule=h.get("rule", _str))
        h.done()
        if hyp.id in ids:
            raise FormatError(f"{h.key('id')}: duplicate hypothesis id {hyp.id!r}")
        ids.add(hyp.id)
        out.append(Hypothesis(hyp.id, hyp.text, hyp.rule, _parse_rule(hyp.rule, h.key("rule"))))
    return tuple(out)


def _parse_rule(rule: str, where: str) -> Any:
    """Validate with the analysis engineer's parser when it is installed, else keep the text."""
    try:
        from .rules import parse_rule
    except ImportError:
        return None
    try:
        return parse_rule(rule)
    except Exception as e:  # their parser raises its own error type; name our key around it
        raise FormatError(f"{where}: {e}") from None


# name -> (required params with their readers); the runner implements each rule
STOP_RULES: dict[str, dict[str, Callable]] = {
    "spend": {"usd": _usd},
    "tokens": {"tokens": _posint},
    "provider_errors": {"consecutive": _posint},
}


def _stopping(t: _Table) -> tuple[StopRule, ...]:
    raw = t.get("stopping", lambda v, w: v if isinstance(v, list) else _fail(w, "expected [[stopping]]"), [])
    out = []
    for i, item in enumerate(raw):
        s = _Table(item, t.where, f"stopping[{i}].")
        name = s.get("rule", _str)
        if name not in STOP_RULES:
            raise FormatError(f"{s.key('rule')}: unknown stopping rule {name!r} "
                              f"(known: {', '.join(sorted(STOP_RULES))})")
        params = {k: s.get(k, reader) for k, reader in STOP_RULES[name].items()}
        s.done()
        out.append(StopRule(name, params))
    return tuple(out)


def _fail(where: str, msg: str):
    raise FormatError(f"{where}: {msg}")


# --------------------------------------------------------------------------- entry points

def parse_spec(data: bytes, path: Path) -> Spec:
    """Parse spec bytes. Raises FormatError naming ``path`` and the key at fault."""
    where = str(path)
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise FormatError(f"{where}: not UTF-8 ({e})") from None
    except tomllib.TOMLDecodeError as e:
        raise FormatError(f"{where}: not valid TOML: {e}") from None
    t = _Table(doc, where, "")
    v = t.get("v", lambda x, w: x)
    if v != SPEC_VERSION:
        raise FormatError(f"{t.key('v')}: unknown spec version {v!r} (expected {SPEC_VERSION})")
    exp_id = t.get("id", _str)
    try:
        safe_name(exp_id, "experiment id")
    except InputError as e:
        raise FormatError(f"{t.key('id')}: {e}") from None
    grid = _grid(t)
    spec = Spec(id=exp_id, title=t.get("title", _str), notes=t.get("notes", _text, ""), grid=grid,
                settings=_settings(t, grid.tiers), budget=_budget(t), live=_policies(t, grid.tiers),
                hypotheses=_hypotheses(t), stopping=_stopping(t), path=path, source=data,
                digest=spec_digest(data))
    t.done()
    if not grid.all_tiers and not spec.live:
        raise FormatError(f"{where}: nothing to run: set grid.all_tiers = true or list policies.live")
    return spec


def load_spec(path: Path | str) -> Spec:
    """Read and validate a spec file. Raises InputError when unreadable, FormatError
    naming the file and key when invalid."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read the experiment spec ({e.strerror or e})") from None
    return parse_spec(data, path)
