"""Pre-registration and deviations: the journal records a spec's digest before any call.

Why it is built this way: the journal is the only authority on what was registered and
when. ``prereg`` stores the spec's exact bytes as a blob and appends a ``prereg`` record
with their SHA-256; ``deviate`` appends a ``deviation`` record (new digest + reason)
*before* the runs it affects; ``require_registered`` refuses to run a spec whose bytes do
not hash to the digest in force (the last ``prereg``/``deviation`` in journal order). Each
step reads the journal afresh, so there is no cached state that could disagree with it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, RegistrationError, UsageError
from ..formats.spec import Spec, load_spec, parse_spec, spec_digest
from ..evidence.store import Store
from ..verify.experiment import registration_digest

__all__ = ["Registration", "prereg", "deviate", "registration", "require_registered", "locate_spec",
           "registered_digests"]

_REG_KINDS = ("prereg", "deviation")


@dataclass(frozen=True)
class Registration:
    """What the journal says about an experiment's spec."""

    experiment: str
    spec_path: str            # where the spec was when registered (or last deviated)
    spec_digest: str          # the digest in force: the last prereg/deviation
    registered_at: str        # time of the prereg record
    history: tuple[tuple[str, str, str], ...]  # (kind, at, digest) in journal order
    fresh: bool = False       # True when this call wrote the prereg record
    digest: str = ""          # the registration digest of the prereg record (FORMAT.md §8)


def registration(store: Store, experiment: str) -> Registration | None:
    """The experiment's registration as its journal holds it, or None when unregistered.
    Raises IntegrityError/FormatError when a journal is damaged."""
    history, path, reg_at, digest = [], None, None, ""
    for entry in store.read_journal(experiment):
        if entry.kind not in _REG_KINDS:
            continue
        body = entry.body
        if entry.kind == "prereg" and reg_at is None:
            reg_at, digest = entry.record.at, registration_digest(body)
        history.append((entry.kind, entry.record.at, body.get("spec_digest")))
        path = body.get("spec_path") or path
    if reg_at is None:
        return None
    return Registration(experiment, path or "", history[-1][2], reg_at, tuple(history), digest=digest)


def registered_digests(store: Store, experiment: str) -> list[tuple[str, str]]:
    """Every (time, digest) registered by prereg or deviation, in journal order."""
    reg = registration(store, experiment)
    return [(at, d) for _, at, d in reg.history] if reg else []


def prereg(store: Store, path: Path | str, *, backends=None) -> Registration:
    """Register a spec: validate it, store its bytes, record its digest and the time.

    Registering the same bytes again is a no-op (returns the registration). Raises
    FormatError for an invalid spec, RegistrationError when the experiment is already
    registered with other bytes (a change goes through ``deviate``).
    """
    spec = load_spec(path)
    reg = registration(store, spec.id)
    if reg is not None:
        if reg.spec_digest == spec.digest:
            return reg
        raise RegistrationError(
            f"experiment {spec.id} is already registered with {reg.spec_digest}; {path} now hashes to "
            f"{spec.digest}. Record the change first: benchclaw deviate {spec.id} --reason \"...\"")
    pinned = _record_pins(store, pins(spec, backends))
    store.put_blob(spec.source)
    store.journal(spec.id).append("prereg", {"experiment": spec.id, "spec_path": recorded_path(store, path),
                                             "spec_digest": spec.digest, **pinned})
    reg = registration(store, spec.id)
    return Registration(reg.experiment, reg.spec_path, reg.spec_digest, reg.registered_at, reg.history,
                        fresh=True, digest=reg.digest)


