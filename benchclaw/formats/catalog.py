"""The catalog file format (FORMAT.md "Catalogs"): TOML bytes to a ``Catalog``.

Pure (standard library ``tomllib``, ``money``, ``errors``) and separate from
``benchclaw.providers.catalog``, which finds catalog files on disk and sits in the
providers package: the offline verifier parses the catalogs in a bundle with this very
parser (resolving ``extends`` from the bundle, by digest) without importing any provider,
so a run's prices are checked against the catalog exactly as the runtime read it.

A catalog maps tier names to a provider, a model and prices. Its digest is the SHA-256 of
its exact bytes; an extending catalog merges its base field by field (a price the base
marks ``"unknown"``, a base URL).
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping

from ..errors import FormatError, ProviderConfigError
from .money import PRICE_FIELDS, Prices

__all__ = ["Tier", "Catalog", "parse_catalog", "KNOWN_PROVIDERS", "CATALOG_VERSION", "MAX_EXTENDS"]

CATALOG_VERSION = 1
KNOWN_PROVIDERS = ("openai", "sim")
MAX_EXTENDS = 8
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_TOP_KEYS = {"v", "name", "description", "extends", "simulated", "order", "tiers"}
_TIER_KEYS = {"provider", "model", "base_url", "key_env", "key_file", "prices", "simulated",
              "description", "sim_profile", "always_follow_injections", "params", "keep_headers",
              "expect_model", "stall_seconds", "allow_http", "stream"}
# Request fields a tier's ``params`` may not set: the runtime owns them (they are recorded
# as the run's settings and costed from), or they change the protocol (streaming, n > 1).
RESERVED_PARAMS = frozenset({"model", "messages", "temperature", "seed", "response_format", "stream",
                             "stream_options", "n", "max_completion_tokens", "tools", "tool_choice",
                             "functions", "function_call"})
DEFAULT_STALL_SECONDS = 120
_HEADER_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")


@dataclass(frozen=True)
class Tier:
    """One tier: a name the experiments use, and what it maps to.

    ``sim_profile`` names the simulator profile (default: the tier name);
    ``always_follow_injections`` is a simulator knob for the reliability suite.
    ``stream`` makes every call a streamed one; a stream that sends nothing for
    ``stall_seconds`` is cut (and the call retried while the run has time).
    """

    name: str
    provider: str
    model: str
    base_url: str | None
    key_env: str | None
    prices: Prices
    simulated: bool = False
    key_file: str | None = None
    description: str = ""
    sim_profile: str | None = None
    always_follow_injections: bool = False
    allow_http: bool = False       # the catalog allows sending the key over plain HTTP to a remote host
    key_url: str | None = None     # the base_url in force in the catalog file that named the key source
    params: Mapping = field(default_factory=dict, hash=False)
    keep_headers: tuple[str, ...] = ()
    expect_model: str | None = None
    stall_seconds: float = DEFAULT_STALL_SECONDS
    stream: bool = False  # stream every call; a stream silent for stall_seconds is cut and retried

    @property
    def max_tokens(self) -> int | None:
        """The tier's own ``max_tokens`` from ``params`` (overrides the run setting)."""
        return self.params.get("max_tokens")

    def prices_dict(self) -> dict:
        """The ``prices`` object of a ``run.start`` record."""
        return self.prices.to_dict()


@dataclass(frozen=True)
class Catalog:
    """A loaded catalog. ``tiers`` keeps file order; ``order`` is the default ladder
    (cheapest first); ``digest`` is ``sha256:`` of ``source_bytes``."""

    name: str
    tiers: dict[str, Tier]
    digest: str
    source_bytes: bytes
    order: tuple[str, ...] = ()
    description: str = ""
    path: Path | None = None
    base: "Catalog | None" = field(default=None, repr=False)

    def tier(self, name: str) -> Tier:
        """The tier called ``name``. Raises ``ProviderConfigError`` listing the tiers."""
        try:
            return self.tiers[name]
        except KeyError:
            raise ProviderConfigError(f"catalog {self.name!r} has no tier {name!r} "
                                      f"(tiers: {', '.join(self.tiers)})") from None

    @property
    def ladder(self) -> tuple[str, ...]:
        """The tiers of the default ladder, cheapest first."""
        return self.order or tuple(self.tiers)

    @property
    def simulated(self) -> bool:
        return all(t.simulated for t in self.tiers.values())

    def require_prices(self, tiers: list[str] | tuple[str, ...] | None = None) -> None:
        """Refuse a costed run on unknown prices. Raises ``ProviderConfigError`` naming
        the catalog, tier and price field that must be set first."""
        for name in (tiers if tiers is not None else list(self.tiers)):
            t = self.tier(name)
            if t.prices.unknown:
                fields = ", ".join(f for f in PRICE_FIELDS if f in t.prices.unknown)
                where = (f"in {self.path.name} (tier {name}'s prices)" if self.base is not None and self.path
                         else f"in your own catalog file with extends = {self.name!r}")
                raise ProviderConfigError(
                    f"catalog {self.name!r}, tier {name!r}: price {fields} is \"unknown\"; set it "
                    f"(USD per 1M tokens) {where} before a costed run; BenchClaw never guesses a price")

    def ref(self) -> dict:
        """The ``catalog`` object of a ``run.start`` record."""
        out: dict = {"name": self.name, "digest": self.digest}
        if self.base is not None:
            out["extends"] = self.base.ref()
        return out

    def files(self) -> dict[str, bytes]:
        """Every file this catalog was built from, by ``<name>.toml`` (for bundles)."""
        out = {} if self.base is None else self.base.files()
        out[f"{self.name}.toml"] = self.source_bytes
        return out


