"""Which series a command looks at: ``--only GLOB`` and ``-k EXPR`` (and ``--machine GLOB``).

``--only GLOB`` matches the op name or the run key (``torch.mm*``, ``torch.add|0|*``).
``-k EXPR`` is a keyword expression as pytest's: words joined by ``and``, ``or``, ``not`` and
parentheses, each word true when it is a substring of the series' name (case-insensitive;
the name holds machine, op, run key, config and pass). An expression is parsed here, never
evaluated as Python.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Callable, List, Optional

from param_compute.history.backends import HistoryError

_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")
#: Most words and operators in one expression, and most ``(``/``not`` nested (the matcher is
#: parsed and evaluated by recursion: bounded, a hostile expression is a message).
MAX_TOKENS = 256
MAX_DEPTH = 32
Matcher = Callable[[str], bool]


def _tokens(expression: str) -> List[str]:
    tokens, position = [], 0
    expression = expression.rstrip()
    while position < len(expression):
        found = _TOKEN.match(expression, position)
        if not found:
            break
        tokens.append(found.group(1))
        position = found.end()
    return tokens


def keyword_matcher(expression: str) -> Matcher:
    """A test of a series name for ``-k EXPR``; :class:`HistoryError` says what is wrong."""
    tokens = _tokens(expression)
    if not tokens:
        raise HistoryError("-k: an empty expression")
    position, depth = 0, 0

    def fail(what: str):
        shown = expression if len(expression) <= 60 else expression[:57] + "..."
        raise HistoryError(f"-k {shown!r}: {what}")

    def peek() -> Optional[str]:
        return tokens[position] if position < len(tokens) else None

    def take() -> str:
        nonlocal position
        token = tokens[position]
        position += 1
        return token

    def either() -> Matcher:
        left = both()
        while peek() == "or":
            take()
            right, first = both(), left
            left = lambda name, a=first, b=right: a(name) or b(name)  # noqa: E731
        return left

    def both() -> Matcher:
        left = negated()
        while peek() == "and":
            take()
            right, first = negated(), left
            left = lambda name, a=first, b=right: a(name) and b(name)  # noqa: E731
        return left

    def nested(parse: Callable[[], Matcher]) -> Matcher:
        nonlocal depth
        depth += 1
        if depth > MAX_DEPTH:
            fail(f"nested deeper than {MAX_DEPTH} ('(' and 'not')")
        inner = parse()
        depth -= 1
        return inner

    def negated() -> Matcher:
        if peek() == "not":
            take()
            inner = nested(negated)
            return lambda name: not inner(name)
        return atom()

    def atom() -> Matcher:
        token = peek()
        if token is None:
            fail("ends too early")
        if token == "(":
            take()
            inner = nested(either)
            if peek() != ")":
                fail("a '(' is never closed")
            take()
            return inner
        if token in (")", "and", "or"):
            fail(f"unexpected {token!r}")
        word = take().lower()
        return lambda name: word in name.lower()

    if len(tokens) > MAX_TOKENS:
        fail(f"more than {MAX_TOKENS} words, operators and parentheses")
    matcher = either()
    if position != len(tokens):
        fail(f"unexpected {tokens[position]!r}")
    return matcher


class Selector:
    """The series a command keeps (all of them when given nothing)."""

    def __init__(self, only: Optional[str] = None, keyword: Optional[str] = None,
                 machine: Optional[str] = None):
        self.only = only
        self.keyword = keyword_matcher(keyword) if keyword is not None else None
        self.machine = machine

    def wants_machine(self, name: str) -> bool:
        return self.machine is None or fnmatch.fnmatchcase(name, self.machine) \
            or self.machine.lower() in name.lower()

    def wants(self, op: str, run_key: str, name: str) -> bool:
        if self.only is not None and not (fnmatch.fnmatchcase(op, self.only)
                                          or fnmatch.fnmatchcase(run_key, self.only)):
            return False
        return self.keyword is None or self.keyword(name)
