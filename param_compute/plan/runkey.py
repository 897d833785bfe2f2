"""The run key: which run a record, a range or an option names (``op|config|build|input``).

One run is named by its operator, the index of its config in the spec, its build id and its
input id. Two text forms carry it: the record ``id`` (``config|build|input``, PARAM's form) and
the key (``op|config|build|input``, what ``--resume-id``/``--stop-id`` and the tools print).
Build and input ids come from config iterators: the built-in ones give ``N`` or ``VARIANT_N``.

Sort order is the plan's order for the built-in iterators: operators by their place in the spec
(by name when it is not known), then the numbers in the id compared as numbers (``0|0|1_10``
after ``0|0|1_9``). Torch-free.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

SEPARATOR = "|"

_TOKEN = re.compile(r"[|_]")

#: The spec's operators in order, or a name -> place mapping (faster for many operators).
Ops = Union[Sequence[str], Mapping[str, int]]


class RunKeyError(ValueError):
    """Text that does not name a run; the message says what is wrong."""


def format_id(config: Any, build: Any, input_id: Any) -> str:
    """The record ``id``: ``config|build|input``."""
    return f"{config}{SEPARATOR}{build}{SEPARATOR}{input_id}"


def format_key(op: str, config: Any, build: Any, input_id: Any) -> str:
    """The run key text: ``op|config|build|input``."""
    return f"{op}{SEPARATOR}{config}{SEPARATOR}{build}{SEPARATOR}{input_id}"


def format_config_build(config: Any, build: Any) -> str:
    """``config|build``: the runs of one built operator (PARAM's ``config_build_id``)."""
    return f"{config}{SEPARATOR}{build}"


def key_of(op: str, run_id: Any) -> str:
    """``op|id`` for an operator and a record id as written (any id, parsed or not)."""
    return f"{op}{SEPARATOR}{run_id}"


def join_fields(*parts: Any) -> str:
    """Text that carries a run key among other fields, in the key's separator (``NVTX range
    names ``param_compute|op|config|build|input|phase|pass``, a per-run seed's text)."""
    return SEPARATOR.join(str(part) for part in parts)


def split_fields(text: Any) -> List[str]:
    """The fields of :func:`join_fields`'s text."""
    return str(text).split(SEPARATOR)


def parse_config_build(text: Any) -> Tuple[int, str]:
    """(config index, build id) of ``config|build`` (PARAM's ``config_build_id``; its older
    files write ``config:build``); :class:`RunKeyError` says what is wrong otherwise."""
    config, sep, build = str(text).replace(":", SEPARATOR).partition(SEPARATOR)
    if not sep or not config.isdigit() or not config.isascii() or not build:
        raise RunKeyError(f"{text!r} is not CONFIG|BUILD")
    return int(config), build


def _natural(text: str) -> Tuple:
    return tuple((0, int(t)) if t.isdigit() else (1, t) for t in _TOKEN.split(text))


def _place(ops: Optional[Ops], op: str) -> Tuple:
    if ops is None:
        return (0, _natural(op))
    place = ops.get(op) if isinstance(ops, Mapping) else (ops.index(op) if op in ops else None)
    return (place, ()) if place is not None else (len(ops), _natural(op))


class RunKey(NamedTuple):
    """One run's name. Equal keys name the same run; ``<`` is the plan order (see the module)."""

    op: str
    config: int
    build: str
    input: str

    @classmethod
    def of(cls, op: str, config: Any, build: Any, input_id: Any) -> "RunKey":
        """From its parts as the plan has them (indices or ids, numbers or text)."""
        return cls(str(op), int(config), str(build), str(input_id))

    @property
    def id(self) -> str:
        """The record ``id``: ``config|build|input``."""
        return format_id(self.config, self.build, self.input)

    @property
    def text(self) -> str:
        """``op|config|build|input``."""
        return format_key(self.op, self.config, self.build, self.input)

    def __str__(self) -> str:
        return self.text

    @property
    def config_build(self) -> str:
        """``config|build``: the runs of one built operator (PARAM's ``config_build_id``)."""
        return format_config_build(self.config, self.build)

    @classmethod
    def from_id(cls, op: str, run_id: Any) -> "RunKey":
        """From an operator name and a record ``id`` (``config|build|input``)."""
        parts = str(run_id).split(SEPARATOR)
        if len(parts) != 3:
            raise RunKeyError(f"run id {str(run_id)!r}: expected config|build|input "
                              f"(3 parts separated by '|'), got {len(parts)} part(s)")
        return cls._checked(str(op), parts, f"run id {str(run_id)!r}")

    @classmethod
    def from_config_build(cls, op: str, config_build: Any, input_id: Any) -> "RunKey":
        """From PARAM's ``config_build_id`` (``config|build``) and an input id."""
        return cls.from_id(op, f"{config_build}{SEPARATOR}{input_id}")

    @classmethod
    def parse(cls, text: Any) -> "RunKey":
        """From ``op|config|build|input``; :class:`RunKeyError` says what is wrong otherwise."""
        if not isinstance(text, str):
            raise RunKeyError(f"run key {text!r}: expected text op|config|build|input")
        parts = text.split(SEPARATOR)
        if len(parts) != 4:
            raise RunKeyError(f"run key {text!r}: expected op|config|build|input (4 parts "
                              f"separated by '|'), got {len(parts)} part(s)")
        return cls._checked(parts[0], parts[1:], f"run key {text!r}")

    @classmethod
    def _checked(cls, op: str, parts: Sequence[str], what: str) -> "RunKey":
        if not op:
            raise RunKeyError(f"{what}: the operator name is empty")
        config, build, input_id = parts
        if not config.isdigit() or not config.isascii():
            raise RunKeyError(f"{what}: the config index {config!r} is not a number")
        for name, value in (("build", build), ("input", input_id)):
            if not value:
                raise RunKeyError(f"{what}: the {name} id is empty")
        return cls(op, int(config), build, input_id)

    @classmethod
    def from_record(cls, record: Dict[str, Any]) -> "RunKey":
        """The key of a run record (JSON form: ``op_name`` and ``id``)."""
        try:
            op, run_id = record["op_name"], record["id"]
        except (KeyError, TypeError):
            raise RunKeyError("a run record needs op_name and id") from None
        return cls.from_id(op, run_id)

    def order(self, ops: Optional[Ops] = None) -> Tuple:
        """Sort key: the operator's place in ``ops`` (the spec's operators; an operator not
        among them after all of them, by name), then the numbers of the id."""
        return (_place(ops, self.op), 0, self.config, _natural(self.build),
                _natural(self.input), self.build, self.input)

    def __lt__(self, other: "RunKey") -> bool:  # type: ignore[override]
        return self.order() < other.order()

    def __le__(self, other: "RunKey") -> bool:  # type: ignore[override]
        return self.order() <= other.order()

    def __gt__(self, other: "RunKey") -> bool:  # type: ignore[override]
        return self.order() > other.order()

    def __ge__(self, other: "RunKey") -> bool:  # type: ignore[override]
        return self.order() >= other.order()


def id_order(ops: Ops, op: str, run_id: Any) -> Tuple:
    """Sort key of a run given as operator and id text, any id (also one a custom iterator made
    with more or fewer parts): the :meth:`RunKey.order` where it parses, else the numbers of the
    id after the ids of its operator that parse."""
    try:
        return RunKey.from_id(op, run_id).order(ops)
    except RunKeyError:
        return (_place(ops, op), 1, _natural(str(run_id)), str(run_id))