def pins(spec: Spec, backends=None, *, sim: bool = True) -> dict:
    """What a registration pins besides the spec's bytes: the catalog the grid resolves to
    (its ``ref``: name, digest of its exact bytes, prices included, and what it extends)
    and every task version the grid's patterns resolve to (id, version, digest), resolved
    exactly as ``benchclaw run`` resolves them, so prereg refuses what run would refuse
    (a pattern matching nothing, an unknown tier or price, a catalog path outside the
    project). ``backends``: the runner's parts (default: the built-in tasks and shipped
    catalogs, as ``benchclaw run`` uses). ``sim``: also pin the simulator profiles file
    (``sim_profiles``), which asks ``backends`` for a provider per simulated tier.
    Raises FormatError/InputError/ProviderConfigError."""
    from .grid import resolve_tasks
    from .executor import default_backends

    b = backends or default_backends()

    ref = spec.catalog_ref()
    if ref != spec.grid.catalog:  # a path: it must stay inside the spec's project
        project = spec.path.resolve().parent.parent
        if not Path(ref).resolve().is_relative_to(project):
            raise InputError(f"{spec.path}: grid.catalog {spec.grid.catalog!r} resolves to {ref}, "
                             f"outside the project {project}")
    cat = b.catalog(ref)
    for t in spec.grid.tiers:
        cat.tier(t)
    if hasattr(cat, "require_prices"):
        cat.require_prices(list(spec.grid.tiers))
    chosen = resolve_tasks(spec.grid.tasks, b.tasks(), str(spec.path))
    sim = _sim_profiles(cat, spec.grid.tiers, b) if sim else None
    return {"catalog": cat.ref(),
            "tasks": [{"id": t.id, "version": t.version, "digest": t.digest} for t in chosen],
            **({"sim_profiles": "sha256:" + hashlib.sha256(sim).hexdigest()} if sim is not None else {}),
            "_blobs": _pinned_blobs(cat, chosen) + ([sim] if sim is not None else [])}


def _sim_profiles(cat, tiers, b) -> bytes | None:
    """The bytes of the simulator profiles file the grid's in-process ``sim`` tiers follow
    (asked of the provider ``benchclaw run`` would build, as each run records it in
    ``run.start.sim``), or None when no tier of the grid is simulated in process. The
    registration pins their digest: the reasoning and cache numbers of every simulated
    reply follow from them (FORMAT.md §6, "Simulated usage")."""
    found = set()
    for name in tiers:
        tier = cat.tier(name)
        if getattr(tier, "provider", None) != "sim":
            continue
        rules = getattr(b.provider(tier), "usage_rules", None)
        got = rules(tier.model) if callable(rules) else None
        if got is not None:
            found.add(got[1])
    if len(found) > 1:  # one backend serves every tier of a grid, so this is a broken setup
        raise InputError("the grid's simulated tiers follow different simulator profiles files")
    return next(iter(found), None)


def _pinned_blobs(cat, tasks) -> list[bytes]:
    """The bytes every pinned digest names (catalog files, task listings and files): a
    journal record, like a run record, names only stored blobs, so a bundle can carry
    them even for a task no run reached (a grid stopped early)."""
    from ..checks.digest import task_listing

    out = list(cat.files().values()) if hasattr(cat, "files") else []
    for t in tasks:
        if hasattr(t, "files"):
            files = t.files()
            out.append(task_listing(files))
            out.extend(files.values())
    return out


def _record_pins(store: Store, pinned: dict) -> dict:
    """Store the pinned blobs; the record's fields without them."""
    for data in pinned.get("_blobs", ()):
        store.put_blob(data)
    return {k: v for k, v in pinned.items() if k != "_blobs"}


def deviate(store: Store, experiment: str, reason: str, *, spec_path: Path | str | None = None,
            backends=None) -> Registration:
    """Record a deviation (the spec's new digest and the reason) before the runs it affects.

    Raises RegistrationError when the experiment is unregistered or the spec names another
    experiment, UsageError for an empty reason, FormatError for an invalid spec.
    """
    if not reason or not reason.strip():
        raise UsageError("a deviation needs a reason (--reason \"...\")")
    reg = _require(store, experiment)
    path = locate_spec(store, reg, spec_path)
    spec = load_spec(path)
    if spec.id != experiment:
        raise RegistrationError(f"{path}: spec id is {spec.id!r}, not {experiment!r}")
    pinned = _record_pins(store, pins(spec, backends))
    store.put_blob(spec.source)
    with store.experiment_lock(experiment):  # never under a grid that is running the old spec
        store.journal(experiment).append("deviation", {
            "experiment": experiment, "reason": reason.strip(), "spec_digest": spec.digest,
            "previous_digest": reg.spec_digest,
            "spec_path": recorded_path(store, spec_path) if spec_path else reg.spec_path, **pinned})
    return registration(store, experiment)


