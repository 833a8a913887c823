"""Every command has help text with an example and is documented in docs/CLI.md."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from benchclaw.cli import COMMANDS, cli

ROOT = Path(__file__).resolve().parents[1]
CLI_DOC = (ROOT / "docs" / "CLI.md").read_text(encoding="utf-8")


def all_commands():
    ctx = click.Context(cli)
    for name in sorted(COMMANDS):
        cmd = cli.get_command(ctx, name)
        yield (name,), cmd
        if isinstance(cmd, click.Group):
            for sub in sorted(cmd.commands):
                yield (name, sub), cmd.commands[sub]


@pytest.mark.parametrize("path,cmd", list(all_commands()), ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_every_command_has_help_with_an_example_and_is_documented(path, cmd):
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert (cmd.help or "").strip(), f"benchclaw {' '.join(path)} has no help text"
    if not isinstance(cmd, click.Group) or len(path) == 1:
        assert "Example:" in result.output, f"benchclaw {' '.join(path)} --help shows no example"
    assert f"benchclaw {' '.join(path)}" in CLI_DOC, f"docs/CLI.md does not mention benchclaw {' '.join(path)}"


def test_readme_has_exactly_the_two_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"<!-- (main|test)-command -->\n```sh\n(.+?)\n```", readme)
    assert [b[0] for b in blocks] == ["main", "test"]
    assert blocks[0][1].endswith("benchclaw demo")
    assert "pytest" in blocks[1][1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "<!-- test-command -->" in ci and "README.md" in ci


def test_verify_help_is_documented():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "from benchclaw.verify.cli import main; main()", "--help"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "bundle" in out.stdout
    assert "benchclaw-verify bundle.zip" in CLI_DOC
