"""Move BenchClaw's loose top-level modules into the folders docs/INTERNALS.md describes.

Why a script and not a hand-made commit: the move touches ~150 files and must be applied
last, on whatever ``main`` is once the other branches have merged. Run on a clean checkout,
it gives the same tree every time, so the lead re-runs it instead of resolving conflicts:

    python tools/relayout.py            # moves with `git mv`, rewrites, prints what it did
    python tools/relayout.py --dry-run  # prints the plan, touches nothing

What it does, in order:
  1. refuses unless the work tree is clean and every source path exists and no target does
     (so a second run, or a run on a half-moved tree, stops before touching anything);
  2. rewrites every ``from ... import`` statement that names a moved module, found with
     ``ast`` (absolute, ``from .x``/``from ..x``, ``from benchclaw import x``), keeping the
     names it binds and the relative/absolute style; a moved file's own relative imports are
     recomputed from its new place;
     the same for one-line ``from benchclaw... import`` written in strings and docs (a
     ``python -c`` script in a test);
  3. rewrites the dotted and slashed names of moved modules wherever else they are written:
     ``import benchclaw.x as y``, ``benchclaw.x.attr``, monkeypatch and ``-m`` strings,
     pyproject entry points, docs paths (``benchclaw/x.py``), and the distinctive old names
     written bare in prose (``spec_format.STOP_RULES`` in a comment, docstring or doc);
  4. ``git mv``s the files and writes the new packages' ``__init__.py``.
Review with ``git status``, then ``git add -A benchclaw tests bench docs && git commit``.
"""

from __future__ import annotations

import argparse
import ast
import io
import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path

# Old path -> new path, relative to the repository root. The one place the layout is decided
# (docs/INTERNALS.md "Layout" explains it; tests/test_layering.py enforces it).
MOVES = {
    # formats/: the pure on-disk formats, what the verifier may import
    "benchclaw/jsonio.py": "benchclaw/formats/jsonio.py",
    "benchclaw/records.py": "benchclaw/formats/records.py",
    "benchclaw/money.py": "benchclaw/formats/money.py",
    "benchclaw/names.py": "benchclaw/formats/names.py",
    "benchclaw/catalog_format.py": "benchclaw/formats/catalog.py",
    "benchclaw/spec_format.py": "benchclaw/formats/spec.py",
    "benchclaw/ledger_replay.py": "benchclaw/formats/ledger.py",
    "benchclaw/policies.py": "benchclaw/formats/policies.py",
    # the built-in simulator's usage rules: pure, so the verifier recomputes simulated usage
    "benchclaw/sim_rules.py": "benchclaw/formats/sim_rules.py",
    # the spec's stopping-rule language and the intervals it decides on: the spec format
    # parses them, so they sit below it rather than in analysis/ above it
    "benchclaw/analysis/rules.py": "benchclaw/formats/rules.py",
    "benchclaw/analysis/interval.py": "benchclaw/formats/interval.py",
    # evidence/: the runs directory (store, its checks, merges, read views, durability)
    "benchclaw/store.py": "benchclaw/evidence/store.py",
    "benchclaw/_store_check.py": "benchclaw/evidence/check.py",
    "benchclaw/_store_merge.py": "benchclaw/evidence/merge.py",
    "benchclaw/runs_view.py": "benchclaw/evidence/views.py",
    "benchclaw/_commit.py": "benchclaw/evidence/_commit.py",
    # experiments/: the machinery that runs a grid (beside spec, prereg, corrections)
    "benchclaw/runner.py": "benchclaw/experiments/runner.py",
    "benchclaw/_runner_io.py": "benchclaw/experiments/executor.py",
    "benchclaw/_executor_ray.py": "benchclaw/experiments/ray_executor.py",
    "benchclaw/_grid.py": "benchclaw/experiments/grid.py",
    "benchclaw/_progress.py": "benchclaw/experiments/progress.py",
    "benchclaw/ledger.py": "benchclaw/experiments/ledger.py",
    # one home per noun
    "benchclaw/report.py": "benchclaw/analysis/report.py",
    "benchclaw/tasks.py": "benchclaw/checks/tasks.py",
}

