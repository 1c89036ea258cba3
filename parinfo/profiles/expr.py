"""The count expression language of profiles: integers and machine facts with + - * // min max ( ).

A small hand-written tokenizer and recursive-descent parser into a tree; nothing here ever calls
eval or compiles Python. :func:`check` checks syntax and names without any machine's numbers (so an
expression valid on some machine is never refused by validation); :func:`evaluate` computes the tree
on one machine's facts, where a divisor that is zero there is a fault with its column. Length, token
count and nesting depth are bounded so that a hostile profile cannot make parinfo slow or crash it.

Grammar::

    expr   := term (("+" | "-") term)*
    term   := unary (("*" | "//") unary)*
    unary  := "-" unary | atom
    atom   := INT | NAME | ("min" | "max") "(" expr ("," expr)* ")" | "(" expr ")"
"""
from __future__ import annotations

from collections.abc import Collection, Mapping

from parinfo.records.record import record

MAX_LENGTH = 200
MAX_TOKENS = 100
MAX_DEPTH = 16
MAX_INT_DIGITS = 6
FUNCTIONS = ("min", "max")


class ExprError(ValueError):
    """A malformed expression; ``column`` is 1-based inside the expression text."""

    def __init__(self, message: str, column: int, fix: str | None = None) -> None:
        self.message = message
        self.column = column
        self.fix = fix
        super().__init__(f"column {column}: {message}")


class ZeroDivisor(ExprError):
    """A division by a divisor that is 0 (written so, or worked out so on this machine)."""

    def __init__(self, column: int) -> None:
        super().__init__("division by zero", column, "divide by a fact or number that is at least 1")


@record(frozen=True)
class Token:
    kind: str  # int | name | op | end
    text: str
    start: int  # 0-based offset in the expression


@record(frozen=True)
class Result:
    """An evaluated expression: its value and the same text with the facts' numbers filled in."""

    value: int
    substituted: str
    used: tuple[str, ...]


