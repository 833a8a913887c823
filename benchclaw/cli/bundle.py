"""``benchclaw export``: pack one experiment's (or a studio journal's) evidence into a reproducible bundle zip."""

from __future__ import annotations

from pathlib import Path

import click

from ._common import echo, echo_err, emit_json, runs_option


@click.command()
@click.argument("experiment")
@runs_option
@click.option("-o", "--output", "out_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Where to write the bundle (default: <EXPERIMENT>.zip).")
@click.option("--include-site", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also pack a built site folder (under site/ in the bundle).")
@click.option("--json", "as_json", is_flag=True, help="Print the export report as JSON.")
def export(experiment: str, runs_dir: Path, out_path: Path | None, include_site: Path | None,
           as_json: bool) -> None:
    """Export EXPERIMENT's evidence as a reproducible bundle zip.

    The bundle holds the sealed runs, every object they reference, the task versions,
    catalogs and spec they used, the journals, ledgers and the summary as claimed, listed
    with their SHA-256 in manifest.json. Exporting twice gives identical bytes; the
    manifest digest printed here is the bundle's identity. Check it with
    `benchclaw-verify`. While another process runs the experiment's grid, export waits
    for it to end (and says so), because a grid half-way through does not verify.

    EXPERIMENT may also name a studio's exploratory journal (studio-<label>): its runs,
    session and day ledgers are packed, labelled exploratory, with no spec and no summary
    (refused while that studio serves: stop it, export, start it again).

    Example: benchclaw export E01 --runs runs/ -o E01.zip && benchclaw-verify E01.zip
    """
    from ..bundle import export_bundle

    out = out_path or Path(f"{experiment}.zip")
    rep = export_bundle(runs_dir, experiment, out, include_site=include_site, note=echo_err)
    if as_json:
        emit_json({"path": str(rep.path), "manifest_digest": rep.manifest_digest,
                   "files": rep.files, "bytes": rep.bytes})
        return
    echo(str(rep.path))
    echo_err(f"{rep.files} files, {rep.bytes} bytes; manifest {rep.manifest_digest}")
