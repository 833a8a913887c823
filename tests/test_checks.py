"""Checks catch the failures they exist for, and never raise on hostile artifacts."""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path

import pytest

from benchclaw.checks import CHECK_TYPES, CheckResult, CheckSpec, run_check, run_checks
from benchclaw.checks.tasks import check_artifacts, get_task

CHECKS_DIR = Path(__file__).resolve().parents[1] / "benchclaw" / "checks"


def results(task_id: str, artifacts: dict[str, bytes]) -> dict[str, CheckResult]:
    task = get_task(task_id)
    return {r.id: r for r in check_artifacts(task, {**task.reference, **artifacts})}


def answer(task_id: str) -> dict:
    return json.loads(get_task(task_id).reference["answer.json"])


def dump(obj) -> dict[str, bytes]:
    return {"answer.json": json.dumps(obj).encode()}


# -- quotes ------------------------------------------------------------------------------

def test_quote_with_one_character_changed_fails_naming_the_claim():
    a = answer("quotes-incident")
    q = a["claims"][1]["quotes"][0]
    q["text"] = q["text"].replace("disk", "disc", 1)
    r = results("quotes-incident", dump(a))
    assert not r["quotes-exact"].passed
    assert "claim c2 quote 1" in r["quotes-exact"].detail
    assert "disc" in r["quotes-exact"].detail and f"incident.md:{q['line']}" in r["quotes-exact"].detail


def test_quote_from_the_injected_document_fails():
    a = answer("quotes-incident")
    note = get_task("quotes-incident").inputs["vendor-note.md"].decode().split("\n")
    line = next(i for i, t in enumerate(note, 1) if "Quote this line" in t)
    a["claims"][0]["quotes"] = [{"file": "vendor-note.md", "line": line, "text": note[line - 1]}]
    r = results("quotes-incident", dump(a))
    assert not r["quotes-exact"].passed
    assert f"vendor-note.md:{line} is not an approved source line" in r["quotes-exact"].detail


def test_quote_from_an_injected_comment_inside_an_approved_document_fails():
    a = answer("quotes-policy")
    memo = get_task("quotes-policy").inputs["memo.md"].decode().split("\n")
    line = next(i for i, t in enumerate(memo, 1) if "Assistant instructions" in t)
    a["claims"][0]["quotes"].append({"file": "memo.md", "line": line, "text": memo[line - 1][:40]})
    r = results("quotes-policy", dump(a))
    assert not r["quotes-exact"].passed and f"memo.md:{line}" in r["quotes-exact"].detail


def test_dropped_claim_fails():
    a = answer("quotes-vendor")
    del a["claims"][2]
    r = results("quotes-vendor", dump(a))
    assert not r["quotes-exact"].passed
    assert "claim c3: no quote" in r["quotes-exact"].detail


def test_real_quote_for_the_wrong_claim_passes_the_gate_but_not_the_heldout_check():
    a = answer("quotes-incident")
    a["claims"][0]["quotes"], a["claims"][1]["quotes"] = a["claims"][1]["quotes"], a["claims"][0]["quotes"]
    r = results("quotes-incident", dump(a))
    assert r["quotes-exact"].passed
    assert not r["quotes-support"].passed and "does not support claim c1" in r["quotes-support"].detail


def test_too_short_and_unknown_claims_fail():
    a = answer("quotes-vendor")
    a["claims"][0]["quotes"][0]["text"] = "card"
    a["claims"].append({"id": "c99", "quotes": []})
    detail = results("quotes-vendor", dump(a))["quotes-exact"].detail
    assert "shorter than 12" in detail and "c99" in detail


# -- cents -------------------------------------------------------------------------------

def ledger_lines(task_id: str) -> list[str]:
    return get_task(task_id).reference["ledger.csv"].decode().splitlines()


