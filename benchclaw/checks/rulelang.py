"""A small, safe integer expression language for pricing rules written by an agent.

Not to be confused with the analysis's decision rules (``benchclaw.formats.rules``, a
different language over metrics): hence the ``Pricing`` prefix on every name here.

The agent's artifact is program text, so it is parsed here by a hand-written recursive
descent parser (never ``eval``/``exec``/``ast``) and evaluated by a tree walker. Every
resource is bounded before it can be spent: source size, token count, node count, nesting
depth (which also bounds the evaluator's recursion, because chains such as ``a + b + c``
are kept flat), evaluation steps and the magnitude of every intermediate value. Types
(integer vs boolean) are checked while parsing, so a rule that parses only fails at
evaluation time on a division by zero or an out-of-range value. Division exists only as
explicit rounding helpers, so a rule always says how it rounds.

Grammar (also in docs/writing-tasks.md)::

    rule     := { "let" NAME "=" expr ";" } expr
    expr     := "if" expr "then" expr "else" expr | or_expr
    or_expr  := and_expr { "or" and_expr }
    and_expr := not_expr { "and" not_expr }
    not_expr := "not" not_expr | cmp
    cmp      := sum [ ("<" | "<=" | ">" | ">=" | "==" | "!=") sum ]
    sum      := product { ("+" | "-") product }
    product  := unary { "*" unary }
    unary    := "-" unary | atom
    atom     := INT | NAME | NAME "(" expr { "," expr } ")" | "(" expr ")"
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

__all__ = ["PricingRuleError", "PricingRule", "parse_pricing_rule", "PRICING_FUNCTIONS", "PRICING_LIMITS"]

PRICING_LIMITS = {"source_bytes": 16_384, "tokens": 4_096, "nodes": 4_096, "depth": 40,
          "steps": 100_000, "magnitude": 10 ** 18}
KEYWORDS = {"let", "if", "then", "else", "and", "or", "not"}
_TOKEN = re.compile(r"\s*(?:(?P<int>[0-9][0-9_]*)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
                    r"|(?P<op><=|>=|==|!=|[-+*(),;=<>])|(?P<comment>#[^\n]*))")
_CMP = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


class PricingRuleError(ValueError):
    """A rule that cannot be parsed or evaluated; the message names line and column."""


def _div(a: int, b: int, mode: str) -> int:
    if b == 0:
        raise PricingRuleError("division by zero")
    q, r = divmod(a, b)  # floor division: r has the sign of b
    if mode == "floor" or r == 0:
        return q
    if mode == "ceil":
        return q + 1
    twice, b_abs = 2 * abs(r), abs(b)
    if twice != b_abs:
        return q + 1 if twice > b_abs else q
    if mode == "even":
        return q if q % 2 == 0 else q + 1
    return q + 1 if (a < 0) == (b < 0) else q  # half away from zero


def _clamp(x: int, lo: int, hi: int) -> int:
    if lo > hi:
        raise PricingRuleError(f"clamp: lower bound {lo} is above upper bound {hi}")
    return max(lo, min(x, hi))


# name -> (min args, max args, function). All take and return ints.
PRICING_FUNCTIONS = {
    "min": (2, 16, lambda *a: min(a)),
    "max": (2, 16, lambda *a: max(a)),
    "abs": (1, 1, abs),
    "clamp": (3, 3, _clamp),
    "div_floor": (2, 2, lambda a, b: _div(a, b, "floor")),
    "div_ceil": (2, 2, lambda a, b: _div(a, b, "ceil")),
    "div_round": (2, 2, lambda a, b: _div(a, b, "half_away")),
    "div_even": (2, 2, lambda a, b: _div(a, b, "even")),
}


@dataclass(frozen=True)
class _Tok:
    kind: str  # int, name, op, end
    text: str
    line: int
    col: int


def _tokenize(source: str) -> list[_Tok]:
    toks, pos, n = [], 0, len(source)
    while pos < n:
        m = _TOKEN.match(source, pos)
        if m is None or m.end() == pos:
            while pos < n and source[pos].isspace():
                pos += 1
            if pos == n:
                break
            line, col = _where(source, pos)
            raise PricingRuleError(f"line {line}, column {col}: unexpected character {source[pos]!r}")
        pos = m.end()
        kind = m.lastgroup
        if kind == "comment":
            continue
        line, col = _where(source, m.start(kind))
        toks.append(_Tok(kind, m.group(kind), line, col))
        if len(toks) > PRICING_LIMITS["tokens"]:
            raise PricingRuleError(f"rule has more than {PRICING_LIMITS['tokens']} tokens")
    line, col = _where(source, len(source))
    toks.append(_Tok("end", "", line, col))
    return toks


def _where(source: str, pos: int) -> tuple[int, int]:
    line = source.count("\n", 0, pos) + 1
    return line, pos - (source.rfind("\n", 0, pos) + 1) + 1


class _Parser:
    """Recursive descent; each node is a tuple (kind, type, ...) with type 'int' or 'bool'."""

    def __init__(self, toks: list[_Tok], variables: set[str]):
        self.toks, self.i, self.depth, self.nodes = toks, 0, 0, 0
        self.names = {v: "var" for v in variables}

    # -- token helpers
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

    def expect(self, text: str) -> None:
        if not self.accept(text):
            self.fail(f"expected {text!r}")

    def fail(self, msg: str, tok: _Tok | None = None):
        tok = tok or self.peek()
        got = "end of rule" if tok.kind == "end" else repr(tok.text)
        raise PricingRuleError(f"line {tok.line}, column {tok.col}: {msg}, got {got}")

    def node(self, *parts) -> tuple:
        self.nodes += 1
        if self.nodes > PRICING_LIMITS["nodes"]:
            raise PricingRuleError(f"rule has more than {PRICING_LIMITS['nodes']} nodes")
        return parts

    def want(self, node: tuple, typ: str, tok: _Tok) -> tuple:
        if node[1] != typ:
            what = "an integer" if typ == "int" else "a condition (true/false)"
            raise PricingRuleError(f"line {tok.line}, column {tok.col}: expected {what} here")
        return node

    # -- grammar
    def rule(self) -> tuple:
        lets = []
        while self.accept("let"):
            tok = self.take()
            if tok.kind != "name" or tok.text in KEYWORDS or tok.text in PRICING_FUNCTIONS or tok.text in self.names:
                self.fail("expected a new name after 'let'", tok)
            self.expect("=")
            start = self.peek()
            lets.append((tok.text, self.want(self.expr(), "int", start)))
            self.names[tok.text] = "let"
            self.expect(";")
        start = self.peek()
        body = self.want(self.expr(), "int", start)
        if self.peek().kind != "end":
            self.fail("expected end of rule")
        return ("rule", "int", lets, body)

    def expr(self) -> tuple:
        self.depth += 1
        if self.depth > PRICING_LIMITS["depth"]:
            raise PricingRuleError(f"line {self.peek().line}: rule nested deeper than {PRICING_LIMITS['depth']} levels")
        try:
            if self.accept("if"):
                t = self.peek()
                cond = self.want(self.expr(), "bool", t)
                self.expect("then")
                t = self.peek()
                yes = self.expr()
                self.expect("else")
                no = self.want(self.expr(), yes[1], t)
                return self.node("if", yes[1], cond, yes, no)
            return self.chain("or", self.and_expr, "bool")
        finally:
            self.depth -= 1

    def chain(self, op: str, sub, typ: str) -> tuple:
        t = self.peek()
        first = sub()
        if self.peek().text != op or self.peek().kind != "name":
            return first
        items = [self.want(first, typ, t)]
        while self.accept(op):
            t = self.peek()
            items.append(self.want(sub(), typ, t))
        return self.node(op, "bool", items)

    def and_expr(self) -> tuple:
        return self.chain("and", self.not_expr, "bool")

    def not_expr(self) -> tuple:
        if self.accept("not"):
            t = self.peek()
            self.depth += 1
            try:
                if self.depth > PRICING_LIMITS["depth"]:
                    raise PricingRuleError(f"line {t.line}: rule nested deeper than {PRICING_LIMITS['depth']} levels")
                return self.node("not", "bool", self.want(self.not_expr(), "bool", t))
            finally:
                self.depth -= 1
        return self.cmp()

    def cmp(self) -> tuple:
        t = self.peek()
        left = self.sum()
        op = self.peek()
        if op.kind == "op" and op.text in _CMP:
            self.take()
            t2 = self.peek()
            right = self.want(self.sum(), "int", t2)
            return self.node("cmp", "bool", op.text, self.want(left, "int", t), right)
        return left

    def sum(self) -> tuple:
        return self.flat(self.product, ("+", "-"), "sum")

    def product(self) -> tuple:
        return self.flat(self.unary, ("*",), "product")

    def flat(self, sub, ops: tuple, kind: str) -> tuple:
        t = self.peek()
        first = sub()
        if not (self.peek().kind == "op" and self.peek().text in ops):
            return first
        terms = [("+", self.want(first, "int", t))]
        while self.peek().kind == "op" and self.peek().text in ops:
            op = self.take().text
            t = self.peek()
            terms.append((op, self.want(sub(), "int", t)))
        return self.node(kind, "int", terms)

    def unary(self) -> tuple:
        if self.accept("-"):
            t = self.peek()
            self.depth += 1
            try:
                if self.depth > PRICING_LIMITS["depth"]:
                    raise PricingRuleError(f"line {t.line}: rule nested deeper than {PRICING_LIMITS['depth']} levels")
                return self.node("neg", "int", self.want(self.unary(), "int", t))
            finally:
                self.depth -= 1
        return self.atom()

    def atom(self) -> tuple:
        tok = self.take()
        if tok.kind == "int":
            value = int(tok.text.replace("_", "")) if len(tok.text) <= 19 else None
            if value is None or value > PRICING_LIMITS["magnitude"]:
                raise PricingRuleError(f"line {tok.line}, column {tok.col}: number too large")
            return self.node("int", "int", value)
        if tok.kind == "op" and tok.text == "(":
            inner = self.expr()
            self.expect(")")
            return inner
        if tok.kind == "name" and tok.text not in KEYWORDS:
            if tok.text in PRICING_FUNCTIONS:
                return self.call(tok)
            if tok.text not in self.names:
                known = ", ".join(sorted(self.names)) or "none"
                raise PricingRuleError(f"line {tok.line}, column {tok.col}: unknown name {tok.text!r} "
                                f"(known: {known})")
            return self.node("name", "int", tok.text)
        self.fail("expected a number, a name, a function call or '('", tok)

    def call(self, tok: _Tok) -> tuple:
        lo, hi, _ = PRICING_FUNCTIONS[tok.text]
        self.expect("(")
        args = []
        while True:
            t = self.peek()
            args.append(self.want(self.expr(), "int", t))
            if not self.accept(","):
                break
        self.expect(")")
        if not lo <= len(args) <= hi:
            n = str(lo) if lo == hi else f"{lo} to {hi}"
            raise PricingRuleError(f"line {tok.line}, column {tok.col}: {tok.text}() takes {n} arguments, "
                                   f"got {len(args)}")
        return self.node("call", "int", tok.text, args)


class _Eval:
    def __init__(self, env: dict[str, int]):
        self.env, self.steps = env, 0

    def run(self, node: tuple):
        self.steps += 1
        if self.steps > PRICING_LIMITS["steps"]:
            raise PricingRuleError(f"evaluation took more than {PRICING_LIMITS['steps']} steps")
        value = getattr(self, "n_" + node[0])(node)
        if not isinstance(value, bool) and abs(value) > PRICING_LIMITS["magnitude"]:
            raise PricingRuleError(f"value {value} is out of range (|value| > 10^18)")
        return value

    def n_rule(self, n):
        for name, expr in n[2]:
            self.env[name] = self.run(expr)
        return self.run(n[3])

    def n_int(self, n):
        return n[2]

    def n_name(self, n):
        return self.env[n[2]]

    def n_if(self, n):
        return self.run(n[3]) if self.run(n[2]) else self.run(n[4])

    def n_or(self, n):
        return any(self.run(x) for x in n[2])

    def n_and(self, n):
        return all(self.run(x) for x in n[2])

    def n_not(self, n):
        return not self.run(n[2])

    def n_cmp(self, n):
        return _CMP[n[2]](self.run(n[3]), self.run(n[4]))

    def n_neg(self, n):
        return -self.run(n[2])

    def n_sum(self, n):
        total = 0
        for op, term in n[2]:
            total = total + self.run(term) if op == "+" else total - self.run(term)
        return total

    def n_product(self, n):
        total = 1
        for _, term in n[2]:
            total *= self.run(term)
            if abs(total) > PRICING_LIMITS["magnitude"]:
                raise PricingRuleError(f"value {total} is out of range (|value| > 10^18)")
        return total

    def n_call(self, n):
        return PRICING_FUNCTIONS[n[2]][2](*[self.run(a) for a in n[3]])


@dataclass(frozen=True)
class PricingRule:
    """A parsed rule over named integer variables."""

    source: str
    variables: tuple[str, ...]
    tree: tuple

    def evaluate(self, env: Mapping[str, int]) -> int:
        """The rule's integer value for ``env``; raises PricingRuleError (missing variable,
        division by zero, value out of range, too many steps)."""
        missing = [v for v in self.variables if v not in env]
        if missing:
            raise PricingRuleError(f"no value for variable {missing[0]!r}")
        return _Eval({v: int(env[v]) for v in self.variables}).run(self.tree)


def parse_pricing_rule(source: str, variables: Iterable[str]) -> PricingRule:
    """Parse ``source`` over the integer ``variables``; raises PricingRuleError naming the
    line and column of the first problem, or the limit that was exceeded. A rule parsed
    before is returned again (``_parsed``): the result is a function of the text alone and
    immutable, and a grid's checks and a verifier's re-runs parse the same few rules often."""
    return _parsed(source, tuple(variables))


@functools.lru_cache(maxsize=256)
def _parsed(source: str, variables: tuple[str, ...]) -> PricingRule:
    """``parse_pricing_rule`` itself (a failure raises, so it is not remembered)."""
    size = len(source.encode("utf-8", "surrogatepass"))
    if size > PRICING_LIMITS["source_bytes"]:
        raise PricingRuleError(f"rule is {size:,} bytes, above the limit of {PRICING_LIMITS['source_bytes']:,}")
    tree = _Parser(_tokenize(source), set(variables)).rule()
    return PricingRule(source, variables, tree)
