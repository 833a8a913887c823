"""``benchclaw tasks``: list, show and check task fixtures (thin glue over benchclaw.checks.tasks)."""

from __future__ import annotations

from pathlib import Path

import click

from ._common import echo, emit_json

__all__ = ["tasks"]

_MAX_ARTIFACT_READ = 32 << 20  # read at most this much of a candidate file: checks bound it anyway


def _tasks_option(f):
    return click.option("--tasks", "tasks_dir", type=click.Path(path_type=Path), default=None,
                        help="Folder of tasks (default: the built-in tasks).")(f)


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


@click.group()
def tasks() -> None:
    """List, show and check task fixtures.

    Example: benchclaw tasks check cents-invoices tasks/cents-invoices/v1/reference
    """


@tasks.command("ls")
@_tasks_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {id, version, family, digest, checks}.")
def ls_cmd(tasks_dir: Path | None, as_json: bool) -> None:
    """List every task version: id, version, family, digest, number of checks.

    Example: benchclaw tasks ls --json
    """
    from ..checks.tasks import find_tasks

    found = find_tasks(tasks_dir)
    rows = [{"id": t.id, "version": t.version, "family": t.family, "digest": t.digest,
             "checks": len(t.checks)} for t in found]
    if as_json:
        emit_json(rows)
        return
    head = [["ID", "VERSION", "FAMILY", "CHECKS", "DIGEST"]]
    echo(_table(head + [[r["id"], str(r["version"]), r["family"], str(r["checks"]), r["digest"]]
                              for r in rows]))


@tasks.command("show")
@click.argument("task_id")
@_tasks_option
@click.option("--version", "version", type=int, default=None, help="Task version (default: latest).")
def show_cmd(task_id: str, tasks_dir: Path | None, version: int | None) -> None:
    """Show one task: permissions, checks, lures, files and the prompt.

    Example: benchclaw tasks show quotes-incident
    """
    from ..checks.tasks import get_task

    t = get_task(task_id, tasks_dir, version)
    echo(f"{t.id} v{t.version}  ({t.family})  {t.title}")
    echo(f"digest:   {t.digest}")
    echo(f"folder:   {t.folder}")
    echo(f"readable: {', '.join(t.readable)}")
    echo(f"writable: {', '.join(t.writable)}   outputs: {', '.join(t.outputs)}")
    echo(f"limits:   {', '.join(f'{k}={v}' for k, v in sorted(t.limits.items())) or 'defaults'}")
    echo("checks:")
    for c in t.checks:
        role = "held-out" if c.heldout else ("gate" if c.gate else "extra")
        echo(f"  {c.id:<16} {c.type:<12} {role}")
    echo("lures:")
    for lure in t.lures:
        echo(f"  {lure['id']:<28} {lure['kind']:<9} {lure['target']}")
    echo("files:")
    for path, data in sorted(t.files().items()):
        echo(f"  {path} ({len(data):,} bytes)")
    echo("\n--- prompt ---\n" + t.prompt)


def _read_artifacts(folder: Path) -> dict[str, bytes]:
    from ..errors import InputError

    if not folder.is_dir():
        raise InputError(f"{folder}: not a folder of artifacts")
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and not p.is_symlink():
            with p.open("rb") as fh:
                out[p.relative_to(folder).as_posix()] = fh.read(_MAX_ARTIFACT_READ + 1)
    return out


@tasks.command("check")
@click.argument("task_id")
@click.argument("artifact_dir", type=click.Path(path_type=Path))
@_tasks_option
@click.option("--version", "version", type=int, default=None, help="Task version (default: latest).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as a JSON list.")
def check_cmd(task_id: str, artifact_dir: Path, tasks_dir: Path | None,
              version: int | None, as_json: bool) -> None:
    """Run every check of a task (held-out included) on a folder of candidate artifacts.

    The folder holds the files the agent would write (e.g. answer.json); the task's
    inputs are added as the rest of the workspace. Exits 1 if any check fails.

    Example: benchclaw tasks check pricing-seats tasks/pricing-seats/v1/reference
    """
    from ..errors import CheckFailed
    from ..checks.tasks import check_artifacts, get_task

    task = get_task(task_id, tasks_dir, version)
    results = check_artifacts(task, _read_artifacts(artifact_dir), include_heldout=True)
    if as_json:
        emit_json([r.to_dict() for r in results])
    else:
        rows = [["CHECK", "TYPE", "ROLE", "RESULT", "DETAIL"]]
        for r in results:
            role = "held-out" if r.heldout else ("gate" if r.gate else "extra")
            rows.append([r.id, r.type, role, "pass" if r.passed else "FAIL", r.detail])
        echo(_table(rows))
    failed = sum(not r.passed for r in results)
    if failed:  # exit 1 through the one error path (main prints it on stderr)
        raise CheckFailed(f"{task.id} v{task.version}: {failed} of {len(results)} checks failed")
    echo(f"{task.id} v{task.version}: all {len(results)} checks passed", err=True)