def parse_catalog(data: bytes, where: str, *, path: Path | None = None,
                  resolve_base: Callable[[str], Catalog] | None = None) -> Catalog:
    """Parse catalog bytes. ``resolve_base`` returns the catalog an ``extends`` names
    (``providers.catalog`` loads it from disk, the verifier from the bundle). Raises
    ``FormatError`` naming ``where`` and the field, also when the catalog ``extends`` another
    and no ``resolve_base`` is given."""
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise FormatError(f"{where}: not a valid TOML catalog: {e}") from None
    _check_top(doc, where)
    base = None
    if "extends" in doc:
        if resolve_base is None:
            raise FormatError(f"{where}: extends {doc['extends']!r}, and nothing resolves a base catalog here")
        base = resolve_base(doc["extends"])
    tiers = _parse_tiers(doc.get("tiers", {}), where, base, doc.get("simulated", False),
                         path.parent if path is not None else None)
    order = _parse_order(doc, base, tiers, where)
    return Catalog(name=doc["name"], tiers=tiers, digest="sha256:" + hashlib.sha256(data).hexdigest(),
                   source_bytes=data, order=order, description=doc.get("description", ""), path=path,
                   base=base)


def _check_top(doc: Mapping, where: str) -> None:
    if doc.get("v") != CATALOG_VERSION:
        raise FormatError(f"{where}: v must be {CATALOG_VERSION}, got {doc.get('v')!r}")
    extra = sorted(set(doc) - _TOP_KEYS)
    if extra:
        raise FormatError(f"{where}: unknown key(s) {', '.join(extra)}")
    if not isinstance(doc.get("name"), str) or not _NAME_RE.match(doc["name"]):
        raise FormatError(f"{where}: name must be a lower-case identifier, got {doc.get('name')!r}")
    if "extends" in doc and not isinstance(doc["extends"], str):
        raise FormatError(f"{where}: extends must be a catalog name or path")
    if not isinstance(doc.get("tiers", {}), dict) or (not doc.get("tiers") and "extends" not in doc):
        raise FormatError(f"{where}: [tiers] must define at least one tier")
    if not isinstance(doc.get("simulated", False), bool):
        raise FormatError(f"{where}: simulated must be true or false")


def _parse_order(doc: Mapping, base: Catalog | None, tiers: dict[str, Tier], where: str) -> tuple[str, ...]:
    order = doc.get("order", list(base.order) if base is not None else list(tiers))
    if not isinstance(order, list) or not all(isinstance(o, str) for o in order):
        raise FormatError(f"{where}: order must be a list of tier names")
    missing = [o for o in order if o not in tiers]
    if missing:
        raise FormatError(f"{where}: order names unknown tier(s) {', '.join(missing)}")
    return tuple(order)


def _parse_tiers(raw: Mapping, where: str, base: Catalog | None, simulated_default: bool,
                 folder: Path | None = None) -> dict[str, Tier]:
    tiers = dict(base.tiers) if base is not None else {}
    for name, spec in raw.items():
        w = f"{where}: tiers.{name}"
        if not _NAME_RE.match(name):
            raise FormatError(f"{w}: a tier name must be a lower-case identifier")
        if not isinstance(spec, dict):
            raise FormatError(f"{w}: expected a table")
        extra = sorted(set(spec) - _TIER_KEYS)
        if extra:
            raise FormatError(f"{w}: unknown key(s) {', '.join(extra)}")
        if name in tiers:
            tiers[name] = _override_tier(tiers[name], spec, w, folder)
        else:
            tiers[name] = _new_tier(name, spec, w, simulated_default, folder)
    return tiers


def _str_field(spec: Mapping, key: str, w: str, required: bool) -> str | None:
    v = spec.get(key)
    if v is None:
        if required:
            raise FormatError(f"{w}.{key}: missing")
        return None
    if not isinstance(v, str) or not v:
        raise FormatError(f"{w}.{key}: expected a non-empty string")
    return v


def _bool_field(spec: Mapping, key: str, w: str, default: bool) -> bool:
    v = spec.get(key, default)
    if not isinstance(v, bool):
        raise FormatError(f"{w}.{key}: expected true or false")
    return v


