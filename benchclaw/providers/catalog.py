"""Tier catalogs: which model and endpoint a tier name means, and what it costs.

A catalog is a TOML file (format in docs/FORMAT.md, "Catalogs"). The ones that ship live
in ``benchclaw/data/catalogs/``; a user passes a path to their own, which may ``extends``
a shipped one to add tiers or override fields (a price the shipped file marks
``"unknown"``, a base URL). An experiment switches between the simulator and a real
endpoint by naming another catalog: the tier names stay the same.

The catalog's digest is the SHA-256 of its exact file bytes, recorded in every run, so a
run can be tied to the prices it was costed with; an extending catalog records its base's
name and digest too. Prices that are not known are written ``"unknown"`` and a costed run
refuses to start (``Catalog.require_prices``) rather than invent them.

The file format itself (TOML bytes to a ``Catalog``) is the pure ``benchclaw.formats.catalog``,
shared with the offline verifier; this module finds catalog files (shipped or by path),
follows ``extends`` on disk, and re-exports the format's names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..formats.catalog import CATALOG_VERSION, KNOWN_PROVIDERS, MAX_EXTENDS, Catalog, Tier
from ..formats.catalog import parse_catalog as _parse_catalog
from ..errors import FormatError, InputError
from ..paths import package_data_dir

__all__ = ["Tier", "Catalog", "load_catalog", "parse_catalog", "shipped_catalogs", "catalogs_dir",
           "KNOWN_PROVIDERS", "CATALOG_VERSION", "MAX_EXTENDS"]


# ---------------------------------------------------------------------------- loading

def catalogs_dir() -> Path:
    return package_data_dir() / "catalogs"


def shipped_catalogs() -> list[str]:
    """Names of the catalogs that ship with BenchClaw."""
    return sorted(p.stem for p in catalogs_dir().glob("*.toml"))


def _is_path(name_or_path: str | Path) -> bool:
    return isinstance(name_or_path, Path) or str(name_or_path).endswith(".toml") or "/" in str(name_or_path)


def load_catalog(name_or_path: str | Path, *, _chain: tuple[str, ...] = ()) -> Catalog:
    """Load a shipped catalog by name (``"sim"``, ``"nebius-nemotron"``) or a catalog file
    by path. Raises ``InputError`` when neither exists, ``FormatError`` naming the file and
    field when it is invalid (or when ``extends`` goes round in a cycle)."""
    path = Path(name_or_path)
    if not _is_path(name_or_path):
        path = catalogs_dir() / f"{name_or_path}.toml"
        if not path.is_file():
            raise InputError(f"no catalog named {name_or_path!r} (shipped: {', '.join(shipped_catalogs())}; "
                             "or give a path to a .toml file)")
    key = str(path.resolve())
    if key in _chain or len(_chain) >= MAX_EXTENDS:
        raise FormatError(f"{path}: the extends chain {' -> '.join(_chain + (key,))} goes round in a cycle "
                          f"or is longer than {MAX_EXTENDS}")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read catalog ({e.strerror or e})") from None

    def resolve(base: str) -> Catalog:
        target = path.parent / base if _is_path(base) and not Path(base).is_absolute() else base
        return load_catalog(target, _chain=_chain + (key,))

    return parse_catalog(data, str(path), path=path, resolve_base=resolve)


def parse_catalog(data: bytes, where: str, *, path: Path | None = None,
                  resolve_base: Callable[[str], Catalog] | None = None) -> Catalog:
    """Parse catalog bytes. ``resolve_base`` loads the catalog an ``extends`` names
    (default: ``load_catalog``; the verifier passes its own). Raises ``FormatError``."""
    return _parse_catalog(data, where, path=path, resolve_base=resolve_base or load_catalog)
