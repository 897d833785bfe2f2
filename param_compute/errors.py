"""Errors that reach the user as clear messages (never as tracebacks)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Union

PathPart = Union[str, int]

#: Exit statuses shared by every command-line tool.
EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_INVALID = 2


def format_json_path(parts: Sequence[PathPart]) -> str:
    """``["torch.mm", "config", 0, "input", 1]`` -> ``torch.mm.config[0].input[1]``.

    The first part is the operator name, which may itself contain dots; it is written as is.
    """
    text = ""
    for i, part in enumerate(parts):
        if isinstance(part, int):
            text += f"[{part}]"
        elif i == 0:
            text += part
        else:
            text += f".{part}"
    return text or "(top level)"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a spec: where (JSON path), what, and what would be right."""

    path: tuple
    message: str
    hint: Optional[str] = None

    def render(self, source: str) -> str:
        text = f"{source}: {format_json_path(self.path)}: {self.message}"
        if self.hint:
            text += f" ({self.hint})"
        return text


class SpecError(Exception):
    """A spec file (or dict) is invalid. Carries every problem found, not just the first."""

    def __init__(self, source: str, problems: Iterable[Problem]):
        self.source = source
        self.problems: List[Problem] = list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        count = len(self.problems)
        head = f"{self.source}: invalid spec, {count} problem{'s' if count != 1 else ''}:"
        return "\n".join([head] + ["  " + p.render(self.source) for p in self.problems])


class OptionsError(Exception):
    """Command-line options that cannot work together or name something missing."""


def did_you_mean(word: str, choices: Iterable[str]) -> Optional[str]:
    """A ``did you mean 'x'?`` hint for a misspelled name, or None."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None


class JobBroken(Exception):
    """A job's collective failed or never completed (a rank gone or hung): the run ends on
    every rank, its records kept; the message (one line) names this rank and the call."""
