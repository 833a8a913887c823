"""The pre-registered decision-rule language (docs/FORMAT.md §10).

A hypothesis's rule is text written by a person before any run, and re-evaluated by the
offline verifier from a bundle, so it is parsed here by a hand-written tokenizer and a
recursive-descent parser (never ``eval``/``ast``) and evaluated by a small tree walker.
Every resource is bounded before it is spent: source length, token count and nesting
depth. Types (number vs truth value) and function names/arities are checked while
parsing, so a typo fails at ``prereg`` time, not after the money is spent; only the
*values* (which policy ran, which tier exists) are checked against the data.

Numbers are ``Decimal`` literals (never float); every metric is an ``Interval`` and every
comparison yields ``supported``/``refuted``/``inconclusive`` (see ``interval``).

Grammar::

    rule    := or
    or      := and { "or" and }
    and     := not { "and" not }
    not     := "not" not | cmp
    cmp     := sum [ ("<" | "<=" | ">" | ">=" | "==" | "!=") sum ]
    sum     := term { ("+" | "-") term }
    term    := unary { ("*" | "/") unary }
    unary   := "-" unary | atom
    atom    := NUMBER | NAME "(" [ arg { "," arg } ] ")" | "(" or ")"
    arg     := STRING
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Callable, Protocol

from ..errors import FormatError
from .interval import Interval, compare, kleene_and, kleene_not, kleene_or

__all__ = ["RuleError", "Rule", "Term", "Evaluation", "parse_rule", "FUNCTIONS", "LIMITS",
           "MODES", "MetricSource"]

LIMITS = {"chars": 2000, "tokens": 400, "depth": 24}
MODES = ("live", "replayed")

# name -> (argument kinds, help). "policy" takes an optional second arg "live"|"replayed".
FUNCTIONS: dict[str, tuple[str, str]] = {
    "pass_rate": ("policy", "share of cells whose trial passed every check"),
    "pass_k": ("policy", "share of task/profile groups that passed on every seed"),
    "cost_per_task": ("policy", "mean USD per cell (cost bounds where usage is unknown)"),
    "cost_per_pass": ("policy", "total USD / passed cells"),
    "total_cost": ("policy", "USD spent over every cell"),
    "mean_time": ("policy", "mean seconds per cell"),
    "median_time": ("policy", "median seconds per cell"),
    "pass_rate_injected": ("policy", "pass rate on cells whose task carries an injection"),
    "pass_rate_clean": ("policy", "pass rate on cells whose task carries none"),
    "gap_closed": ("policy", "share of the pass-rate gap from the cheapest tier to the oracle"),
    "attempt_rate": ("tier", "share of a tier's runs on injected tasks that tried a lure"),
    "tier_pass_rate": ("tier", "share of a tier's runs that passed every check"),
    "turns": ("tier", "mean turns per run of a tier"),
    "error_rate": ("tier", "share of a tier's calls that failed (calls cut off in flight count at both ends)"),
    "timeout_rate": ("tier", "share of a tier's runs with a timed-out call (missing runs count at both ends)"),
    "throughput": ("tier", "median output tokens per second of call time over a tier's answered calls"),
    "throughput_spread": ("tier", "highest / lowest median throughput over the spans of the experiment"),
    "ttft": ("tier", "median seconds to the first token of a tier's streamed calls"),
}

_TOKEN = re.compile(
    r"\s*(?:(?P<num>[0-9]+(?:\.[0-9]+)?)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<str>\"[^\"\\\n]*\"|'[^'\\\n]*')|(?P<op><=|>=|==|!=|[-+*/(),<>]))")
_KEYWORDS = {"and", "or", "not"}
_CMP_OPS = ("<", "<=", ">", ">=", "==", "!=")


class RuleError(FormatError):
    """A rule that does not parse, or names a policy, tier or mode the data cannot have."""


class MetricSource(Protocol):
    def metric(self, name: str, subject: str, mode: str | None) -> Interval:
        """The interval of one metric. Raises RuleError for an unknown policy or tier."""


@dataclass(frozen=True)
class _Tok:
    kind: str  # num, name, str, op, end
    text: str
    col: int


@dataclass(frozen=True)
class Term:
    """One metric call as written, with its evaluated interval (for the audit trail)."""

    text: str
    value: Interval


@dataclass(frozen=True)
class Evaluation:
    decision: str
    terms: tuple[Term, ...]


# AST: tuples tagged by their first item; "num"/"call"/"neg"/"arith" are numbers,
# "cmp"/"and"/"or"/"not" are truth values.
_NUMERIC = {"num", "call", "neg", "arith"}


def _tokenize(text: str, where: str) -> list[_Tok]:
    if len(text) > LIMITS["chars"]:
        raise RuleError(f"{where}: rule is longer than {LIMITS['chars']} characters")
    toks: list[_Tok] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m:
            col = pos + len(text[pos:]) - len(text[pos:].lstrip()) + 1
            raise RuleError(f"{where}: column {col}: unexpected character {text[col - 1]!r}")
        kind = m.lastgroup or "op"
        toks.append(_Tok(kind, m.group(kind), m.start(kind) + 1))
        if len(toks) > LIMITS["tokens"]:
            raise RuleError(f"{where}: rule has more than {LIMITS['tokens']} tokens")
        pos = m.end()
    toks.append(_Tok("end", "", len(text) + 1))
    return toks


class _Parser:
    def __init__(self, text: str, where: str):
        self.where = where
        self.toks = _tokenize(text, where)
        self.i = 0
        self.depth = 0

    # -- helpers ----------------------------------------------------------------------------
    def peek(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def accept(self, text: str) -> bool:
        tok = self.peek()
        if tok.kind in ("op", "name") and tok.text == text:
            self.i += 1
            return True
        return False

    def fail(self, msg: str, tok: _Tok | None = None) -> RuleError:
        tok = tok or self.peek()
        return RuleError(f"{self.where}: column {tok.col}: {msg}")

    def expect(self, text: str) -> None:
        if not self.accept(text):
            got = self.peek().text or "end of rule"
            raise self.fail(f"expected {text!r}, found {got!r}")

    def want(self, node: tuple, numeric: bool, tok: _Tok) -> tuple:
        if (node[0] in _NUMERIC) != numeric:
            raise self.fail("expected a number here, found a comparison" if numeric
                            else "expected a comparison here, found a number", tok)
        return node

    def nest(self):
        self.depth += 1
        if self.depth > LIMITS["depth"]:
            raise self.fail(f"rule nests deeper than {LIMITS['depth']}")

    # -- grammar ----------------------------------------------------------------------------
    def parse(self) -> tuple:
        start = self.peek()
        node = self.want(self.p_or(), False, start)
        if self.peek().kind != "end":
            raise self.fail(f"unexpected {self.peek().text!r} after a complete rule")
        return node

    def p_or(self) -> tuple:
        return self._chain("or", self.p_and)

    def p_and(self) -> tuple:
        return self._chain("and", self.p_not)

    def _chain(self, word: str, sub: Callable[[], tuple]) -> tuple:
        tok = self.peek()
        node = sub()
        if self.peek().kind == "name" and self.peek().text == word:
            items = [self.want(node, False, tok)]
            while self.accept(word):
                tok = self.peek()
                items.append(self.want(sub(), False, tok))
            return (word, tuple(items))
        return node

    def p_not(self) -> tuple:
        if self.accept("not"):
            self.nest()
            tok = self.peek()
            node = ("not", self.want(self.p_not(), False, tok))
            self.depth -= 1
            return node
        return self.p_cmp()

    def p_cmp(self) -> tuple:
        tok = self.peek()
        left = self.p_sum()
        op = self.peek()
        if op.kind == "op" and op.text in _CMP_OPS:
            self.take()
            self.want(left, True, tok)
            rtok = self.peek()
            right = self.want(self.p_sum(), True, rtok)
            return ("cmp", op.text, left, right)
        return left

    def p_sum(self) -> tuple:
        return self._arith(("+", "-"), self.p_term)

    def p_term(self) -> tuple:
        return self._arith(("*", "/"), self.p_unary)

    def _arith(self, ops: tuple[str, ...], sub: Callable[[], tuple]) -> tuple:
        tok = self.peek()
        node = sub()
        while self.peek().kind == "op" and self.peek().text in ops:
            op = self.take().text
            self.want(node, True, tok)
            tok = self.peek()
            node = ("arith", op, node, self.want(sub(), True, tok))
        return node

    def p_unary(self) -> tuple:
        if self.accept("-"):
            self.nest()
            tok = self.peek()
            node = ("neg", self.want(self.p_unary(), True, tok))
            self.depth -= 1
            return node
        return self.p_atom()

    def p_atom(self) -> tuple:
        tok = self.take()
        if tok.kind == "num":
            return ("num", Decimal(tok.text))
        if tok.kind == "op" and tok.text == "(":
            self.nest()
            node = self.p_or()
            self.expect(")")
            self.depth -= 1
            return node
        if tok.kind == "name" and tok.text not in _KEYWORDS:
            return self.p_call(tok)
        raise self.fail(f"unexpected {tok.text or 'end of rule'!r}", tok)

    def p_call(self, name: _Tok) -> tuple:
        if name.text not in FUNCTIONS:
            raise self.fail(f"unknown function {name.text!r} (known: {', '.join(sorted(FUNCTIONS))})",
                            name)
        self.expect("(")
        args: list[str] = []
        while not self.accept(")"):
            if args:
                self.expect(",")
            tok = self.take()
            if tok.kind != "str":
                raise self.fail(f"{name.text}() takes quoted names, found {tok.text or 'end of rule'!r}", tok)
            args.append(tok.text[1:-1])
        return ("call", name.text, self._check_args(name, args), _call_text(name.text, args))

    def _check_args(self, name: _Tok, args: list[str]) -> tuple[str, str | None]:
        kind = FUNCTIONS[name.text][0]
        most = 2 if kind == "policy" else 1
        if not 1 <= len(args) <= most:
            shape = f'("<{kind}>"' + (', "live"|"replayed")' if most == 2 else ")")
            raise self.fail(f"{name.text} takes {shape}, got {len(args)} argument(s)", name)
        if len(args) == 2 and args[1] not in MODES:
            raise self.fail(f"{name.text}: mode must be \"live\" or \"replayed\", got {args[1]!r}", name)
        return args[0], (args[1] if len(args) == 2 else None)


def _call_text(name: str, args: list[str]) -> str:
    return f"{name}(" + ", ".join(f'"{a}"' for a in args) + ")"


@dataclass(frozen=True)
class Rule:
    """A parsed rule. ``evaluate`` raises RuleError (naming ``where``) for a policy or tier
    the data does not know."""

    text: str
    where: str
    tree: tuple

    def calls(self) -> list[tuple[str, str, str | None]]:
        """Every (function, subject, mode) the rule reads, in order of appearance."""
        out: list = []
        _walk_calls(self.tree, out)
        return out

    def evaluate(self, source: MetricSource) -> Evaluation:
        terms: dict[str, Term] = {}
        try:
            decision = _truth(self.tree, source, terms)
        except RuleError as e:
            raise RuleError(f"{self.where}: {e}") from None
        return Evaluation(decision, tuple(terms.values()))


def _children(node: tuple) -> list[tuple]:
    tag = node[0]
    if tag in ("neg", "not"):
        return [node[1]]
    if tag in ("arith", "cmp"):
        return [node[2], node[3]]
    if tag in ("and", "or"):
        return list(node[1])
    return []


def _walk_calls(node: tuple, out: list) -> None:
    if node[0] == "call":
        out.append((node[1], node[2][0], node[2][1]))
    for child in _children(node):
        _walk_calls(child, out)


def _number(node: tuple, src: MetricSource, terms: dict) -> Interval:
    tag = node[0]
    if tag == "num":
        return Interval.point(node[1])
    if tag == "neg":
        return -_number(node[1], src, terms)
    if tag == "call":
        subject, mode = node[2]
        value = src.metric(node[1], subject, mode)
        terms.setdefault(node[3], Term(node[3], value))
        return value
    a, b = _number(node[2], src, terms), _number(node[3], src, terms)
    return _ARITH[node[1]](a, b)


_ARITH = {"+": lambda a, b: a + b, "-": lambda a, b: a - b,
          "*": lambda a, b: a * b, "/": lambda a, b: a / b}


def _truth(node: tuple, src: MetricSource, terms: dict) -> str:
    tag = node[0]
    if tag == "cmp":
        return compare(node[1], _number(node[2], src, terms), _number(node[3], src, terms))
    if tag == "not":
        return kleene_not(_truth(node[1], src, terms))
    combine = kleene_and if tag == "and" else kleene_or
    result = _truth(node[1][0], src, terms)
    for item in node[1][1:]:
        result = combine(result, _truth(item, src, terms))
    return result


def parse_rule(text: str, where: str = "rule") -> Rule:
    """Parse a decision rule. Raises RuleError naming ``where`` and the column at fault."""
    if not isinstance(text, str) or not text.strip():
        raise RuleError(f"{where}: a rule must be a non-empty string")
    return Rule(text, where, _Parser(text, where).parse())
