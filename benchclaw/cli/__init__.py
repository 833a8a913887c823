"""The ``benchclaw`` command: a thin click layer over the library.

Commands are registered by name in ``COMMANDS`` and imported only when invoked (or when
``--help`` lists them, which reads nothing but the module's docstring-bearing command),
so start-up stays well under 0.3 s even though some commands need ``openai`` or ``jinja2``.
Every command raises ``BenchClawError`` subclasses; ``main`` turns them into a message on
stderr and the error's exit code, never a traceback (unless ``--verbose``).
"""

from __future__ import annotations

import importlib
import sys

import click

from ..errors import BenchClawError, EXIT_USAGE
from ..formats.names import terminal_safe

__all__ = ["main", "cli", "COMMANDS"]

# name -> (module under benchclaw.cli, attribute, one-line help shown by `benchclaw --help`)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "demo": ("demo", "demo", "Run the whole pipeline on the built-in simulator (no key, no network)."),
    "runs": ("runs", "runs", "List, show and check the evidence in a runs directory."),
    "tasks": ("tasks", "tasks", "List, show and check task fixtures."),
    "try": ("try_", "try_cmd", "Run one agent run of one task on one tier."),
    "sim": ("sim", "sim", "The built-in deterministic simulator (serve it over HTTP)."),
    "prereg": ("experiments", "prereg", "Pre-register an experiment spec (record its digest)."),
    "deviate": ("experiments", "deviate", "Record a deviation before the runs it affects."),
    "run": ("experiments", "run", "Run (or resume) a registered experiment's grid."),
    "ledger": ("ledger", "ledger", "Show a benchmark's token/USD ledger."),
    "report": ("report", "report", "Policy tables and pre-registered decisions of an experiment."),
    "compare": ("compare", "compare", "Compare experiments: chosen policies, spec differences, claims."),
    "correct": ("experiments", "correct", "Record that an earlier published claim was wrong, and why."),
    "build": ("site", "build", "Build the static replay site."),
    "serve": ("site", "serve", "Preview the built site on 127.0.0.1."),
    "export": ("bundle", "export", "Export a reproducible evidence bundle (zip)."),
    "studio": ("studio", "studio", "Serve the live public studio: visitors run tasks within budgets."),
    "merge": ("runs", "merge", "Merge another machine's runs directory (a shard) into this one."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        spec = COMMANDS.get(name)
        if spec is None:
            return None
        module = importlib.import_module(f"{__name__}.{spec[0]}")
        return getattr(module, spec[1])

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Listing uses the short help above, so `--help` imports no command module.
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--verbose", "-v", is_flag=True, help="Show tracebacks of unexpected errors.")
@click.version_option(package_name="benchclaw")
@click.pass_context
def cli(ctx: click.Context, verbose: bool) -> None:
    """BenchClaw: which model tier is good enough, and which routing policy is
    cheapest at the pass rate you need.

    Start with `benchclaw demo`: it runs the whole pipeline on the built-in
    simulator, with no key and no network.
    """
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose


def run_cli(group: click.Command, argv: list[str] | None = None, prog: str | None = None) -> int:
    """Invoke a click command; map BenchClawError to (message, exit code). Returns the code."""
    argv = sys.argv[1:] if argv is None else argv
    verbose = "--verbose" in argv or "-v" in argv
    try:
        rv = group.main(args=argv, prog_name=prog, standalone_mode=False)
        # With standalone_mode=False click returns ctx.exit(n)'s code instead of exiting.
        return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
    except BenchClawError as err:
        if verbose:
            import traceback

            traceback.print_exc()
        click.echo(f"error: {terminal_safe(str(err), keep_newlines=False)}", err=True)
        return err.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return EXIT_USAGE if e.exit_code == 2 else e.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:  # a path the command was given cannot be used: bad input, not a bug
        if verbose:
            raise
        where = f"{e.filename}: " if e.filename else ""
        click.echo(terminal_safe(f"error: {where}{e.strerror or e}", keep_newlines=False), err=True)
        return EXIT_USAGE
    except Exception as e:  # a bug: say so without a traceback unless asked
        if verbose:
            raise
        click.echo(f"internal error: {type(e).__name__}: {terminal_safe(str(e), keep_newlines=False)} "
                   "(run with --verbose for the traceback)", err=True)
        return 3


def main() -> None:
    sys.exit(run_cli(cli, prog="benchclaw"))