def recorded_path(store: Store, path: Path | str) -> str:
    """The spec path a journal records: relative to the project folder (the runs directory's
    parent) when the spec lies in it, else only its file name; never an absolute path, so no
    user or host name reaches published evidence (``locate_spec`` finds it again)."""
    p = Path(path).resolve()
    try:
        return p.relative_to(store.root.resolve().parent).as_posix()
    except ValueError:
        return p.name


def locate_spec(store: Store, reg: Registration, override: Path | str | None = None) -> Path:
    """The spec file: ``override``, else the path recorded at registration (as given, then
    relative to the runs directory's parent). Raises RegistrationError when not found."""
    if override is not None:
        p = Path(override)
        if not p.is_file():
            raise InputError(f"{p}: no such spec file")
        return p
    recorded = Path(reg.spec_path)
    for cand in (recorded, store.root.resolve().parent / recorded):
        if cand.is_file():
            return cand
    raise RegistrationError(f"cannot find the spec of {reg.experiment} at {reg.spec_path!r} (the path "
                            "recorded at registration); pass --spec PATH")


def require_registered(store: Store, experiment: str, spec_path: Path | str | None = None, *,
                       backends=None) -> Spec:
    """The spec to run, only if its bytes hash to the digest in force and the grid still
    resolves to the catalog and task versions the registration in force pinned.

    Raises RegistrationError when the experiment is unregistered, the spec changed since
    registration (or the last deviation), it names another experiment, or the catalog or
    a task version changed since (a deviation must record it first).
    """
    reg = _require(store, experiment)
    path = locate_spec(store, reg, spec_path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read the spec ({e.strerror or e})") from None
    digest = spec_digest(data)
    if digest != reg.spec_digest:
        raise RegistrationError(
            f"{path} changed since registration: the journal has {reg.spec_digest} "
            f"(last registered {reg.history[-1][1]}), the file now hashes to {digest}. Restore the "
            f"registered file, or record the change first: benchclaw deviate {experiment} --reason \"...\"")
    spec = parse_spec(data, path)
    if spec.id != experiment:
        raise RegistrationError(f"{path}: spec id is {spec.id!r}, not {experiment!r}")
    _require_pins(store, spec, backends)
    return spec


def _require_pins(store: Store, spec: Spec, backends) -> None:
    """What the registration in force pinned (journals written before pins existed pin
    nothing) must be what the grid resolves to now."""
    body = None
    for entry in store.read_journal(spec.id):
        if entry.kind in _REG_KINDS:
            body = entry.body
    if body is None or ("catalog" not in body and "tasks" not in body):
        return
    # Not the simulator profiles: that would build providers in the driver before the grid
    # starts (the verifier holds every run to the pinned file: FORMAT.md §8).
    now = pins(spec, backends, sim=False)
    now.pop("_blobs", None)
    for key, what in (("catalog", "the catalog (its prices)"), ("tasks", "the task versions")):
        if key in body and body[key] != now[key]:
            raise RegistrationError(
                f"{spec.id}: {what} changed since registration: registered {_brief(body[key])}, the grid "
                f"now resolves to {_brief(now[key])}. Record the change first: benchclaw deviate "
                f"{spec.id} --reason \"...\"")


def _brief(value) -> str:
    if isinstance(value, dict):
        return f"{value.get('name')} {value.get('digest')}"
    if isinstance(value, list):
        return ", ".join(f"{t.get('id')}@{t.get('version')}" for t in value)[:200] or "none"
    return repr(value)


def _require(store: Store, experiment: str) -> Registration:
    reg = registration(store, experiment)
    if reg is None:
        raise RegistrationError(f"experiment {experiment} is not registered in {store.root}; register it "
                                f"first: benchclaw prereg experiments/{experiment}.toml")
    return reg
