"""The package layout holds: folders import only downwards, no import circle, no private
name crosses a module, and the top level holds only the package's face.

The allowed graph is written once, here, as data (``ALLOWED``); docs/INTERNALS.md "Layout"
shows the same graph, and a test below holds the two equal. Imports are read with ``ast``
from the source, every one of them: module level, function-local (a lazy import still
makes a circle, it only hides it until the call), and under ``TYPE_CHECKING``.
``tests/test_boundaries.py`` proves the verifier's boundary at run time as well.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "benchclaw"

# What each part may import directly (besides itself). A part is a folder of benchclaw/ or
# one of the top-level modules. Read bottom to top, it is docs/INTERNALS.md's flow.
ALLOWED = {
    "errors": set(),
    "paths": {"errors"},
    "formats": {"errors"},
    "checks": {"formats", "paths", "errors"},
    "evidence": {"formats", "errors"},
    "providers": {"formats", "paths", "errors"},
    "analysis": {"formats", "evidence", "errors"},
    "verify": {"analysis", "checks", "formats", "errors"},
    "sim": {"providers", "checks", "formats", "paths", "errors"},
    "agent": {"providers", "checks", "evidence", "formats", "paths", "errors"},
    "experiments": {"agent", "providers", "verify", "checks", "evidence", "formats", "paths", "errors"},
    "bundle": {"verify", "analysis", "evidence", "formats", "paths", "errors"},
    "site": {"verify", "analysis", "checks", "evidence", "formats", "paths", "errors"},
    "studio": {"site", "experiments", "agent", "sim", "providers", "checks", "evidence", "formats",
               "paths", "errors"},
    "demo": {"site", "bundle", "verify", "experiments", "analysis", "evidence", "paths", "errors"},
    "cli": {"demo", "studio", "site", "bundle", "experiments", "agent", "sim", "analysis", "checks",
            "evidence", "formats", "errors"},
}

# The parts the offline verifier may load: nothing here touches a runs directory, a
# provider or the network. One module of a pure part reads a runs directory, and says so.
PURE = {"errors", "paths", "formats", "checks", "analysis", "verify"}
IMPURE_IN_PURE = {"benchclaw.analysis.report": "loads an experiment from a runs directory "
                  "(the verifier builds the same ExperimentData from a bundle instead)"}

# The top level: the package's face and its entry points; everything else lives in a folder.
TOP_LEVEL = {"__init__", "errors", "paths", "demo"}

# Known circles, each with why it is still there. A circle listed here that is gone is fine
# (delete its line); a circle not listed fails.
CIRCLES: dict[frozenset, str] = {}

# Private names imported across modules, each with why. None today.
PRIVATE_EXCEPTIONS: dict[tuple[str, str], str] = {}

NOT_MOVED = (PKG / "store.py").exists()  # the old flat layout: tools/relayout.py not run yet
pytestmark = pytest.mark.skipif(NOT_MOVED, reason="the folder move is not applied yet (run tools/relayout.py)")


def _modules(root: Path = PKG) -> dict[str, tuple[Path, bool]]:
    """Every module of the package: dotted name -> (file, is a package)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _target(importer: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_pkg else importer.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(mods: dict) -> list[tuple[str, str, str | None, int]]:
    """(importer, imported module, imported name or None, line) for every import of a
    benchclaw module anywhere in a file, function-local ones included."""
    out = []
    for mod, (path, is_pkg) in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                out += [(mod, a.name, None, node.lineno) for a in node.names if a.name.split(".")[0] == "benchclaw"]
            elif isinstance(node, ast.ImportFrom):
                src = _target(mod, is_pkg, node)
                if src.split(".")[0] != "benchclaw":
                    continue
                for a in node.names:
                    sub = f"{src}.{a.name}"
                    out.append((mod, sub, None, node.lineno) if sub in mods else (mod, src, a.name, node.lineno))
    return out


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _edges(mods: dict) -> dict[str, set[str]]:
    """The module graph. Importing ``a.b.c`` from outside ``a.b`` runs ``a.b``'s
    ``__init__`` first, so that is an edge too."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, target, _, _ in _imports(mods):
        parts = target.split(".")
        for i in range(2, len(parts) + 1):
            step = ".".join(parts[:i])
            inside = mod == step or mod.startswith(step + ".")
            if step in mods and step != mod and (i == len(parts) or not inside):
                edges[mod].add(step)
    return edges


def _circles(edges: dict[str, set[str]]) -> list[frozenset]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = n; n += 1; stack.append(root); on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = n; n += 1; stack.append(w); on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop(); on.discard(w); comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def _forbidden(mods: dict) -> list[str]:
    bad = []
    for mod, target, _, line in _imports(mods):
        a, b = _part(mod), _part(target)
        if a != b and b != "__init__" and b not in ALLOWED.get(a, set()):
            bad.append(f"{mod} (line {line}) imports {target}: {a} may not import {b}")
    return bad


def _impure_in_pure(mods: dict) -> list[str]:
    return [f"{mod} (line {line}) imports {target}, outside the pure parts"
            for mod, target, _, line in _imports(mods)
            if _part(mod) in PURE and mod not in IMPURE_IN_PURE and _part(target) not in PURE | {"__init__"}]


def _private(mods: dict) -> list[str]:
    """A ``_name`` imported from another module, or a ``_module`` imported from outside
    the package that holds it."""
    bad = []
    for mod, target, name, line in _imports(mods):
        home = mod if mods[mod][1] else mod.rsplit(".", 1)[0]
        segs = target.split(".")
        owners = [".".join(segs[:i]) for i, s in enumerate(segs) if s.startswith("_") and not s.startswith("__")]
        crosses = [o for o in owners if not (home == o or home.startswith(o + "."))]
        named = name is not None and name.startswith("_") and not name.startswith("__") and target != mod
        if (crosses or named) and (mod, f"{target}.{name}" if name else target) not in PRIVATE_EXCEPTIONS:
            bad.append(f"{mod} (line {line}) imports {target}{'.' + name if name else ''}")
    return bad


def test_folders_import_only_in_the_allowed_directions():
    assert _forbidden(_modules()) == []


def test_the_allowed_graph_has_no_circle_and_names_only_real_parts():
    parts = {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()} | (TOP_LEVEL - {"__init__"})
    assert set(ALLOWED) == parts
    assert _circles({a: set(b) for a, b in ALLOWED.items()}) == []
    assert all(b in ALLOWED for bs in ALLOWED.values() for b in bs)


def test_pure_parts_import_only_pure_parts():
    assert _impure_in_pure(_modules()) == []
    assert all(ALLOWED[p] <= PURE for p in PURE if p != "analysis")  # analysis: report only


def test_no_import_circle_between_modules():
    unexplained = [sorted(c) for c in _circles(_edges(_modules())) if c not in CIRCLES]
    assert unexplained == []


def test_no_private_name_crosses_a_module():
    assert _private(_modules()) == []


def test_the_top_level_holds_only_the_face_and_the_entry_points():
    assert {p.stem for p in PKG.glob("*.py")} == TOP_LEVEL


def test_internals_shows_the_allowed_graph():
    """docs/INTERNALS.md's "Allowed imports" table lists, per part, exactly ALLOWED."""
    text = (ROOT / "docs" / "INTERNALS.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| ([^|]*) \|", text.split("## Allowed imports", 1)[1].split("\n## ")[0], re.M)
    shown = {part: set(re.findall(r"`(\w+)`", deps)) for part, deps in rows}
    assert shown == ALLOWED


# The checks above must be able to fail: each is fed a package with one bad import.

def _fake(tmp_path: Path, files: dict[str, str]) -> dict:
    for rel, text in files.items():
        path = tmp_path / "benchclaw" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return _modules(tmp_path / "benchclaw")


def test_a_forbidden_direction_is_caught(tmp_path):
    mods = _fake(tmp_path, {"__init__.py": "", "formats/__init__.py": "", "evidence/__init__.py": "",
                            "formats/money.py": "def f():\n    from ..evidence import store\n",
                            "evidence/store.py": "from ..formats import money\n"})
    assert _forbidden(mods) == ["benchclaw.formats.money (line 2) imports benchclaw.evidence.store: "
                                "formats may not import evidence"]
    assert len(_impure_in_pure(mods)) == 1


def test_a_function_local_circle_is_caught(tmp_path):
    mods = _fake(tmp_path, {"__init__.py": "", "site/__init__.py": "",
                            "site/_build.py": "from ._pages import page\n",
                            "site/_pages.py": "def page():\n    from ._build import build\n"})
    assert _circles(_edges(mods)) == [frozenset({"benchclaw.site._build", "benchclaw.site._pages"})]


def test_a_private_name_across_modules_is_caught(tmp_path):
    mods = _fake(tmp_path, {"__init__.py": "", "site/__init__.py": "", "studio/__init__.py": "",
                            "site/_render.py": "def _env():\n    pass\n",
                            "site/pages.py": "from ._render import _env\n",
                            "studio/app.py": "from ..site._render import _env\n"})
    assert _private(mods) == ["benchclaw.site.pages (line 1) imports benchclaw.site._render._env",
                              "benchclaw.studio.app (line 1) imports benchclaw.site._render._env"]
