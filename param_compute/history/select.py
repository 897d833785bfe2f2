"""Which series a command looks at: ``--only GLOB`` and ``-k EXPR`` (and ``--machine GLOB``).

``--only GLOB`` matches the op name or the run key (``torch.mm*``, ``torch.add|0|*``).
``-k EXPR`` is the language ``run -k`` speaks (``plan.keywords``): terms joined by ``and``,
``or``, ``not`` and parentheses, each a glob or a substring of the series' op, run id, run key,
config or whole name (which holds machine and pass too), ignoring case; several ``-k`` must all
match.
"""

from __future__ import annotations

import fnmatch
from typing import Callable, Optional, Sequence, Tuple, Union

from param_compute.history.backends import HistoryError
from param_compute.plan import keywords
from param_compute.plan.keywords import Matcher


def keyword_matcher(expression: str) -> Callable[[str], bool]:
    """A test of one series name for ``-k EXPR`` (``plan.keywords``' language);
    :class:`HistoryError` says what is wrong."""
    match = _compiled(expression)
    return lambda name: match((name.lower(),))


def _compiled(expression: str) -> Matcher:
    try:
        return keywords.keyword_matcher(expression)
    except keywords.KeywordError as exc:
        raise HistoryError(str(exc)) from None


def series_texts(op: str, run_key: str, name: str, config: str = "") -> Tuple[str, ...]:
    """What ``-k`` is matched against, lower-cased: as a planned run's (op, id, key, config
    label, with ``x`` for ``×`` too), and the whole name (which adds pass and machine)."""
    run_id = run_key[len(op) + 1:] if run_key.startswith(op + "|") else ""
    texts = (op, run_id, run_key, config, config.replace("×", "x"), name)
    return tuple(text.lower() for text in texts if text)


class Selector:
    """The series a command keeps (all of them when given nothing)."""

    def __init__(self, only: Optional[str] = None,
                 keyword: Union[str, Sequence[str], None] = None,
                 machine: Optional[str] = None):
        self.only = only
        expressions = [keyword] if isinstance(keyword, str) else list(keyword or ())
        matchers = [_compiled(expression) for expression in expressions]  # several: all
        self.keyword: Optional[Matcher] = (
            (lambda texts: all(match(texts) for match in matchers)) if matchers else None)
        self.machine = machine

    def wants_machine(self, name: str) -> bool:
        return self.machine is None or fnmatch.fnmatchcase(name, self.machine) \
            or self.machine.lower() in name.lower()

    def wants(self, op: str, run_key: str, name: str, config: str = "") -> bool:
        if self.only is not None and not (fnmatch.fnmatchcase(op, self.only)
                                          or fnmatch.fnmatchcase(run_key, self.only)):
            return False
        return self.keyword is None or self.keyword(series_texts(op, run_key, name, config))
