"""Task fixtures: load a versioned task folder, validate it, and digest its bytes.

A task version is a folder ``tasks/<family>-<name>/v<N>/`` holding ``task.toml``,
``checks.toml``, ``inputs/``, ``heldout/`` and ``reference/`` (docs/FORMAT.md, "Tasks").
Everything is validated when the task is loaded, so an object that exists is a task that
can run: every problem becomes one ``FormatError`` naming the file and field. Loading
works from a folder or from a mapping of bytes (``Task.from_files``), because the
verifier reads task versions out of a zip without extracting it; both paths go through
the same code and yield the same digest (``benchclaw.checks.digest.task_digest``).

Permissions are glob lists over workspace paths; ``path_allowed`` is the one matcher the
runtime and the loader share, and ``match_lure`` tells the runtime which declared lure a
denied action followed.
"""

from __future__ import annotations

import functools
import posixpath
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from . import CheckResult, CheckSpec, run_checks, validate_spec
from .digest import task_digest
from .quotes import parse_line_spec
from ..errors import FormatError, InputError
from ..formats.names import entry_name_fold, entry_name_problem, terminal_safe
from ..paths import builtin_tasks_dir

__all__ = ["Task", "load_task", "find_tasks", "get_task", "task_digest", "path_allowed",
           "match_lure", "render_workspace_section", "workspace_with", "check_artifacts",
           "LURE_KINDS", "FAMILIES"]

LURE_KINDS = ("read", "write", "overwrite", "action", "quote", "discount", "secret")
FAMILIES = ("quotes", "cents", "pricing", "sql", "api")
MAX_TASK_FILE = 4 << 20
_ID = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$")
_TASK_KEYS = {"v", "id", "version", "family", "title", "prompt", "readable", "writable",
              "outputs", "overwrite_inputs", "limits", "lures"}


@dataclass(frozen=True)
class Task:
    """One validated task version. ``inputs``/``heldout``/``reference`` map paths relative
    to their folder to bytes; ``digest`` covers every file of the version folder."""

    id: str
    version: int
    family: str
    title: str
    prompt: str
    readable: list[str]
    writable: list[str]
    outputs: list[str]
    overwrite_inputs: bool
    limits: dict
    checks: list[CheckSpec]
    inputs: dict[str, bytes]
    heldout: dict[str, bytes]
    reference: dict[str, bytes]
    lures: list[dict]
    digest: str
    folder: Path | None = None
    _files: dict[str, bytes] = field(default_factory=dict, repr=False, compare=False)

    def files(self) -> dict[str, bytes]:
        """Every file of the task version folder, by path relative to it."""
        return dict(self._files)

    @classmethod
    def from_files(cls, files: Mapping[str, bytes], where: str, folder: Path | None = None) -> "Task":
        """Build and validate a task from its files (paths relative to ``v<N>/``).
        Raises FormatError naming ``where``/file and the field at fault."""
        files = dict(files)
        _check_names(files, where)
        meta = _toml(files, "task.toml", where)
        spec = _toml(files, "checks.toml", where)
        part = {p: _under(files, p) for p in ("inputs", "heldout", "reference")}
        _check_inputs_text(part["inputs"], where)
        if not part["reference"]:
            raise FormatError(f"{where}/reference/: missing or empty (a reference solution is required)")
        kw = _task_fields(meta, set(part["inputs"]), f"{where}/task.toml")
        checks = _checks(spec, part["heldout"], f"{where}/checks.toml")
        _check_sources_protected(checks, kw["writable"], f"{where}/checks.toml")
        try:
            digest = task_digest(files)
        except ValueError as e:
            raise FormatError(f"{where}: {e}") from None
        return cls(**kw, checks=checks, **part, digest=digest, folder=folder, _files=files)


# -- reading the folder ---------------------------------------------------------------

def _check_names(files: Mapping[str, bytes], where: str) -> None:
    """Every file name must be one a bundle may hold (``names.entry_name_problem``), and no
    two may collide after case folding and Unicode normalisation (``Incident.md`` beside
    ``incident.md``): they would pass here and make the exported bundle unreadable."""
    seen: dict[str, str] = {}
    for name in sorted(files):
        problem = entry_name_problem(f"tasks/x/v1/{name}")
        if problem:
            raise FormatError(f"{where}/{terminal_safe(name, keep_newlines=False)}: file name refused "
                              f"in a bundle: {problem}")
        folded = entry_name_fold(name)
        if folded in seen:
            raise FormatError(f"{where}/{name}: differs from {seen[folded]!r} only by case or Unicode "
                              "normalisation (a bundle cannot hold both)")
        seen[folded] = name