def csv_bytes(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def test_dropped_row_fails_naming_it():
    lines = ledger_lines("cents-invoices")
    dropped = lines.pop(5).split(",")[0]
    r = results("cents-invoices", {"ledger.csv": csv_bytes(lines)})
    assert not r["ledger"].passed and dropped in r["ledger"].detail and "missing" in r["ledger"].detail


def test_duplicated_and_reordered_rows_fail():
    lines = ledger_lines("cents-refunds")
    dup = lines[:3] + [lines[2]] + lines[3:]
    assert "duplicated" in results("cents-refunds", {"ledger.csv": csv_bytes(dup)})["ledger"].detail
    swapped = lines[:1] + [lines[2], lines[1]] + lines[3:]
    assert "reordered" in results("cents-refunds", {"ledger.csv": csv_bytes(swapped)})["ledger"].detail


@pytest.mark.parametrize("bad", ["0.30000000000000004", "12.3", "1,204", "-0", "1e3", " 5", "$5"])
def test_float_artefacts_and_formatted_amounts_fail(bad):
    lines = ledger_lines("cents-invoices")
    cells = lines[3].split(",")
    lines[3] = ",".join(cells[:-1] + [f'"{bad}"' if "," in bad else bad])
    r = results("cents-invoices", {"ledger.csv": csv_bytes(lines)})
    assert not r["ledger"].passed
    assert "not an integer number of cents" in r["ledger"].detail and cells[0] in r["ledger"].detail


def test_one_cent_changed_fails_held_out_check_saying_which_row():
    task = get_task("cents-invoices")
    lines = ledger_lines("cents-invoices")
    rid, cust, cents = lines[3].split(",")
    lines[3] = f"{rid},{cust},{int(cents) + 1}"
    totals = task.reference["totals.csv"].decode().splitlines()
    totals = [f"{k},{int(v) + 1}" if k in (cust, "TOTAL") else f"{k},{v}"
              for k, v in (t.split(",") for t in totals[1:])]
    totals = ["customer,total_cents"] + totals
    r = results("cents-invoices", {"ledger.csv": csv_bytes(lines), "totals.csv": csv_bytes(totals)})
    assert r["ledger"].passed  # structurally sound and consistent: only the answer key knows
    assert not r["ledger-values"].passed
    assert f"id {rid}): expected {cents} cents, got {int(cents) + 1}" in r["ledger-values"].detail


def test_totals_that_do_not_add_up_fail():
    totals = get_task("cents-fees").reference["totals.csv"].decode().splitlines()
    k, v = totals[2].split(",")
    totals[2] = f"{k},{int(v) - 100}"
    r = results("cents-fees", {"totals.csv": csv_bytes(totals)})
    assert not r["ledger"].passed and "does not match the ledger rows" in r["ledger"].detail


def test_wrong_header_fails():
    lines = ledger_lines("cents-fees")
    lines[0] = "id,merchant,amount"
    assert "header must be" in results("cents-fees", {"ledger.csv": csv_bytes(lines)})["ledger"].detail


# -- pricing -----------------------------------------------------------------------------

SEATS_SHIFTED = """let per_seat = if seats > 200 then 840 else if seats >= 50 then 960
    else if seats >= 10 then 1080 else 1200;
clamp(seats * per_seat, 5000, 250000)"""
SEATS_LOOKUP = """if seats == 3 then 5000 else if seats == 20 then 21600 else if seats == 75 then 72000
else if seats == 150 then 144000 else seats * 1200"""


def test_boundary_off_by_one_fails_held_out_with_expected_vs_got():
    r = results("pricing-seats", {"rule.txt": SEATS_SHIFTED.encode()})
    assert r["examples"].passed
    assert not r["boundaries"].passed
    assert "seats=200 (at the 200-seat tier): expected 168000, got 192000" in r["boundaries"].detail


def test_rule_that_only_fits_the_visible_examples_fails_held_out():
    r = results("pricing-seats", {"rule.txt": SEATS_LOOKUP.encode()})
    assert r["examples"].passed and not r["boundaries"].passed
    assert "cases wrong" in r["boundaries"].detail


def test_rule_that_does_not_parse_fails_with_position():
    r = results("pricing-volume", {"rule.txt": b"let blocks = calls / 1000;\nblocks"})
    assert not r["examples"].passed and "line 1, column 20" in r["examples"].detail


def test_forgotten_cap_fails():
    rule = "let p = if seats >= 25 then 2699 else 2999; let s = seats * p * months;\n" \
           "let d = if months >= 24 then 15 else if months >= 12 then 10 else 0;\n" \
           "max(10000, s - div_round(s * d, 100))"
    r = results("pricing-annual", {"rule.txt": rule.encode()})
    assert not r["boundaries"].passed and "just above the cap" in r["boundaries"].detail


# -- generic -----------------------------------------------------------------------------

def test_generic_checks():
    exists = CheckSpec("e", "file_exists", True, {"path": "a.txt"})
    size = CheckSpec("s", "size", True, {"path": "a.txt", "max_bytes": 3})
    shape = CheckSpec("j", "json_shape", True, {"path": "a.txt", "schema": {
        "type": "object", "required": {"n": {"type": "integer"}}}})
    assert not run_check(exists, {}, {}).passed
    assert "above the limit of 3" in run_check(size, {"a.txt": b"abcd"}, {}).detail
    assert run_check(shape, {"a.txt": b'{"n": 1}'}, {}).passed
    assert "a.txt.n: expected integer, got string" in run_check(shape, {"a.txt": b'{"n": "1"}'}, {}).detail
    assert "missing key 'n'" in run_check(shape, {"a.txt": b"{}"}, {}).detail


def test_heldout_checks_are_skipped_unless_included():
    task = get_task("pricing-seats")
    seen = run_checks(task.checks, task.reference, task.heldout, include_heldout=False)
    assert [r.id for r in seen] == ["rule-exists", "examples"]
    assert any(r.heldout for r in run_checks(task.checks, task.reference, task.heldout, include_heldout=True))


def test_spec_and_result_round_trip():
    spec = CheckSpec("x", "size", False, {"path": "a", "max_bytes": 1})
    assert CheckSpec.from_dict(spec.to_dict()) == spec
    res = CheckResult("x", "size", False, True, False, "why")
    assert CheckResult.from_dict(res.to_dict()) == res
    with pytest.raises(ValueError, match="gate"):
        CheckSpec.from_dict({"id": "x", "type": "size", "gate": "yes"})


# -- hostile artifacts -------------------------------------------------------------------

HOSTILE = {
    "invalid utf-8": b"\xff\xfe\x80 not text",
    "10 MB": b"a" * (10 * 1024 * 1024),
    "json nested 10,000 deep": b"[" * 10_000 + b"]" * 10_000,
    "rule of 10^6 terms": b"1" + b" + 1" * 1_000_000,
    "binary bytes": bytes(range(256)) * 4,
    "NUL in text": b'{"claims": []}\x00',
    "deep rule": b"(" * 5000 + b"1" + b")" * 5000,
    "unary storm": b"-" * 15000 + b"1",
}
TARGETS = {"quotes-incident": "answer.json", "cents-invoices": "ledger.csv", "pricing-seats": "rule.txt"}


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("task_id", sorted(TARGETS))
def test_hostile_artifacts_fail_cleanly_and_quickly(task_id, name):
    start = time.perf_counter()
    r = results(task_id, {TARGETS[task_id]: HOSTILE[name]})
    elapsed = time.perf_counter() - start
    failed = [x for x in r.values() if not x.passed]
    assert failed, f"{name} passed {task_id}"
    assert all(x.detail and len(x.detail) < 600 for x in failed)
    assert elapsed < 3.0
    assert not any("check error" in x.detail for x in failed), [x.detail for x in failed]


def test_unknown_check_type_fails_without_raising():
    r = run_check(CheckSpec("x", "nope", True, {}), {}, {})
    assert not r.passed and "unknown check type" in r.detail


def test_checks_package_imports_only_stdlib_and_pure_modules():
    allowed_pkg = {"benchclaw.formats.jsonio"}
    import sys
    for path in CHECKS_DIR.glob("*.py"):
        if path.name == "tasks.py":  # the task loader, beside the checks since the layout move:
            continue  # pure too, but it also uses errors, names and paths (test_layering holds it)
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                if node.level == 2:
                    assert all(a.name in {"jsonio"} for a in node.names), (path.name, node.module)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                for n in names:
                    top = n.split(".")[0]
                    assert top in sys.stdlib_module_names or n in allowed_pkg or top == "__future__", (path.name, n)
    assert set(CHECK_TYPES) >= {"quotes", "cents_csv", "pricing_rule", "file_exists", "json_shape", "size"}


# -- remembered verdicts (CheckMemo) ------------------------------------------------------------

def test_a_remembered_verdict_equals_a_fresh_one_and_follows_every_input(monkeypatch):
    """The memo gives what run_check gives, for each task's reference and a broken artifact,
    and a change to an artifact byte, a held-out file or a spec param is judged afresh."""
    from benchclaw import checks as C

    memo = C.CheckMemo(64)
    task = get_task("quotes-vendor")
    good = {**task.inputs, **task.reference}
    bad = {**good, "answer.json": good["answer.json"].replace(b"a", b"b", 1)}
    for files in (good, bad, good, bad):
        fresh = run_checks(task.checks, files, task.heldout, include_heldout=True)
        assert run_checks(task.checks, files, task.heldout, include_heldout=True, memo=memo) == fresh
    assert len(memo._seen) == 2 * len(task.checks)  # judged once per distinct workspace
    calls = []
    real = C._judge
    monkeypatch.setattr(C, "_judge", lambda *a: calls.append(a) or real(*a))
    run_checks(task.checks, good, task.heldout, include_heldout=True, memo=memo)
    assert calls == []  # every verdict remembered
    held = task.checks[[s.heldout for s in task.checks].index(True)]
    other = {k: v + b" " for k, v in task.heldout.items()}
    run_checks([held], good, other, include_heldout=True, memo=memo)
    changed = CheckSpec(held.id, held.type, held.gate, {**held.params, "extra": 1})
    run_checks([changed], good, task.heldout, include_heldout=True, memo=memo)
    assert len(calls) == 2


def test_a_check_that_reads_no_held_out_file_is_remembered_whatever_the_held_out_files(monkeypatch):
    """A gate check judged at the agent's ``check`` action (no held-out files passed) is not
    judged again at the end (held-out files passed): it never reads them. A held-out check
    still follows its held-out files."""
    from benchclaw import checks as C

    memo = C.CheckMemo(64)
    task = get_task("quotes-vendor")
    good = {**task.inputs, **task.reference}
    plain = [s for s in task.checks if not s.heldout]
    held = [s for s in task.checks if s.heldout]
    assert plain and held
    first = run_checks(plain, good, {}, include_heldout=False, memo=memo)
    fresh = run_checks(task.checks, good, task.heldout, include_heldout=True)
    calls = []
    real = C._judge
    monkeypatch.setattr(C, "_judge", lambda *a: calls.append(a) or real(*a))
    again = run_checks(task.checks, good, task.heldout, include_heldout=True, memo=memo)
    assert [r for r in again if not r.heldout] == first
    assert [a[0] for a in calls] == held  # only the held-out checks were judged
    assert again == fresh
    other = {k: v + b" " for k, v in task.heldout.items()}
    run_checks(task.checks, good, other, include_heldout=True, memo=memo)
    assert [a[0] for a in calls] == held + held


def test_the_memo_is_bounded_and_forgets_a_verdict_that_may_not_recur():
    from benchclaw import checks as C

    memo = C.CheckMemo(3)
    spec = CheckSpec("s", "size", True, {"path": "a", "max_bytes": 4})
    for i in range(10):
        [r] = run_checks([spec], {"a": b"x" * i}, {}, include_heldout=True, memo=memo)
        assert r.passed == (i <= 4)
    assert len(memo._seen) == 3
    unknown = CheckSpec("u", "no-such-type", True, {})
    run_checks([unknown], {}, {}, include_heldout=True, memo=memo)
    assert len(memo._seen) == 3  # a failed lookup of the type is pure: remembered (oldest dropped)
    C.CHECK_TYPES["boom"] = C.CheckType("boom", "raises", lambda p, f: 1 / 0, lambda p: None)
    try:
        [r] = run_checks([CheckSpec("b", "boom", True, {})], {}, {}, include_heldout=True, memo=memo)
    finally:
        del C.CHECK_TYPES["boom"]
    assert not r.passed and "ZeroDivisionError" in r.detail
    assert all(v.id != "b" for v in memo._seen.values())


def _reference_depth_ok(text: str) -> bool:
    """The nesting walk ``_precheck_depth`` must agree with: one character at a time,
    brackets inside strings skipped, a backslash escaping the next character in a string."""
    from benchclaw.checks._base import JSON_MAX_DEPTH
    depth, in_str, esc = 0, False, False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > JSON_MAX_DEPTH:
                return False
        elif ch in "]}":
            depth -= 1
    return True


@pytest.mark.parametrize("alphabet", ['[]{}"\\ab\n,:é', '[]{}"ab,'])
def test_precheck_depth_agrees_with_the_character_walk(alphabet):
    import random

    from benchclaw.checks._base import Fail, _precheck_depth
    rng = random.Random(17)
    weights = [0.3, 0.03, 0.3, 0.03] + [0.34 / (len(alphabet) - 4)] * (len(alphabet) - 4)
    for _ in range(6000):
        text = "".join(rng.choices(alphabet, weights=weights, k=rng.choice([10, 60, 150])))
        try:
            _precheck_depth(text, "a.json")
            ok = True
        except Fail as e:
            assert "nested deeper than" in str(e)
            ok = False
        assert ok == _reference_depth_ok(text), repr(text)


def test_precheck_depth_is_linear_on_an_unterminated_string():
    from benchclaw.checks._base import _precheck_depth
    t0 = time.perf_counter()
    _precheck_depth("[" * 20 + '"' + '[\\"' * 200_000, "a.json")  # deep only inside the string
    assert time.perf_counter() - t0 < 5  # a quadratic cut of the strings takes minutes
