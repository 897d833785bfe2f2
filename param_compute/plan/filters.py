"""Run filters: which planned runs ``--only``, ``-k`` and ``--input-id`` select. Torch-free.

* ``--only GLOB`` (repeatable): the operator's name matches one of the globs
  (``torch.mm``, ``torch.nn.*``, ``aten::*``).
* ``-k EXPR`` (repeatable; a run must match every one): the language of ``plan.keywords``, as
  pytest's ``-k``: terms joined by ``and``, ``or``, ``not`` and parentheses, each a glob when it
  holds ``*``, ``?`` or ``[``, else a substring; matched, ignoring case, against the operator's
  name, the run id (``0|0|1``), the key (``torch.mm|0|0|1``), the config's label
  (``64×128·128×128 f32``, with ``x`` for ``×`` too), its shapes (``64x128;128x128``) and its
  dtypes (``float32``). ``history -k`` speaks the same language.
* ``--input-id ID`` (repeatable): ``ID`` is an input id (``1``, ``0_3``), a run id
  (``0|0|1``) or a run key (``torch.mm|0|0|1``).

:func:`check_selection` makes a filter that selects nothing an error naming that filter.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Iterable, List, Sequence, Tuple

from param_compute.plan.keywords import KeywordError, Matcher, keyword_matcher
from param_compute.plan.runkey import SEPARATOR
from param_compute.plan.summary import config_label, dtypes_summary, shapes_summary


class FilterError(ValueError):
    """A filter that selects no run; the message names it."""


def run_texts(run) -> Tuple[str, ...]:
    """What ``-k`` is matched against, lower-cased (see the module's doc)."""
    config = run.config()
    label = config_label(config)
    texts = (run.op_name, run.id, run.key, label, label.replace("×", "x"),
             shapes_summary(config), dtypes_summary(config))
    return tuple(text.lower() for text in texts if text)


def _matcher(expr: str) -> Matcher:
    try:
        return keyword_matcher(expr)
    except KeywordError as exc:
        raise FilterError(str(exc)) from None


def only_matches(globs: Sequence[str], op_name: str) -> bool:
    return any(fnmatch.fnmatchcase(op_name, glob) for glob in globs)


def input_id_matches(ids: Sequence[str], run) -> bool:
    for wanted in ids:
        parts = wanted.count(SEPARATOR)
        got = run.input_id if parts == 0 else run.id if parts == 2 else run.key
        if got == wanted:
            return True
    return False


@dataclass(frozen=True)
class RunFilter:
    """The ``--only``/``-k``/``--input-id`` selection; empty parts select every run."""

    only: Tuple[str, ...] = ()
    keywords: Tuple[str, ...] = ()
    input_ids: Tuple[str, ...] = ()
    #: each of ``keywords`` read once (an unreadable one: :class:`FilterError` on first use)
    _matchers: List[Matcher] = field(default_factory=list, init=False, repr=False,
                                     compare=False)

    @classmethod
    def from_options(cls, options) -> "RunFilter":
        return cls(tuple(options.only), tuple(options.keywords), tuple(options.input_ids))

    def __bool__(self) -> bool:
        return bool(self.only or self.keywords or self.input_ids)

    def parts(self) -> List[Tuple[str, "RunFilter"]]:
        """Each flag given, as (its text on the command line, a filter of it alone)."""
        out = []
        if self.only:
            out.append((" ".join(f"--only {g}" for g in self.only), RunFilter(only=self.only)))
        for expr in self.keywords:
            out.append((f"-k {expr}", RunFilter(keywords=(expr,))))
        if self.input_ids:
            out.append((" ".join(f"--input-id {i}" for i in self.input_ids),
                        RunFilter(input_ids=self.input_ids)))
        return out

    def wants(self, run) -> bool:
        if self.only and not only_matches(self.only, run.op_name):
            return False
        if self.input_ids and not input_id_matches(self.input_ids, run):
            return False
        if self.keywords:
            if not self._matchers:
                self._matchers.extend(_matcher(expr) for expr in self.keywords)
            texts = run_texts(run)
            return all(match(texts) for match in self._matchers)
        return True


def check_selection(selection: RunFilter, runs: Iterable) -> int:
    """How many of ``runs`` ``selection`` selects; :class:`FilterError` when none, naming the
    flag that selects nothing alone (or, when each selects some, saying they exclude each
    other)."""
    for flag, values in (("--only", selection.only), ("-k", selection.keywords),
                         ("--input-id", selection.input_ids)):
        if any(not value.strip() for value in values):  # -k '' would select every run
            raise FilterError(f"{flag} '': an empty filter; give a value or drop the flag")
    for expr in selection.keywords:  # an expression that cannot be read, before any run
        _matcher(expr)
    parts = selection.parts()
    hits = [0] * len(parts)
    selected = 0
    for run in runs:
        matched = [part.wants(run) for _, part in parts]
        for index, ok in enumerate(matched):
            hits[index] += ok
        selected += all(matched)
    if selected:
        return selected
    empty = [text for (text, _), count in zip(parts, hits) if not count]
    if empty:
        raise FilterError(f"{empty[0]} selects no run of the spec")
    raise FilterError(" with ".join(text for text, _ in parts)
                      + ": each selects some runs, but no run matches them all")