# The new packages and why each exists (their __init__ holds no imports, so importing one
# pure module never drags in its neighbours).
NEW_PACKAGES = {
    "benchclaw/formats/__init__.py":
        '"""Formats: the pure definitions of what BenchClaw writes and reads (records, money,\n'
        'names, catalogs, specs, stopping rules, ledgers, policies). Standard library and\n'
        '``orjson`` only: the verifier imports these, so nothing here touches the disk\'s state,\n'
        'the network or the clock. Import the modules themselves; this file re-exports nothing.\n"""\n',
    "benchclaw/evidence/__init__.py":
        '"""Evidence: the runs directory (FORMAT.md §1): the store and its chain writer, the\n'
        'group commit that makes writes durable, the store check and recovery, merges, and the\n'
        'read views over runs. Import the modules themselves; this file re-exports nothing.\n"""\n',
}

# Which tracked files may name modules: code, docs, packaging. Never task data, specs,
# catalogs or templates (their bytes are digested into the evidence).
REWRITE = re.compile(r"^(benchclaw/.*\.py|tests/.*\.py|bench/.*\.py|tools/.*\.py|docs/.*\.md|"
                     r"README\.md|pyproject\.toml|setup\.py|setup\.cfg|\.ci/run)$")
SELF = "tools/relayout.py"


def module_of(path: str) -> tuple[str, bool]:
    """``benchclaw/a/b.py`` -> (``benchclaw.a.b``, False); ``.../__init__.py`` -> (package, True)."""
    parts = path[:-3].split("/")
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


RENAMES = {module_of(old)[0]: module_of(new)[0] for old, new in MOVES.items()}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


# -- 1. preconditions ------------------------------------------------------------------

def refuse_unless_ready() -> None:
    """Stop before touching anything unless this is a clean tree in the old layout."""
    if git("status", "--porcelain", "--untracked-files=no").strip():
        sys.exit("relayout: the work tree has uncommitted changes; commit or stash them first")
    done = [new for new in list(MOVES.values()) + list(NEW_PACKAGES) if Path(new).exists()]
    missing = [old for old in MOVES if not Path(old).exists()]
    if done and len(missing) == len(MOVES):
        sys.exit("relayout: already applied (e.g. %s exists); nothing to do" % done[0])
    if done or missing:
        sys.exit("relayout: the tree is half moved; targets present: %s; sources missing: %s"
                 % (", ".join(done) or "none", ", ".join(missing) or "none"))


# -- 2. from-imports, with ast ---------------------------------------------------------