def _toml(files: Mapping[str, bytes], name: str, where: str) -> dict:
    if name not in files:
        raise FormatError(f"{where}/{name}: missing")
    try:
        data = tomllib.loads(files[name].decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise FormatError(f"{where}/{name}: invalid TOML ({e})") from None
    if data.get("v") != 1:
        raise FormatError(f"{where}/{name}: field 'v': must be 1 (got {data.get('v')!r})")
    return data


def _under(files: Mapping[str, bytes], prefix: str) -> dict[str, bytes]:
    n = len(prefix) + 1
    return {p[n:]: b for p, b in sorted(files.items()) if p.startswith(prefix + "/")}


def _check_inputs_text(inputs: Mapping[str, bytes], where: str) -> None:
    if not inputs:
        raise FormatError(f"{where}/inputs/: missing or empty")
    for path, data in inputs.items():
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise FormatError(f"{where}/inputs/{path}: not UTF-8 text (byte {e.start})") from None
        if "\x00" in text:
            raise FormatError(f"{where}/inputs/{path}: contains a NUL byte (inputs must be text)")


def _field(meta: Mapping, key: str, typ: type, where: str, default: Any = ...) -> Any:
    if key not in meta:
        if default is ...:
            raise FormatError(f"{where}: field '{key}': required")
        return default
    value = meta[key]
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        raise FormatError(f"{where}: field '{key}': must be {typ.__name__}, got {type(value).__name__}")
    return value


def _globs(meta: Mapping, key: str, where: str) -> list[str]:
    value = _field(meta, key, list, where)
    for i, g in enumerate(value):
        if not isinstance(g, str) or not _clean_rel(g.replace("*", "x").replace("?", "x")):
            raise FormatError(f"{where}: field '{key}[{i}]': {g!r} is not a relative workspace path")
    return value


def _clean_rel(path: str) -> bool:
    return bool(path) and not path.startswith("/") and "\\" not in path and \
        all(p not in ("", ".", "..") for p in path.split("/"))


def _task_fields(meta: dict, inputs: set[str], where: str) -> dict:
    unknown = sorted(set(meta) - _TASK_KEYS)
    if unknown:
        raise FormatError(f"{where}: field '{unknown[0]}': unknown (known: {', '.join(sorted(_TASK_KEYS))})")
    tid = _field(meta, "id", str, where)
    family = _field(meta, "family", str, where)
    if not _ID.match(tid) or not tid.startswith(family + "-"):
        raise FormatError(f"{where}: field 'id': {tid!r} must be '<family>-<name>' in lowercase, "
                          f"starting with the family {family!r}")
    version = _field(meta, "version", int, where)
    if version < 1:
        raise FormatError(f"{where}: field 'version': must be >= 1")
    kw = {"id": tid, "version": version, "family": family,
          "title": _field(meta, "title", str, where), "prompt": _field(meta, "prompt", str, where),
          "readable": _globs(meta, "readable", where), "writable": _globs(meta, "writable", where),
          "outputs": _globs(meta, "outputs", where),
          "overwrite_inputs": _field(meta, "overwrite_inputs", bool, where, False),
          "limits": _limits(_field(meta, "limits", dict, where, {}), where),
          "lures": _lures(_field(meta, "lures", list, where, []), where)}
    _check_permissions(kw, inputs, where)
    return kw


def _limits(limits: dict, where: str) -> dict:
    for key, value in limits.items():
        if key not in ("turns", "seconds", "output_bytes") or not isinstance(value, int) \
                or isinstance(value, bool) or value <= 0:
            raise FormatError(f"{where}: field 'limits.{key}': must be one of turns, seconds, "
                              "output_bytes, a positive integer")
    return dict(limits)


def _lures(lures: list, where: str) -> list[dict]:
    out, seen = [], set()
    for i, lure in enumerate(lures):
        if not isinstance(lure, dict) or set(lure) != {"id", "kind", "target"} or \
                not all(isinstance(v, str) and v for v in lure.values()):
            raise FormatError(f"{where}: field 'lures[{i}]': must have exactly id, kind, target (strings)")
        if lure["kind"] not in LURE_KINDS:
            raise FormatError(f"{where}: field 'lures[{i}].kind': {lure['kind']!r} is not one of "
                              f"{', '.join(LURE_KINDS)}")
        if lure["id"] in seen:
            raise FormatError(f"{where}: field 'lures[{i}].id': {lure['id']!r} declared twice")
        seen.add(lure["id"])
        out.append(dict(lure))
    return out


def _check_permissions(kw: dict, inputs: set[str], where: str) -> None:
    for g in kw["readable"]:
        if not any(path_allowed([g], p) for p in inputs):
            raise FormatError(f"{where}: field 'readable': {g!r} matches no file in inputs/")
    for out in kw["outputs"]:
        if not path_allowed(kw["writable"], out):
            raise FormatError(f"{where}: field 'outputs': {out!r} is not writable")
    if not kw["overwrite_inputs"]:
        clash = sorted(p for p in inputs if path_allowed(kw["writable"], p))
        if clash:
            raise FormatError(f"{where}: field 'writable': covers input {clash[0]!r} "
                              "but overwrite_inputs is false")


def _checks(spec: dict, heldout: Mapping[str, bytes], where: str) -> list[CheckSpec]:
    entries = spec.get("checks")
    if not isinstance(entries, list) or not entries:
        raise FormatError(f"{where}: field 'checks': at least one [[checks]] entry is required")
    out, seen = [], set()
    for i, entry in enumerate(entries):
        at = f"{where}: checks[{i}]"
        if not isinstance(entry, dict):
            raise FormatError(f"{at}: must be a table")
        params = {k: v for k, v in entry.items() if k not in ("id", "type", "gate")}
        try:
            check = CheckSpec.from_dict({"id": entry.get("id"), "type": entry.get("type"),
                                         "gate": entry.get("gate"), "params": params})
        except ValueError as e:
            raise FormatError(f"{at}: {e}") from None
        at = f"{where}: check {check.id!r}"
        if check.id in seen:
            raise FormatError(f"{at}: field 'id': declared twice")
        if check.gate and check.heldout:
            raise FormatError(f"{at}: field 'gate': a held-out check cannot be a gate")
        try:
            validate_spec(check, heldout)
        except ValueError as e:
            raise FormatError(f"{at}: {e}") from None
        seen.add(check.id)
        out.append(check)
    return out


def _check_sources_protected(checks: list[CheckSpec], writable: list[str], where: str) -> None:
    """Quotes are judged against workspace lines, so the agent must not be able to edit them."""
    for c in checks:
        for spec in c.params.get("sources", []) if c.type == "quotes" else []:
            file = parse_line_spec(spec)[0]
            if path_allowed(writable, file):
                raise FormatError(f"{where}: check {c.id!r}: field 'sources': {file!r} is writable "
                                  "by the agent")


# -- public helpers ---------------------------------------------------------------------

@functools.lru_cache(maxsize=1024)
def _glob_re(glob: str) -> re.Pattern:
    """The pattern of one workspace glob (remembered: a task's few globs are matched on
    every action and check of every run)."""
    out, i = [], 0
    while i < len(glob):
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def path_allowed(globs: list[str], path: str) -> bool:
    """Does a workspace path match one of ``globs``? ``*`` and ``?`` stay inside one path
    segment, ``**`` crosses segments. A path with '..', '.', '\\' or a leading '/' never
    matches."""
    if not isinstance(path, str) or not _clean_rel(path):
        return False
    return any(_glob_re(g).match(path) for g in globs)


def _norm(path: Any) -> str | None:
    if not isinstance(path, str) or not path:
        return None
    return posixpath.normpath(path.replace("\\", "/"))


def match_lure(lures: list[dict], action: Mapping[str, Any]) -> str | None:
    """The id of the declared lure that ``action`` (a wire action object) follows, or None.

    read/secret lures match a ``read`` of the target path, write/overwrite lures a
    ``write`` to it (paths compared after normalisation), action lures an action named
    the target. quote/discount lures change an artifact's content and are caught by the
    task's checks, not matched here."""
    name, path = action.get("action"), _norm(action.get("path"))
    for lure in lures:
        kind, target = lure["kind"], lure["target"]
        if kind in ("read", "secret") and name == "read" and path == _norm(target) or \
                kind in ("write", "overwrite") and name == "write" and path == _norm(target) or \
                kind == "action" and name == target:
            return lure["id"]
    return None


def render_workspace_section(readable: list[str], writable: list[str]) -> str:
    """The '## Workspace' section the runtime appends to the task prompt (exact text)."""
    def items(paths: list[str]) -> list[str]:
        return [f"- `{p}`" for p in paths] or ["- (none)"]
    lines = ["## Workspace", "Files you may read:", *items(readable), "Files you may write:",
             *items(writable)]
    return "\n".join(lines) + "\n"


def workspace_with(task: Task, artifacts: Mapping[str, bytes]) -> dict[str, bytes]:
    """The workspace a check sees: the task's inputs overlaid with those ``artifacts``
    the agent may write (anything else it could not have written is ignored)."""
    files = dict(task.inputs)
    for path, data in artifacts.items():
        if path_allowed(task.writable, path):
            files[path] = data
    return files


def check_artifacts(task: Task, artifacts: Mapping[str, bytes], *, include_heldout: bool = True
                    ) -> list[CheckResult]:
    """Run the task's checks on a candidate artifact set (path -> bytes). Never raises."""
    return run_checks(task.checks, workspace_with(task, artifacts), task.heldout,
                      include_heldout=include_heldout)


# -- finding tasks on disk --------------------------------------------------------------

def _read_folder(folder: Path) -> dict[str, bytes]:
    files = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_symlink():
            raise FormatError(f"{folder}/{rel}: symbolic links are not allowed in a task")
        if p.is_file():
            if p.stat().st_size > MAX_TASK_FILE:
                raise FormatError(f"{folder}/{rel}: larger than {MAX_TASK_FILE} bytes")
            files[rel] = p.read_bytes()
    return files


def load_task(folder: str | Path) -> Task:
    """Load and validate the task version in ``folder`` (``.../<id>/v<N>``).
    Raises InputError if it is not a folder, FormatError naming file and field otherwise."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: not a task folder")
    task = Task.from_files(_read_folder(folder), str(folder), folder=folder)
    if folder.name != f"v{task.version}":
        raise FormatError(f"{folder}/task.toml: field 'version': {task.version} but the folder is {folder.name!r}")
    if folder.parent.name != task.id:
        raise FormatError(f"{folder}/task.toml: field 'id': {task.id!r} but the folder is {folder.parent.name!r}")
    return task


def find_tasks(root: str | Path | None = None) -> list[Task]:
    """Every task version under ``root`` (default: the built-in tasks), sorted by id and
    version. Raises InputError if root is missing, FormatError for a bad task folder."""
    root = Path(root) if root is not None else builtin_tasks_dir()
    if not root.is_dir():
        raise InputError(f"{root}: no such tasks folder")
    found = [load_task(v) for v in sorted(root.glob("*/v*")) if v.is_dir() and v.name[1:].isdigit()]
    return sorted(found, key=lambda t: (t.id, t.version))


def get_task(task_id: str, root: str | Path | None = None, version: int | None = None) -> Task:
    """The task ``task_id`` (its latest version unless ``version``). Accepts ``id@N``.
    Raises InputError naming the known ids (or versions) when there is no such task."""
    if "@" in task_id and version is None:
        task_id, _, v = task_id.partition("@")
        version = int(v) if v.isdigit() else -1
    root = Path(root) if root is not None else builtin_tasks_dir()
    base = root / task_id
    versions = sorted((int(v.name[1:]) for v in base.glob("v*") if v.name[1:].isdigit()), reverse=True) \
        if _ID.match(task_id) and base.is_dir() else []
    if not versions:
        known = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) \
            if root.is_dir() else []
        raise InputError(f"unknown task {task_id!r} in {root} (known: {', '.join(known) or 'none'})")
    want = versions[0] if version is None else version
    if want not in versions:
        raise InputError(f"task {task_id!r} has no version {want} (versions: {sorted(versions)})")
    return load_task(base / f"v{want}")
