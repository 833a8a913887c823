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

Because a check is a pure function of its spec, the workspace files and the held-out files,
its verdict can be remembered: ``CheckMemo`` keys each result by the digest of exactly those
inputs (the held-out files only for a held-out check, the only kind that reads them), so a
grid where many runs leave the same artifacts (every run of a cell starts from the same
inputs) judges each distinct workspace once. It is bounded and opt-in (the agent
passes one; the verifier re-runs every check), and the result is still recorded per run.
"""

from __future__ import annotations

import hashlib
import threading
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
           "resolve_params", "validate_spec", "task_digest", "CheckMemo"]

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
    return _judge(spec, files, heldout)[0]


def _judge(spec: CheckSpec, files: Mapping[str, bytes],
           heldout: Mapping[str, bytes]) -> tuple[CheckResult, bool]:
    """``run_check``'s result, and whether it follows from the inputs alone (not when the
    check ran out of stack or memory, or met an unexpected error: those may not recur)."""
    ctype = CHECK_TYPES.get(spec.type)
    pure = True
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
        passed, detail, pure = False, f"artifact too complex to check ({type(e).__name__})", False
    except Exception as e:  # a bug in a check must not pass an artifact, nor crash a verifier
        passed, detail, pure = False, f"check error: {type(e).__name__}: {e}"[:300], False
    return CheckResult(spec.id, spec.type, spec.gate, spec.heldout, passed, detail), pure


def run_checks(specs: list[CheckSpec], files: Mapping[str, bytes], heldout: Mapping[str, bytes], *,
               include_heldout: bool, memo: "CheckMemo | None" = None) -> list[CheckResult]:
    """Run ``specs`` in order on the workspace ``files``; held-out checks only when
    ``include_heldout``; with ``memo``, a verdict already reached on the same inputs is
    reused. Never raises for any artifact."""
    chosen = [s for s in specs if include_heldout or not s.heldout]
    if memo is None or not chosen:
        return [run_check(s, files, heldout) for s in chosen]
    # A check reads the held-out files only when it is a held-out check (``resolve_params``):
    # the others' verdicts are keyed by the workspace alone, so a gate check judged at the
    # agent's ``check`` action is not judged again at the end on the same workspace.
    seen = _digest_files(files)
    with_heldout = seen + _digest_files(heldout) if any(s.heldout for s in chosen) else b""
    return [memo.run(s, files, heldout, with_heldout if s.heldout else seen) for s in chosen]


def _digest_files(files: Mapping[str, bytes]) -> bytes:
    """One digest of a set of files: every path with the SHA-256 of its bytes, sorted."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(hashlib.sha256(path.encode("utf-8", "surrogatepass")).digest())
        h.update(hashlib.sha256(files[path]).digest())
    return h.digest()


class CheckMemo:
    """Verdicts by the digest of everything a check reads (its spec, the workspace files,
    the held-out files), at most ``size`` of them (the oldest is dropped first). Sound
    because checks are pure (module docstring); thread-safe."""

    def __init__(self, size: int = 4096):
        self.size = size
        self._seen: dict[bytes, CheckResult] = {}
        self._lock = threading.Lock()

    def run(self, spec: CheckSpec, files: Mapping[str, bytes], heldout: Mapping[str, bytes],
            inputs: bytes) -> CheckResult:
        """``run_check(spec, files, heldout)``; ``inputs`` is the digest of what the check
        reads: the files, and the held-out files too for a held-out check (``run_checks``
        computes them once for all its specs)."""
        try:
            key = hashlib.sha256(jsonio.dumps(spec.to_dict()) + inputs).digest()
        except (TypeError, ValueError):  # a param JSON cannot hold (a TOML date): not remembered
            return run_check(spec, files, heldout)
        with self._lock:
            known = self._seen.get(key)
        if known is not None:
            return known
        result, pure = _judge(spec, files, heldout)
        if not pure:
            return result
        with self._lock:
            if len(self._seen) >= self.size:
                del self._seen[next(iter(self._seen))]
            self._seen[key] = result
        return result