def absolute(importer: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    """The absolute module a ``from`` statement names (resolved from the importer's place)."""
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_pkg else importer.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def relative(importer: str, is_pkg: bool, target: str) -> tuple[int, str]:
    """(level, module) to write ``target`` relatively from ``importer``'s (new) place."""
    here = importer.split(".") if is_pkg else importer.split(".")[:-1]
    there = target.split(".")
    common = 0
    while common < min(len(here), len(there)) and here[common] == there[common]:
        common += 1
    return len(here) - common + 1, ".".join(there[common:])


def new_groups(importer: str, is_pkg: bool, node: ast.ImportFrom) -> list[tuple[str, list]]:
    """The statement's names regrouped by the module each now comes from: a name that is a
    moved submodule (``from benchclaw import store``) comes from its new parent, bound to
    the same local name; any other name comes from its module's new home."""
    src = absolute(importer, is_pkg, node)
    groups: dict[str, list] = {}
    for a in node.names:
        sub = f"{src}.{a.name}"
        if sub in RENAMES:
            parent, leaf = RENAMES[sub].rsplit(".", 1)
            groups.setdefault(parent, []).append((leaf, a.asname or (a.name if leaf != a.name else None)))
        else:
            groups.setdefault(RENAMES.get(src, src), []).append((a.name, a.asname))
    return list(groups.items())


def render(node: ast.ImportFrom, new_importer: str, is_pkg: bool, module: str, names: list,
           indent: str) -> str:
    """One ``from`` statement, relative if the original was, wrapped like the house style."""
    if node.level:
        level, rest = relative(new_importer, is_pkg, module)
        head = "." * level + rest
    else:
        head = module
    parts = [n if not a or a == n else f"{n} as {a}" for n, a in names]
    line = f"from {head} import " + ", ".join(parts)
    if len(indent) + len(line) <= 100:
        return line
    lead = f"from {head} import ("
    out, cur = [], lead
    for i, p in enumerate(parts):
        piece = p + (", " if i < len(parts) - 1 else ")")
        if len(indent) + len(cur) + len(piece.rstrip()) > 100 and cur.strip() != lead.strip():
            out.append(cur.rstrip())
            cur = " " * len(lead)
        cur += piece
    out.append(cur)
    return ("\n" + indent).join(out)


def same_head(node: ast.ImportFrom, old_mod: str, new_mod: str, is_pkg: bool) -> bool:
    """Whether the statement, written from the file's new place, reads as it does now
    (absolute, or relative to a module that moved along with it): then it is left as
    written, line breaks and all."""
    if not node.level:
        return True
    target = absolute(old_mod, is_pkg, node)
    return relative(new_mod, is_pkg, RENAMES.get(target, target)) == (node.level, node.module or "")


def rewrite_imports(path: str, text: str) -> tuple[str, int]:
    """``text`` with every ``from`` import that names a moved module (or that a moved file
    writes relatively) rewritten; returns the new text and how many statements changed."""
    old_mod, is_pkg = module_of(path) if path.startswith("benchclaw/") else (path[:-3].replace("/", "."), False)
    new_mod = module_of(MOVES[path])[0] if path in MOVES else old_mod
    tree = ast.parse(text, path)
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln))
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        src = absolute(old_mod, is_pkg, node)
        if not src.startswith("benchclaw"):
            continue
        groups = new_groups(old_mod, is_pkg, node)
        if groups == [(src, [(a.name, a.asname) for a in node.names])] and same_head(node, old_mod, new_mod, is_pkg):
            continue
        start = offsets[node.lineno - 1] + node.col_offset
        end = offsets[node.end_lineno - 1] + node.end_col_offset
        line_start = lines[node.lineno - 1]
        indent = line_start[:node.col_offset]
        sep = ("\n" + indent) if not indent.strip() else "; "
        new = sep.join(render(node, new_mod, is_pkg, m, names, indent) for m, names in groups)
        edits.append((start, end, new))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text, len(edits)


# -- 2b. from-imports that ast does not see: in strings (a ``python -c`` script) and docs

WRITTEN = re.compile(r"from (?P<src>benchclaw(?:\.\w+)*) import (?P<names>\w+(?: as \w+)?(?:, *\w+(?: as \w+)?)*)")


def rewrite_written_imports(text: str) -> tuple[str, int]:
    """One-line absolute ``from benchclaw... import`` statements anywhere in the text, with
    the same regrouping as ``rewrite_imports``; one already in its final form is left alone."""
    count = 0

    def sub(m: re.Match) -> str:
        nonlocal count
        names = [ast.alias(*(n.split(" as ") + [None])[:2]) for n in re.split(r", *", m["names"])]
        node = ast.ImportFrom(module=m["src"], names=names, level=0)
        groups = new_groups(m["src"], False, node)
        if groups == [(m["src"], [(a.name, a.asname) for a in names])]:
            return m[0]
        count += 1
        before = m.string[m.string.rfind("\n", 0, m.start()) + 1:m.start()]
        sep = ("\n" + before) if not before.strip() else "; "
        return sep.join(render(node, "", False, mod, ns, "") for mod, ns in groups)
    return WRITTEN.sub(sub, text), count


# -- 3. every other mention of a moved module ------------------------------------------

def _name_pattern() -> re.Pattern:
    dotted = "|".join(re.escape(o) for o in sorted(RENAMES, key=len, reverse=True))
    slashed = "|".join(re.escape(o) for o in sorted(MOVES, key=len, reverse=True))
    return re.compile(rf"(?<![\w./])(?:(?P<dot>{dotted})(?![\w])|(?P<path>{slashed}))")


NAMES = _name_pattern()


def rewrite_mentions(text: str) -> tuple[str, int]:
    """Dotted names (``benchclaw.store.X``, ``-m benchclaw.x``, entry points) and file paths
    (``benchclaw/store.py``) of moved modules, in code strings, comments and docs."""
    def sub(m: re.Match) -> str:
        return RENAMES[m["dot"]] if m["dot"] else MOVES[m["path"]]
    return NAMES.subn(sub, text)