_OPS = ("//", "+", "-", "*", "(", ")", ",")


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens; raise ExprError at the first character that cannot start one."""
    if len(text) > MAX_LENGTH:
        raise ExprError(f"expression is {len(text)} characters long; the limit is {MAX_LENGTH}", MAX_LENGTH + 1,
                        "use a shorter expression")
    tokens: list[Token] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c in " \t":
            i += 1
            continue
        if c.isascii() and c.isdigit():
            j = i
            while j < n and text[j].isascii() and text[j].isdigit():
                j += 1
            if j < n and text[j] == ".":
                raise ExprError("counts are whole numbers; found a decimal point", j + 1,
                                "use an integer, and // for division")
            if j - i > MAX_INT_DIGITS:
                raise ExprError(f"number {text[i:j]} is too large", i + 1, "use a count below 4096")
            tokens.append(Token("int", text[i:j], i))
            i = j
        elif c.isascii() and (c.isalpha() or c == "_"):
            j = i
            while j < n and text[j].isascii() and (text[j].isalnum() or text[j] == "_"):
                j += 1
            tokens.append(Token("name", text[i:j], i))
            i = j
        else:
            if text.startswith("**", i):
                raise ExprError("'**' is not supported", i + 1, "use +, -, *, //, min, max and parentheses")
            op = next((o for o in _OPS if text.startswith(o, i)), None)
            if op is None:
                if c == "/":
                    raise ExprError("'/' is not supported; counts are whole numbers", i + 1, "use // for division")
                raise ExprError(f"unexpected character {c!r}", i + 1,
                                "use integers, machine facts, +, -, *, //, min, max and parentheses")
            tokens.append(Token("op", op, i))
            i += len(op)
        if len(tokens) > MAX_TOKENS:
            raise ExprError(f"expression has more than {MAX_TOKENS} tokens", i + 1, "use a shorter expression")
    tokens.append(Token("end", "", n))
    return tokens


@record(frozen=True)
class Node:
    """One node of a parsed expression; ``const`` is its value when it names no fact."""

    kind: str  # int | name | neg | op | call
    text: str  # the literal, the fact, the operator or the function name
    start: int  # 0-based offset of the node's token in the expression
    args: tuple[Node, ...] = ()
    const: int | None = None


class _Parser:
    """Builds the tree, checking names and syntax as it goes (left to right, so the first fault in
    the text is the one reported). A divisor that names no fact and is 0 is refused here: it is zero
    on every machine. Divisors that name facts are only known on a machine (see :func:`evaluate`)."""

    def __init__(self, text: str, names: Collection[str]) -> None:
        self.text = text
        self.names = names
        self.tokens = tokenize(text)
        self.pos = 0
        self.depth = 0

    def peek(self) -> Token:
        return self.tokens[self.pos]

    def take(self) -> Token:
        tok = self.tokens[self.pos]
        self.pos += 1
        return tok

    def expect(self, text: str) -> Token:
        tok = self.peek()
        if tok.kind != "op" or tok.text != text:
            raise ExprError(f"expected '{text}' but found {_describe(tok)}", tok.start + 1)
        return self.take()

    def enter(self, tok: Token) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExprError(f"expression is nested more than {MAX_DEPTH} levels deep", tok.start + 1,
                            "simplify the expression")

    def parse(self) -> Node:
        if self.peek().kind == "end":
            raise ExprError("empty expression", 1, "write an integer or an expression such as usable_cpus // 2")
        node = self.expr()
        tok = self.peek()
        if tok.kind != "end":
            raise ExprError(f"unexpected {_describe(tok)}", tok.start + 1,
                            "join terms with +, -, *, // or write min(a, b)")
        return node

    def expr(self) -> Node:
        node = self.term()
        while self.peek().kind == "op" and self.peek().text in ("+", "-"):
            tok = self.take()
            node = _binary(tok, node, self.term())
        return node

    def term(self) -> Node:
        node = self.unary()
        while self.peek().kind == "op" and self.peek().text in ("*", "//"):
            tok = self.take()
            rhs = self.unary()
            if tok.text == "//" and rhs.const == 0:
                raise ZeroDivisor(tok.start + 1)
            node = _binary(tok, node, rhs)
        return node

    def unary(self) -> Node:
        tok = self.peek()
        if tok.kind == "op" and tok.text == "-":
            self.take()
            self.enter(tok)
            child = self.unary()
            self.depth -= 1
            return Node("neg", "-", tok.start, (child,), None if child.const is None else -child.const)
        return self.atom()

    def atom(self) -> Node:
        tok = self.take()
        if tok.kind == "int":
            return Node("int", tok.text, tok.start, const=int(tok.text))
        if tok.kind == "name":
            if tok.text in FUNCTIONS:
                return self.call(tok)
            if tok.text not in self.names:
                raise ExprError(f"unknown name '{tok.text}'", tok.start + 1, _suggest(tok.text, self.names))
            return Node("name", tok.text, tok.start)
        if tok.kind == "op" and tok.text == "(":
            self.enter(tok)
            node = self.expr()
            self.expect(")")
            self.depth -= 1
            return node
        if tok.kind == "end":
            raise ExprError("expression ends too early", tok.start + 1, "complete the expression")
        raise ExprError(f"unexpected {_describe(tok)}", tok.start + 1)

    def call(self, name: Token) -> Node:
        nxt = self.peek()
        if nxt.kind != "op" or nxt.text != "(":
            raise ExprError(f"'{name.text}' needs arguments in parentheses", name.start + 1,
                            f"write {name.text}(a, b)")
        self.take()
        self.enter(name)
        args = [self.expr()]
        while self.peek().kind == "op" and self.peek().text == ",":
            self.take()
            args.append(self.expr())
        self.expect(")")
        self.depth -= 1
        if len(args) < 2:
            raise ExprError(f"'{name.text}' needs at least two arguments", name.start + 1,
                            f"write {name.text}(a, b)")
        consts = [a.const for a in args]
        const = None if None in consts else _apply(name.text, [c for c in consts if c is not None])
        return Node("call", name.text, name.start, tuple(args), const)


def _apply(op: str, values: list[int]) -> int:
    if op == "+":
        return values[0] + values[1]
    if op == "-":
        return values[0] - values[1]
    if op == "*":
        return values[0] * values[1]
    if op == "//":
        return values[0] // values[1]
    return min(values) if op == "min" else max(values)


def _binary(tok: Token, lhs: Node, rhs: Node) -> Node:
    const = None
    if lhs.const is not None and rhs.const is not None:
        const = _apply(tok.text, [lhs.const, rhs.const])
    return Node("op", tok.text, tok.start, (lhs, rhs), const)


def _value(node: Node, names: Mapping[str, int]) -> int:
    if node.const is not None:
        return node.const
    if node.kind == "name":
        return names[node.text]
    if node.kind == "neg":
        return -_value(node.args[0], names)
    values = [_value(arg, names) for arg in node.args]
    if node.text == "//" and values[1] == 0:
        raise ZeroDivisor(node.start + 1)
    return _apply(node.text, values)


def _describe(tok: Token) -> str:
    if tok.kind == "end":
        return "the end of the expression"
    return f"'{tok.text}'"


def _suggest(name: str, names: Collection[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(names) + list(FUNCTIONS), n=1)
    known = ", ".join(sorted(names))
    if close:
        return f"did you mean '{close[0]}'? known names: {known}"
    return f"known names: {known}"


def parse(text: str, names: Collection[str]) -> Node:
    """Parse ``text``, allowing the fact names in ``names``; raise ExprError at the first fault."""
    return _Parser(text, names).parse()


def check(text: str, names: Collection[str]) -> None:
    """Check syntax and names without any machine's numbers (validation time).

    Only a fault that holds on every machine is refused here; a divisor that is zero for some
    facts is reported by :func:`evaluate` on the machine where it is zero.
    """
    parse(text, names)


def evaluate(text: str, names: Mapping[str, int]) -> Result:
    """Evaluate ``text`` with the integer values of ``names``; raise ExprError on any fault."""
    parser = _Parser(text, names)
    value = _value(parser.parse(), names)
    substituted, used = _substitute(text, parser.tokens, names)
    return Result(value, substituted, used)


def substitute(text: str, names: Mapping[str, int]) -> str:
    """``text`` with each fact replaced by its number (for messages; ``text`` need not be valid)."""
    try:
        tokens = tokenize(text)
    except ExprError:
        return text.strip()
    return _substitute(text, tokens, names)[0]


def _substitute(text: str, tokens: list[Token], names: Mapping[str, int]) -> tuple[str, tuple[str, ...]]:
    pieces: list[str] = []
    used: list[str] = []
    last = 0
    for tok in tokens:
        if tok.kind == "name" and tok.text in names and tok.text not in FUNCTIONS:
            pieces.append(text[last:tok.start])
            pieces.append(str(names[tok.text]))
            used.append(tok.text)
            last = tok.start + len(tok.text)
    pieces.append(text[last:])
    return "".join(pieces).strip(), tuple(dict.fromkeys(used))
