"""Acceptance checks: pure functions of (artifact bytes, check spec, held-out cases).

The offline verifier re-runs these on the artifacts stored in a bundle, so this package
imports only the standard library and ``benchclaw.formats.jsonio``: no clock, no network, no
randomness. Check types live in one registry (``CHECK_TYPES``); adding a type is one
entry. ``run_checks`` never raises for any artifact: a check that finds a problem, or
hits something unexpected, yields a failed ``CheckResult`` whose detail says which item
failed (which quote, which row, which case: expected vs got).

A spec with a ``heldout = "<file>"`` param is a held-out check: the named file of the
task's ``heldout/`` folder (a JSON object, or TOML table when it ends in ``.toml``) is
merged over its params, so the answer key stays out of everything the agent can see.
"""

from __future__ import annotations

import tomllib
from typing import Mapping

from ..formats import jsonio
from ._base import CheckResult, CheckSpec, CheckType, Fail
from .api import TYPES as _API
from .cents import TYPES as _CENTS
from .digest import task_digest
from .generic import TYPES as _GENERIC
from .pricing import TYPES as _PRICING
from .quotes import TYPES as _QUOTES
from .sql import TYPES as _SQL

__all__ = ["CheckSpec", "CheckResult", "CheckType", "CHECK_TYPES", "run_checks", "run_check",
           "resolve_params", "validate_spec", "task_digest"]

CHECK_TYPES: dict[str, CheckType] = {**_GENERIC, **_QUOTES, **_CENTS, **_PRICING, **_SQL, **_API}
MAX_HELDOUT_BYTES = 1 << 20


def resolve_params(spec: CheckSpec, heldout: Mapping[str, bytes]) -> dict:
    """The spec's params with its held-out file merged in; raises ValueError naming the
    held-out file when it is missing or not a JSON object / TOML table."""
    params = dict(spec.params)
    name = params.get("heldout")
    if name is None:
        return params
    if not isinstance(name, str) or name not in heldout:
        raise ValueError(f"field 'heldout': held-out file {name!r} not found")
    data = heldout[name]
    if len(data) > MAX_HELDOUT_BYTES:
        raise ValueError(f"heldout/{name}: larger than {MAX_HELDOUT_BYTES} bytes")
    try:
        loaded = tomllib.loads(data.decode("utf-8")) if name.endswith(".toml") else jsonio.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"heldout/{name}: cannot be parsed ({e})") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"heldout/{name}: must hold an object of check params")
    params.update(loaded)
    return params


def validate_spec(spec: CheckSpec, heldout: Mapping[str, bytes]) -> None:
    """Raise ValueError("field 'x': ...") if ``spec`` can never run: unknown type,
    unknown or ill-typed params, a missing held-out file."""
    ctype = CHECK_TYPES.get(spec.type)
    if ctype is None:
        raise ValueError(f"field 'type': unknown check type {spec.type!r} "
                         f"(known: {', '.join(sorted(CHECK_TYPES))})")
    unknown = sorted(set(spec.params) - ctype.keys - {"heldout"})
    if unknown:
        raise ValueError(f"field {unknown[0]!r}: not a parameter of check type {spec.type!r} "
                         f"(known: {', '.join(sorted(ctype.keys))})")
    params = resolve_params(spec, heldout)
    ctype.validate(params)


def run_check(spec: CheckSpec, files: Mapping[str, bytes], heldout: Mapping[str, bytes]) -> CheckResult:
    """Run one check. Never raises: any problem is a failed result with a detail."""
    ctype = CHECK_TYPES.get(spec.type)
    try:
        if ctype is None:
            raise Fail(f"unknown check type {spec.type!r}")
        try:
            params = resolve_params(spec, heldout)
        except ValueError as e:
            raise Fail(f"bad check spec: {e}") from None
        passed, detail = True, ctype.run(params, files)
    except Fail as e:
        passed, detail = False, str(e)
    except (RecursionError, MemoryError) as e:
        passed, detail = False, f"artifact too complex to check ({type(e).__name__})"
    except Exception as e:  # a bug in a check must not pass an artifact, nor crash a verifier
        passed, detail = False, f"check error: {type(e).__name__}: {e}"[:300]
    return CheckResult(spec.id, spec.type, spec.gate, spec.heldout, passed, detail)


def run_checks(specs: list[CheckSpec], files: Mapping[str, bytes], heldout: Mapping[str, bytes], *,
               include_heldout: bool) -> list[CheckResult]:
    """Run ``specs`` in order on the workspace ``files``; held-out checks only when
    ``include_heldout``. Never raises for any artifact."""
    return [run_check(s, files, heldout) for s in specs if include_heldout or not s.heldout]