# Old module names distinctive enough to rewrite where they appear bare (``spec_format.X``)
# in prose: comments, docstrings and docs. ``_grid``/``_progress`` only before ``.name``
# (``_grid(`` is a function elsewhere). Code is left alone: there a bare name is a local alias.
BARE = {o.rsplit(".", 1)[1]: n.split(".", 1)[1] for o, n in RENAMES.items() if o.count(".") == 1}
DISTINCT = [b for b in BARE if "_" in b.strip("_") or b in ("_store_check", "_store_merge")]
PROSE = re.compile(r"(?<![\w./])(?:(?P<name>%s)(?![\w])|(?P<mod>_grid|_progress)(?=\.\w))"
                   % "|".join(sorted(DISTINCT, key=len, reverse=True)))


def rewrite_prose(text: str) -> tuple[str, int]:
    return PROSE.subn(lambda m: BARE[m["name"] or m["mod"]], text)


def prose_spans(text: str) -> list[tuple[int, int]]:
    """Offsets of the comments and docstrings of a Python source."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln))
    spans = [(offsets[t.start[0] - 1] + t.start[1], offsets[t.end[0] - 1] + t.end[1])
             for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            d = body[0]
            spans.append((offsets[d.lineno - 1] + d.col_offset, offsets[d.end_lineno - 1] + d.end_col_offset))
    return spans


def rewrite_prose_in(path: str, text: str) -> tuple[str, int]:
    """Bare old names in a doc, or in a Python file's comments and docstrings."""
    if not path.endswith(".py"):
        return rewrite_prose(text)
    total = 0
    for start, end in sorted(prose_spans(text), reverse=True):
        new, n = rewrite_prose(text[start:end])
        text, total = text[:start] + new + text[end:], total + n
    return text, total


# -- 4. the moves ----------------------------------------------------------------------

def leftovers() -> list[str]:
    """Code that builds a moved file's path from parts (``pkg / "policies.py"``) cannot be
    rewritten safely; list such literals so a person looks at each one."""
    leaves = "|".join(re.escape(Path(o).name) for o in MOVES)
    pattern = re.compile(rf"[\"']({leaves})[\"']")
    hits = []
    for path in git("ls-files", "*.py").splitlines():
        if path != SELF and Path(path).is_file():
            for no, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
                if pattern.search(line):
                    hits.append(f"{path}:{no}: {line.strip()}")
    return hits


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="print the plan; change nothing")
    args = ap.parse_args()
    os.chdir(git("rev-parse", "--show-toplevel").strip())
    refuse_unless_ready()
    changed = {}
    for path in git("ls-files").splitlines():
        if path == SELF or not REWRITE.match(path) or not Path(path).is_file():
            continue
        text = orig = Path(path).read_text(encoding="utf-8")
        n_imp = 0
        if path.endswith(".py"):
            text, n_imp = rewrite_imports(path, text)
        text, n_written = rewrite_written_imports(text)
        text, n_ment = rewrite_mentions(text)
        n_imp += n_written
        text, n_prose = rewrite_prose_in(path, text)
        n_ment += n_prose
        if text != orig:
            changed[path] = (n_imp, n_ment)
            if not args.dry_run:
                Path(path).write_text(text, encoding="utf-8")
    for path, (n_imp, n_ment) in sorted(changed.items()):
        print(f"rewrote {path}: {n_imp} import statement(s), {n_ment} other mention(s)")
    for old, new in MOVES.items():
        print(f"git mv {old} {new}")
        if not args.dry_run:
            Path(new).parent.mkdir(parents=True, exist_ok=True)
            git("mv", old, new)
    for init, doc in NEW_PACKAGES.items():
        print(f"created {init}")
        if not args.dry_run:
            Path(init).write_text(doc, encoding="utf-8")
            git("add", init)
    for hit in leftovers():
        print(f"check by hand (a moved file's name in a string): {hit}")
    print(f"relayout: {len(MOVES)} modules moved, {len(changed)} files rewritten"
          + (" (dry run: nothing changed)" if args.dry_run else "; review `git status`, then commit"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
