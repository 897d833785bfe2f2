"""The ``-k EXPR`` language every command that picks runs shares (``run``, ``history``).

As pytest's ``-k``: terms joined by ``and``, ``or``, ``not`` and parentheses. A term holding
``*``, ``?`` or ``[`` is a glob that must match a whole text; any other term is a substring of
one. Both ignore case. The texts are what the command names a run by: its op, id, key and
config label (``plan.filters.run_texts``; a history series adds its pass and machine).

An EXPR without ``and``/``or``/``not`` that does not parse as an expression (``64x128 f32``,
``(256·512``: a config label copied from a table) is one term, taken whole, as ``-k`` always
took it. Several ``-k`` flags must all match (an ``and`` of them). An expression is parsed
here, never evaluated as Python; its size and nesting are bounded, so a hostile one is a
message, not a ``RecursionError``. Torch-free.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Callable, List, Optional, Sequence

_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")
_OPERATORS = frozenset(("and", "or", "not"))
_GLOB = frozenset("*?[")
#: Most words and operators in one expression, and most ``(``/``not`` nested.
MAX_TOKENS = 256
MAX_DEPTH = 32

#: A test of a run's texts (lower-cased) for one ``-k``.
Matcher = Callable[[Sequence[str]], bool]


class KeywordError(ValueError):
    """An expression that cannot be read; the message names it (``-k 'EXPR': what``)."""


class _Unparsed(KeywordError):
    """The expression's grammar is wrong (not one of its bounds)."""


def term_matcher(term: str) -> Matcher:
    """One term: a glob (``*``, ``?``, ``[``) matching a whole text, else a substring of one."""
    term = term.lower()
    if any(char in _GLOB for char in term):
        return lambda texts: any(fnmatch.fnmatchcase(text, term) for text in texts)
    return lambda texts: any(term in text for text in texts)


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
    """The test of a run's lower-cased texts that ``-k EXPR`` makes; :class:`KeywordError`
    says what is wrong with EXPR."""
    tokens = _tokens(expression)
    if not tokens:
        raise KeywordError("-k: an empty expression")
    try:
        return _parse(expression, tokens)
    except _Unparsed:
        if _OPERATORS.isdisjoint(tokens):
            return term_matcher(expression.strip())  # a plain text, spaces and '(' included
        raise


def _parse(expression: str, tokens: List[str]) -> Matcher:
    position, depth = 0, 0

    def fail(what: str, error: type = _Unparsed):
        shown = expression if len(expression) <= 60 else expression[:57] + "..."
        raise error(f"-k {shown!r}: {what}")

    def peek() -> Optional[str]:
        return tokens[position] if position < len(tokens) else None

    def take() -> str:
        nonlocal position
        token = tokens[position]
        position += 1
        return token

    def joined(word: str, operand: Callable[[], Matcher],
               join: Callable[..., bool]) -> Callable[[], Matcher]:
        """``operand (word operand)*``: ``or`` is ``any`` of them, ``and`` ``all``."""
        def parse() -> Matcher:
            parts = [operand()]
            while peek() == word:
                take()
                parts.append(operand())
            return parts[0] if len(parts) == 1 else \
                (lambda texts: join(part(texts) for part in parts))
        return parse

    def nested(parse: Callable[[], Matcher]) -> Matcher:
        nonlocal depth
        depth += 1
        if depth > MAX_DEPTH:
            fail(f"nested deeper than {MAX_DEPTH} ('(' and 'not')", KeywordError)
        inner = parse()
        depth -= 1
        return inner

    def negated() -> Matcher:
        if peek() == "not":
            take()
            inner = nested(negated)
            return lambda texts: not inner(texts)
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
        return term_matcher(take())

    both = joined("and", negated, all)
    either = joined("or", both, any)
    if len(tokens) > MAX_TOKENS:
        fail(f"more than {MAX_TOKENS} words, operators and parentheses", KeywordError)
    matcher = either()
    if position != len(tokens):
        fail(f"unexpected {tokens[position]!r}")
    return matcher