def _new_tier(name: str, spec: Mapping, w: str, simulated_default: bool, folder: Path | None = None) -> Tier:
    provider = _str_field(spec, "provider", w, True)
    if provider not in KNOWN_PROVIDERS:
        raise FormatError(f"{w}.provider: {provider!r} is not one of {', '.join(KNOWN_PROVIDERS)}")
    if "prices" not in spec:
        raise FormatError(f"{w}.prices: missing (write \"unknown\" for a price you do not know)")
    tier = Tier(name=name, provider=provider, model=_str_field(spec, "model", w, True),
                base_url=None, key_env=None, prices=Prices.from_dict(spec["prices"], f"{w}.prices"),
                simulated=simulated_default or provider == "sim")
    return _override_tier(tier, {k: v for k, v in spec.items() if k not in ("provider", "prices")}, w, folder)


def _override_tier(tier: Tier, spec: Mapping, w: str, folder: Path | None = None) -> Tier:
    changes: dict = {}
    for key in ("provider", "model", "base_url", "key_env", "key_file", "description", "sim_profile",
                "expect_model"):
        if key in spec:
            changes[key] = _str_field(spec, key, w, False)
    if "params" in spec:
        changes["params"] = _params(spec["params"], f"{w}.params")
    if "keep_headers" in spec:
        changes["keep_headers"] = _headers(spec["keep_headers"], f"{w}.keep_headers")
    if "stall_seconds" in spec:
        v = spec["stall_seconds"]
        if type(v) not in (int, float) or not 0 < v <= 86400:
            raise FormatError(f"{w}.stall_seconds: expected a number of seconds in (0, 86400]")
        changes["stall_seconds"] = v
    for key in ("simulated", "always_follow_injections", "allow_http", "stream"):
        if key in spec:
            changes[key] = _bool_field(spec, key, w, False)
    if changes.get("key_file") and folder is not None and not changes["key_file"].startswith(("/", "~")):
        changes["key_file"] = str(folder / changes["key_file"])  # relative to the catalog, as extends is
    if "key_env" in spec or "key_file" in spec:  # the key source is bound to this file's base_url
        changes["key_url"] = changes.get("base_url", tier.base_url)
    if "prices" in spec:
        merged = {**tier.prices.to_dict(), **_table(spec["prices"], f"{w}.prices")}
        changes["prices"] = Prices.from_dict(merged, f"{w}.prices")
    tier = replace(tier, **changes)
    _validate_tier(tier, w)
    return tier


def _params(v, w: str) -> dict:
    """A tier's request parameters: a table of JSON-able values, none the runtime owns;
    ``max_tokens`` a positive integer, ``extra_body`` a table."""
    table = _table(v, w)
    for key, value in table.items():
        if key in RESERVED_PARAMS:
            raise FormatError(f"{w}.{key}: set by BenchClaw for every call, not per tier")
        _json_value(value, f"{w}.{key}")
    mt = table.get("max_tokens")
    if "max_tokens" in table and (type(mt) is not int or mt < 1):
        raise FormatError(f"{w}.max_tokens: expected a positive integer")
    if "extra_body" in table:
        bad = sorted(set(_table(table["extra_body"], f"{w}.extra_body")) & (RESERVED_PARAMS | {"max_tokens"}))
        if bad:
            raise FormatError(f"{w}.extra_body.{bad[0]}: set by BenchClaw (or by params.max_tokens), not here")
    return table


def _json_value(v, w: str, depth: int = 0) -> None:
    if depth > 16:
        raise FormatError(f"{w}: nested too deeply")
    if isinstance(v, float) and v != v or v in (float("inf"), float("-inf")):
        raise FormatError(f"{w}: not a finite number")
    if isinstance(v, dict):
        for k, x in v.items():
            _json_value(x, f"{w}.{k}", depth + 1)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _json_value(x, f"{w}[{i}]", depth + 1)
    elif not isinstance(v, (str, int, float, bool)):
        raise FormatError(f"{w}: expected a string, number, boolean, array or table")


def _headers(v, w: str) -> tuple[str, ...]:
    if not isinstance(v, list) or len(v) > 16 or not all(isinstance(h, str) and _HEADER_RE.match(h) for h in v):
        raise FormatError(f"{w}: expected a list of at most 16 HTTP header names")
    return tuple(h.lower() for h in v)


def _table(v, w: str) -> dict:
    if not isinstance(v, dict):
        raise FormatError(f"{w}: expected a table")
    return v


def _validate_tier(tier: Tier, w: str) -> None:
    if tier.provider not in KNOWN_PROVIDERS:
        raise FormatError(f"{w}.provider: {tier.provider!r} is not one of {', '.join(KNOWN_PROVIDERS)}")
    if tier.provider == "openai":
        if not tier.base_url or not tier.base_url.startswith(("http://", "https://")):
            raise FormatError(f"{w}.base_url: an openai tier needs an http(s) base URL")
    if tier.provider == "sim" and not tier.simulated:
        raise FormatError(f"{w}.simulated: a sim tier is always simulated")
    if tier.key_env is not None and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", tier.key_env):
        raise FormatError(f"{w}.key_env: {tier.key_env!r} is not an environment variable name")
