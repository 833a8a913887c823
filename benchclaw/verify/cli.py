"""``benchclaw-verify``: argparse, not click, so the auditor's tool stays light and
imports nothing beyond the verifier itself (``--help`` starts in well under 0.3 s).

Exit codes: 0 verified, 1 the evidence does not match, 2 not a readable bundle (or a
usage error). Data (``--json``) goes to stdout; the human report goes to stdout too
unless ``--quiet``, which prints only the verdict line (and failures) on stderr.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["main", "render_text"]

_EPILOG = """examples:
  benchclaw-verify bundle.zip            # report, exit 0/1/2
  benchclaw-verify bundle.zip --json     # machine-readable report on stdout
  benchclaw-verify bundle.zip --quiet    # only the verdict (and failures) on stderr

exit codes: 0 verified, 1 evidence does not match, 2 not a readable bundle"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="benchclaw-verify", epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Verify a BenchClaw evidence bundle offline: recompute every digest, hash "
                    "chain, check result, cost, ledger, summary table and decision, and the "
                    "pre-registration order. Reads the zip in memory; no network, no files written "
                    "(an unlinked temporary one aside).")
    p.add_argument("bundle", help="the bundle zip written by `benchclaw export`")
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the verdict and failures")
    p.add_argument("--registered", action="append", metavar="SHA256",
                   help="the registration digest `benchclaw prereg` printed (repeat for several); "
                        "the bundle must carry exactly that registration")
    p.add_argument("--failures", type=int, default=10, metavar="N",
                   help="how many failures to list (default 10)")
    return p


def _counts(counts: dict) -> str:
    return ", ".join(f"{v} {k}" for k, v in counts.items()) or "-"


def render_text(report, max_failures: int = 10, quiet: bool = False) -> str:
    """The human report: a line per section, the first failures, the verdict."""
    lines = []
    if not quiet:
        lines.append(f"bundle    {report.source}")
        if report.manifest_digest:
            lines.append(f"manifest  {report.manifest_digest}  experiments {', '.join(report.experiments)}")
        for exp, digest in report.registrations.items():
            lines.append(f"REGISTRATION {exp}  {digest or 'unreadable'}  <- compare with the digest "
                         "published at `benchclaw prereg` (or pass --registered)")
        for s in report.sections if report.fatal is None else ():
            state = "ok" if s.ok else ("FAIL" if s.ran else "not run")
            extra = f", {s.failure_count} failed" if s.failure_count else ""
            lines.append(f"{s.number} {s.name:<9} {state:<7} {_counts(s.counts)}{extra}")
    if report.fatal is None:
        lines.extend(f"NOTE      {note}" for note in report.notes)
        for prefix, n, why in report.unproven:
            lines.append(f"UNPROVEN  {prefix} ({n} files): {why}")
    shown = report.failures()[:max_failures]
    if shown:
        lines.append("first failures:")
        from ..formats.names import terminal_safe  # a failure names bundle content: one line, escaped

        lines.extend(f"  [{s.number} {s.name}] {terminal_safe(str(err), keep_newlines=False)}" for s, err in shown)
    verdict = {0: "VERIFIED", 1: f"NOT VERIFIED: {report.failure_count} failure(s)",
               2: "UNREADABLE: not a bundle the verifier will read"}[report.exit_code]
    lines.append(verdict)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    from ..formats.names import json_terminal_safe, terminal_safe
    from . import verify_bundle

    report = verify_bundle(args.bundle, registered=args.registered)
    try:
        # A bundle is hostile input: nothing from it reaches the terminal unescaped.
        if args.json:
            from ..formats import jsonio

            sys.stdout.write(json_terminal_safe(jsonio.dumps_pretty(report.to_dict())) + "\n")
        elif args.quiet:
            sys.stderr.write(terminal_safe(render_text(report, args.failures, quiet=True)) + "\n")
        else:
            sys.stdout.write(terminal_safe(render_text(report, args.failures)) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    sys.exit(report.exit_code)
