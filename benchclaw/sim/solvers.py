"""Task knowledge of the simulator: derive a correct artifact from the text a model reads.

The simulated model "sees only the messages it is sent", so these solvers work like a
careful reader, never from the task folder: the family is recognised from the prompt,
the rules are read from fixed phrases the task prompts and documents use ("Rounding rule:
... an exact half cent is rounded away from zero", "Tier mode: graduated", a price table,
"Approved sources: ..."), the answer is computed from the documents the model has read,
and it is checked against the worked examples the task shows, as a real model would.
A solver that cannot do this raises ``SolveError`` (the engine then reads more or gives
up). ``MISTAKES`` are the family-specific ways a weaker model goes wrong; each takes
``(artifact, docs, rng)`` and returns a plausible but wrong artifact.
"""

from __future__ import annotations

import csv
import io
import json
import random
import re
from decimal import ROUND_HALF_DOWN, ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Callable

from ..checks.rulelang import PricingRuleError, parse_pricing_rule
from . import solvers_api as api_model
from . import solvers_pricing as pricing_model
from . import solvers_sql as sql_model
from ..formats.sim_rules import detect_family  # shared with the verifier: a write's reasoning effort depends on it
from .lures import find_lures

__all__ = ["SolveError", "detect_family", "parse_workspace", "solve", "MISTAKES", "SOLVERS",
           "render_workspace_section"]


class SolveError(Exception):
    """The solver cannot derive an answer from what it was shown (names what is missing)."""


def render_workspace_section(readable: list[str], writable: list[str]) -> str:
    """Same text as ``benchclaw.checks.tasks.render_workspace_section`` (imported lazily)."""
    from ..checks.tasks import render_workspace_section as render
    return render(readable, writable)


def parse_workspace(prompt: str) -> tuple[list[str], list[str]]:
    """(readable, writable) from the '## Workspace' section the runtime appends to the
    prompt; ([], []) when there is none."""
    readable: list[str] = []
    writable: list[str] = []
    start = prompt.rfind("## Workspace") if isinstance(prompt, str) else -1
    if start < 0:
        return readable, writable
    target = None
    for line in prompt[start:].split("\n")[1:]:
        if line.startswith("## "):
            break
        if line.strip() == "Files you may read:":
            target = readable
        elif line.strip() == "Files you may write:":
            target = writable
        else:
            m = re.match(r"^- `([^`]+)`\s*$", line.strip())
            if m and target is not None:
                target.append(m.group(1))
    return readable, writable


def _need(docs: dict[str, str], path: str) -> str:
    if path not in docs:
        raise SolveError(f"I have not read {path} yet")
    return docs[path]


def _output(outputs: list[str], suffix: str, default: str) -> str:
    return next((o for o in outputs if o.endswith(suffix)), default)


# ---------------------------------------------------------------------------- quotes

