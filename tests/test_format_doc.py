"""The worked example in docs/FORMAT.md is real: its chain verifies and its run id is right."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from benchclaw.formats import jsonio
from benchclaw.formats.records import encode, parse_line, verify_chain

DOC = (Path(__file__).resolve().parents[1] / "docs" / "FORMAT.md").read_text(encoding="utf-8")


def example():
    section = DOC[DOC.index("### Worked example"):DOC.index("## 5. Crash recovery")]
    lines = re.search(r"```jsonl\n(.*?)```", section, re.S).group(1).encode().splitlines()
    run_id = re.search(r"sealed as `runs/[0-9a-f]{2}/([0-9a-f]{64})\.jsonl`", section).group(1)
    blobs = dict(re.findall(r"`objects/[0-9a-f]{2}/([0-9a-f]{8})…` holding (?:the exact bytes\n  )?`([^`]+)`",
                            section))
    return lines, run_id, blobs


def test_worked_example_chain_and_run_id():
    lines, run_id, _ = example()
    records = verify_chain(lines, "FORMAT.md example")
    assert [r.kind for r in records] == ["run.start", "call", "action", "run.end"]
    assert hashlib.sha256(b"".join(line + b"\n" for line in lines)).hexdigest() == run_id


def test_worked_example_lines_are_canonical_and_blobs_match():
    lines, _, blobs = example()
    for i, line in enumerate(lines):
        assert encode(parse_line(line, f"line {i + 1}")) == line  # exactly what the store writes
    bodies = [jsonio.loads(line)["body"] for line in lines]
    refs = {bodies[1]["reply"], bodies[2]["observation"]}
    assert len(blobs) == 2
    for prefix, text in blobs.items():
        [ref] = [r for r in refs if r.startswith("sha256:" + prefix)]
        assert "sha256:" + hashlib.sha256(text.encode()).hexdigest() == ref