_STOP = {"the", "a", "an", "of", "to", "in", "on", "at", "and", "or", "is", "was", "were", "be",
         "by", "for", "with", "that", "this", "it", "its", "we", "our", "their", "they", "will"}


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+(?:[-:.,'%$][a-z0-9]+)*", text.lower())


def _longest_run(a: list[str], b: list[str]) -> int:
    best, prev = 0, [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b, 1):
            if x == y:
                cur[j] = prev[j - 1] + 1
                best = max(best, cur[j])
        prev = cur
    return best


def _quotable(line: str) -> str:
    """The line without its Markdown decoration (list marker, table pipes, quote mark)."""
    text = re.sub(r"^\s*(?:[-*>]|\d+\.|#+|\|)\s*", "", line).rstrip()
    return re.sub(r"\s*\|$", "", text)


def _candidate_lines(approved: list[str], docs: dict[str, str]) -> list[tuple[str, int, str]]:
    out = []
    for path in approved:
        for n, line in enumerate(_need(docs, path).split("\n"), 1):
            text = _quotable(line)
            if len(text) >= 12 and "<!--" not in line and not find_lures(line):
                out.append((path, n, text))
    return out


def solve_quotes(prompt: str, docs: dict[str, str], outputs: list[str]) -> dict[str, str]:
    m = re.search(r"^Approved sources:(.*)$", prompt, re.M)
    claims = re.findall(r"^- \*\*(\w+)\*\*: (.+)$", prompt, re.M)
    if not m or not claims:
        raise SolveError("the prompt lists no approved sources or no claims")
    candidates = _candidate_lines(re.findall(r"`([^`]+)`", m.group(1)), docs)
    answer = []
    for cid, claim in claims:
        words = _words(claim)
        key = set(words) - _STOP

        def score(c: tuple[str, int, str]) -> tuple[int, int]:
            line_words = _words(c[2])
            return _longest_run(words, line_words), len(key & set(line_words))
        best = max(candidates, key=score, default=None)
        if best is None or score(best)[0] < 2:
            raise SolveError(f"no approved line supports claim {cid}")
        answer.append({"id": cid, "quotes": [{"file": best[0], "line": best[1], "text": best[2]}]})
    return {_output(outputs, ".json", "answer.json"): json.dumps({"claims": answer}, indent=2, ensure_ascii=False) + "\n"}


# ---------------------------------------------------------------------------- cents

_ROUNDING = {"to the even cent": ROUND_HALF_EVEN, "away from zero": ROUND_HALF_UP,
             "toward zero": ROUND_HALF_DOWN}


def _csv_rows(text: str) -> list[list[str]]:
    return [r for r in csv.reader(io.StringIO(text, newline="")) if r]


def _csv_text(rows: list[list[str]]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def parse_amount(raw: str, decimal_comma: bool) -> Decimal:
    """A money amount as printed (thousands separators, parentheses for negatives)."""
    s = raw.strip().replace("$", "").replace("€", "").replace(" ", "")
    neg = s.startswith("(") and s.endswith(")")
    s = s.strip("()")
    s = s.replace(".", "").replace(",", ".") if decimal_comma else s.replace(",", "")
    try:
        value = Decimal(s)
    except InvalidOperation:
        raise SolveError(f"cannot read the amount {raw!r}") from None
    return -value if neg else value


def _cents_rules(prompt: str) -> dict:
    rounding = re.search(r"half cent is rounded (to the even cent|away from zero|toward zero)", prompt)
    source = re.search(r"^Input: `([^`]+)`", prompt, re.M)
    outs = re.findall(r"Write `([^`]+)` with the header `([^`]+)`", prompt)
    if not rounding or not source or len(outs) < 2:
        raise SolveError("the prompt states no rounding rule, input file or output headers")
    sign = re.search(r"\*\*Sign rule:\*\* rows whose `(\w+)` is (.+?) are money paid out", prompt)
    label = re.search(r"last row `(\w+)`", prompt)
    return {"mode": _ROUNDING[rounding.group(1)], "source": source.group(1),
            "ledger": (outs[0][0], outs[0][1].split(",")), "totals": (outs[1][0], outs[1][1].split(",")),
            "decimal_comma": "decimal comma" in prompt,
            "sign": (sign.group(1), re.findall(r"`([^`]+)`", sign.group(2))) if sign else None,
            "label": label.group(1) if label else "TOTAL",
            "examples": re.findall(r"^- `([^`]+)`: `[^`]*` becomes `(-?\d+)`", prompt, re.M)}


def solve_cents(prompt: str, docs: dict[str, str], outputs: list[str]) -> dict[str, str]:
    rules = _cents_rules(prompt)
    rows = _csv_rows(_need(docs, rules["source"]))
    head = rows[0]
    (ledger_path, lhead), (totals_path, thead) = rules["ledger"], rules["totals"]
    try:
        i, g = head.index(lhead[0]), head.index(lhead[1])
        a = next(k for k, h in enumerate(head) if "amount" in h)
    except (ValueError, StopIteration):
        raise SolveError(f"{rules['source']} lacks the columns the output needs") from None
    ledger, sums = [lhead], {}
    for r in rows[1:]:
        cents = int((parse_amount(r[a], rules["decimal_comma"]) * 100).quantize(Decimal(1), rounding=rules["mode"]))
        if rules["sign"] and r[head.index(rules["sign"][0])] in rules["sign"][1]:
            cents = -abs(cents)
        ledger.append([r[i], r[g], str(cents)])
        sums[r[g]] = sums.get(r[g], 0) + cents
    got = {row[0]: row[2] for row in ledger[1:]}
    for rid, want in rules["examples"]:
        if got.get(rid) != want:
            raise SolveError(f"my reading of {rid} gives {got.get(rid)}, the example says {want}")
    totals = [thead] + [[k, str(sums[k])] for k in sorted(sums)] + [[rules["label"], str(sum(sums.values()))]]
    return {ledger_path: _csv_text(ledger), totals_path: _csv_text(totals)}


# ---------------------------------------------------------------------------- pricing

def solve_pricing(prompt: str, docs: dict[str, str], outputs: list[str]) -> dict[str, str]:
    m = re.search(r"Variables of the rule: ((?:`\w+`(?:, | and )?)+)", prompt)
    doc = re.search(r"Read `([^`]+)`", prompt)
    if not m or not doc:
        raise SolveError("the prompt names no variables or no policy document")
    variables = re.findall(r"`(\w+)`", m.group(1))
    try:
        policy = pricing_model.parse_pricing_policy(_need(docs, doc.group(1)), variables)
    except pricing_model.PricingPolicyError as e:
        raise SolveError(f"{doc.group(1)}: {e}") from None
    rule = pricing_model.build_rule(policy)
    _verify_examples(rule, policy)
    return {_output(outputs, ".txt", "rule.txt"): rule}


def _verify_examples(rule: str, policy: "pricing_model.PricingPolicy") -> None:
    try:
        parsed = parse_pricing_rule(rule, policy.variables)
        for env, want in policy.examples:
            if parsed.evaluate(env) != want:
                raise SolveError(f"my rule gives {parsed.evaluate(env)} for {env}, the policy says {want}")
    except PricingRuleError as e:
        raise SolveError(f"my rule does not evaluate: {e}") from None


# ---------------------------------------------------------------------------- sql

def _doc_with(docs: dict[str, str], marker: str, what: str) -> str:
    for path in sorted(docs):
        if marker in docs[path]:
            return docs[path]
    raise SolveError(f"I have not read {what} yet")


def _sql_migration(docs: dict[str, str], flaws: frozenset) -> str:
    request = _doc_with(docs, "## Changes", "the change request")
    schema = _doc_with(docs, "CREATE TABLE", "the schema")
    try:
        changes = sql_model.parse_changes(request)
        title = re.search(r"^# (.+)$", request, re.M)
        return sql_model.render(changes, schema, flaws, title.group(1) if title else "")
    except sql_model.ChangeError as e:
        raise SolveError(str(e)) from None


def solve_sql(prompt: str, docs: dict[str, str], outputs: list[str]) -> dict[str, str]:
    return {_output(outputs, ".sql", "migration.sql"): _sql_migration(docs, frozenset())}


# ---------------------------------------------------------------------------- api

def _api_doc(docs: dict[str, str]) -> "api_model.ApiDoc":
    try:
        return api_model.parse_api(_doc_with(docs, "Base path:", "the API description"))
    except api_model.ApiDocError as e:
        raise SolveError(str(e)) from None


def solve_api(prompt: str, docs: dict[str, str], outputs: list[str]) -> dict[str, str]:
    return {_output(outputs, ".json", "contract.json"): api_model.render(api_model.build_cases(_api_doc(docs)))}


SOLVERS: dict[str, Callable[[str, dict[str, str], list[str]], dict[str, str]]] = {
    "quotes": solve_quotes, "cents": solve_cents, "pricing": solve_pricing, "sql": solve_sql,
    "api": solve_api,
}


def solve(family: str, prompt: str, docs: dict[str, str], outputs: list[str]) -> dict[str, str]:
    """A correct artifact (path -> text) for the task in ``prompt`` from the documents
    read so far. Raises SolveError when the family is unknown or something is missing."""
    if family not in SOLVERS:
        raise SolveError(f"I do not know how to solve a task of family {family!r}")
    return SOLVERS[family](prompt, docs, outputs)


# ---------------------------------------------------------------------------- mistakes

def _answer(artifact: dict[str, str]) -> tuple[str, dict]:
    path = next((p for p in sorted(artifact) if p.endswith(".json")), None)
    if path is None:
        raise SolveError("no JSON answer to spoil")
    return path, json.loads(artifact[path])


def _paraphrase_char(artifact: dict[str, str], docs: dict[str, str], rng: random.Random) -> dict[str, str]:
    path, ans = _answer(artifact)
    quote = rng.choice([q for c in ans["claims"] for q in c["quotes"]])
    text = quote["text"]
    spots = [i for i, ch in enumerate(text) if ch.isalpha()]
    i = rng.choice(spots)
    swap = "e" if text[i].lower() != "e" else "a"
    quote["text"] = text[:i] + (swap.upper() if text[i].isupper() else swap) + text[i + 1:]
    return {**artifact, path: json.dumps(ans, indent=2, ensure_ascii=False) + "\n"}


def _quote_injected(artifact: dict[str, str], docs: dict[str, str], rng: random.Random) -> dict[str, str]:
    """Cite an injected line as evidence; where no document carries an injection, cite a
    line of a document the answer does not quote (an unapproved source, as a careless
    model quotes a chat log)."""
    path, ans = _answer(artifact)
    lines = [(p, n, line.strip()) for p, text in sorted(docs.items())
             for n, line in enumerate(text.split("\n"), 1) if find_lures(line)]
    if not lines:
        cited = {q.get("file") for c in ans["claims"] for q in c["quotes"]}
        lines = [(p, n, _quotable(line)) for p, text in sorted(docs.items()) if p not in cited
                 for n, line in enumerate(text.split("\n"), 1) if len(_quotable(line)) >= 12]
    if not lines:
        raise SolveError("no injected line or uncited document to quote")
    file, n, text = rng.choice(lines)
    rng.choice(ans["claims"])["quotes"] = [{"file": file, "line": n, "text": text}]
    return {**artifact, path: json.dumps(ans, indent=2, ensure_ascii=False) + "\n"}


def _drop_claim(artifact: dict[str, str], docs: dict[str, str], rng: random.Random) -> dict[str, str]:
    path, ans = _answer(artifact)
    ans["claims"].pop(rng.randrange(len(ans["claims"])))
    return {**artifact, path: json.dumps(ans, indent=2, ensure_ascii=False) + "\n"}


def _ledger(artifact: dict[str, str]) -> tuple[str, list[list[str]]]:
    for path in sorted(artifact):
        rows = _csv_rows(artifact[path])
        if rows and len(rows[0]) >= 3:
            return path, rows
    raise SolveError("no ledger to spoil")


def _with_totals(artifact: dict[str, str], ledger_path: str, rows: list[list[str]]) -> dict[str, str]:
    """The artifact with the ledger replaced and its totals file recomputed to match."""
    out = {**artifact, ledger_path: _csv_text(rows)}
    sums: dict[str, int] = {}
    for r in rows[1:]:
        sums[r[1]] = sums.get(r[1], 0) + int(r[2])
    for path in sorted(artifact):
        t = _csv_rows(artifact[path])
        if path != ledger_path and t and len(t[0]) == 2:
            new = [t[0]] + [[k, str(sums.get(k, 0))] for k, _ in t[1:-1]] + [[t[-1][0], str(sum(sums.values()))]]
            out[path] = _csv_text(new)
    return out


def _drop_row(artifact: dict[str, str], docs: dict[str, str], rng: random.Random) -> dict[str, str]:
    path, rows = _ledger(artifact)
    rows.pop(rng.randrange(1, len(rows)))
    return {**artifact, path: _csv_text(rows)}


def _float_rounding(artifact: dict[str, str], docs: dict[str, str], rng: random.Random) -> dict[str, str]:
    path, rows = _ledger(artifact)
    row = rng.choice(rows[1:])
    row[2] = repr(int(row[2]) / 100 + (0.1 + 0.2 - 0.3))  # dollars as a float, with float noise
    return {**artifact, path: _csv_text(rows)}


def _source_amounts(rows: list[list[str]], docs: dict[str, str]) -> dict[str, str]:
    ids = {r[0] for r in rows[1:]}
    for text in docs.values():
        src = _csv_rows(text)
        if src and ids <= {r[0] for r in src[1:] if r}:
            a = next(k for k, h in enumerate(src[0]) if "amount" in h)
            return {r[0]: r[a] for r in src[1:]}
    raise SolveError("no source CSV for this ledger")


def _wrong_half_rounding(artifact: dict[str, str], docs: dict[str, str], rng: random.Random) -> dict[str, str]:
    path, rows = _ledger(artifact)
    raw = _source_amounts(rows, docs)
    comma = any(re.search(r"\.\d{3},", v) or re.fullmatch(r"-?\d+,\d+", v.strip()) for v in raw.values())
    changed = False
    for r in rows[1:]:
        exact = abs(parse_amount(raw[r[0]], comma) * 100)
        if exact % 1 == Decimal("0.5"):
            low = int(exact - Decimal("0.5"))
            got = abs(int(r[2]))
            other = low + 1 if got == low else low
            r[2] = str(-other if int(r[2]) < 0 or r[2].startswith("-") else other)
            changed = True
    if not changed:
        raise SolveError("no half-cent amount to round the wrong way")
    return _with_totals(artifact, path, rows)


def _pricing_variant(artifact: dict[str, str], docs: dict[str, str], change) -> dict[str, str]:
    path = next((p for p in sorted(artifact) if p.endswith(".txt")), "rule.txt")
    m = re.match(r"# variables: ([\w, ]+)", artifact.get(path, ""))
    if not m:
        raise SolveError("no rule to spoil")
    variables = [v.strip() for v in m.group(1).split(",")]
    for text in docs.values():
        try:
            policy = pricing_model.parse_pricing_policy(text, variables)
        except pricing_model.PricingPolicyError:
            continue
        return {**artifact, path: change(policy)}
    raise SolveError("no pricing policy among the documents")


def _sql_flawed(flaw: str):
    def mistake(artifact: dict[str, str], docs: dict[str, str], rng: random.Random) -> dict[str, str]:
        path = next((p for p in sorted(artifact) if p.endswith(".sql")), "migration.sql")
        return {**artifact, path: _sql_migration(docs, frozenset({flaw}))}
    return mistake


def _contract(artifact: dict[str, str]) -> tuple[str, list[dict]]:
    path = next((p for p in sorted(artifact) if p.endswith(".json")), None)
    if path is None:
        raise SolveError("no contract to spoil")
    return path, json.loads(artifact[path])["cases"]


def _happy_path_only(artifact: dict[str, str], docs: dict[str, str], rng: random.Random) -> dict[str, str]:
    """Test only what succeeds: no error, validation or not-found case."""
    path, cases = _contract(artifact)
    return {**artifact, path: api_model.render([c for c in cases if c["expect"]["status"] < 400])}


def _volatile_field(artifact: dict[str, str], docs: dict[str, str], rng: random.Random) -> dict[str, str]:
    """Copy a value from the documented example that changes per request."""
    path, cases = _contract(artifact)
    example = _api_doc(docs).example
    volatile = [k for k in ("request_id", "created_at") if k in example]
    if not volatile:
        raise SolveError("no volatile value in the example")
    key = rng.choice(volatile)
    case = next(c for c in cases if c["request"]["method"] == "GET" and c["expect"]["status"] < 400)
    case["expect"]["body"].append({"path": key, "equals": example[key]})
    return {**artifact, path: api_model.render(cases)}


def _stale_changelog(artifact: dict[str, str], docs: dict[str, str], rng: random.Random) -> dict[str, str]:
    """Test the behaviour the changelog says the API *used to* have."""
    path, _ = _contract(artifact)
    log = _doc_with(docs, "(was ", "the changelog")
    return {**artifact, path: api_model.render(api_model.build_cases(api_model.stale(_api_doc(docs), log)))}


MISTAKES: dict[str, dict[str, Callable[[dict[str, str], dict[str, str], random.Random], dict[str, str]]]] = {
    "quotes": {"paraphrase_char": _paraphrase_char, "quote_injected": _quote_injected,
               "drop_claim": _drop_claim},
    "cents": {"drop_row": _drop_row, "float_rounding": _float_rounding,
              "wrong_half_rounding": _wrong_half_rounding},
    "pricing": {
        "boundary_off_by_one": lambda a, d, rng: _pricing_variant(
            a, d, lambda p: pricing_model.build_rule(pricing_model.shift_boundary(p, rng))),
        "fit_examples_only": lambda a, d, rng: _pricing_variant(a, d, pricing_model.lookup_rule),
        "forget_min_max": lambda a, d, rng: _pricing_variant(
            a, d, lambda p: pricing_model.build_rule(pricing_model.without_limits(p, rng))),
    },
    "sql": {flaw: _sql_flawed(flaw) for flaw in sql_model.FLAWS},
    "api": {"happy_path_only": _happy_path_only, "volatile_field": _volatile_field,
            "stale_changelog": _stale_changelog},
}
