"""Which kind each line of a results file is, and the JSON types a line must have to be usable.

The tools compute with what a record holds (counts times medians, sums of original times...),
so a field of the wrong type makes the whole line unusable: reported by the reader with its
file, line and field (:func:`schema_problem`), never a crash further on. Torch-free.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

#: Line kinds.
HEADER, RECORD, FINISH, RESUME, OTHER = "header", "record", "finish", "resume", "other"


def line_kind(value: Dict[str, Any]) -> str:
    """Which kind of line a JSON object is (``HEADER``, ``RECORD``, ``FINISH``, ``RESUME`` or
    ``OTHER``: a profiler batch line...)."""
    if "run_options" in value and "sys_info" in value:
        return HEADER
    if "op_name" in value and "id" in value:
        return RECORD
    if "finish_time" in value:
        return FINISH
    if "resume_time" in value:
        return RESUME
    return OTHER


#: Fields of a run record the tools read, and the JSON type each must have when present.
_RECORD_TEXT = ("op_name", "id", "status")
#: The longest ``op_name``/``id``/``status`` taken (real ones are tens of characters; a longer
#: one would be printed whole in every table, plot and history series that names the run).
MAX_NAME = 1000
_RECORD_OBJECTS = ("config", "metric", "stats", "throughput", "error", "target", "verify",
                   "original_us")
#: Text fields of a pass's ``throughput`` / ``stats`` (every other one is a number or null).
_TEXT_FIELDS = {"throughput": ("bound",), "stats": ("stop_reason",)}
#: ``metric`` lists whose items the tools read as numbers.
_NUMERIC_METRICS = ("measure.time", "measure.gpu.memory")
#: ``stats`` fields that are lists of numbers (``--repetitions``: one median per repetition).
_STATS_LISTS = ("repetition_medians",)


#: The largest whole number taken as a number (beyond it an int no longer converts to float).
MAX_INT = 2**63
#: The largest ``count`` (a config's calls in a workload): exact in a float.
MAX_COUNT = 2**53


def _is_number(value: Any) -> bool:
    if isinstance(value, float):
        return True
    return isinstance(value, int) and not isinstance(value, bool) and -MAX_INT <= value <= MAX_INT


_FLOAT_ONLY = frozenset({float})
_PLAIN_NUMBERS = frozenset({float, int})


def _all_numbers(items: list) -> bool:
    """Whether every item of a list is a number (:func:`_is_number`); the types of a list of
    parsed JSON are told apart in one pass of C code (a record holds thousands of times)."""
    kinds = set(map(type, items))
    if kinds <= _FLOAT_ONLY:
        return True
    if kinds <= _PLAIN_NUMBERS:
        return all(-MAX_INT <= v <= MAX_INT for v in items if type(v) is int)  # noqa: E721
    return all(_is_number(v) for v in items)


def _pass_problem(key: str, name: str, entry: Any) -> Optional[str]:
    """What is wrong with one pass entry of ``metric``/``stats``/``throughput`` (null: a pass
    that measured nothing, as ``-i 0`` writes it)."""
    if entry is None:
        return None
    where = f"run record's {key}.{name}"
    if not isinstance(entry, dict):
        return f"{where} is not an object"
    for field_name, item in entry.items():
        if key == "metric":
            if field_name in _NUMERIC_METRICS and not (
                    _is_number(item) or (isinstance(item, list) and _all_numbers(item))):
                return f"{where}.{field_name} is not a list of numbers"
        elif key == "stats" and field_name in _STATS_LISTS:
            if not (isinstance(item, list) and all(_is_number(v) for v in item)):
                return f"{where}.{field_name} is not a list of numbers"
        elif not (item is None or _is_number(item)
                  or (field_name in _TEXT_FIELDS.get(key, ()) and isinstance(item, str))):
            return f"{where}.{field_name} is not a number"
    return None


def schema_problem(value: Dict[str, Any]) -> Optional[str]:
    """What makes a parsed line unusable for the tools (wrong types where they read), or None:
    a header's ``run_options`` and ``sys_info`` are objects; a record's ``op_name``, ``id`` and
    ``status`` are strings, its ``count`` a whole number >= 0, its ``config``, ``metric``,
    ``stats``, ``original_us``... objects; each pass of ``metric``/``stats``/``throughput`` an
    object (or null) whose values the tools compute with are numbers (``measure.time`` a list of
    numbers), and ``original_us``'s ``cpu``/``device`` numbers."""
    kind = line_kind(value)
    if kind == HEADER:
        for key in ("run_options", "sys_info"):
            if not isinstance(value[key], dict):
                return f"header's {key} is not an object"
        return None
    if kind != RECORD:
        return None
    for key in _RECORD_TEXT:
        if key in value and not isinstance(value[key], str):
            return f"run record's {key} is not a string"
        if len(value.get(key) or "") > MAX_NAME:
            return f"run record's {key} is longer than {MAX_NAME} characters"
    for key in _RECORD_OBJECTS:
        if value.get(key) is not None and not isinstance(value[key], dict):
            return f"run record's {key} is not an object"
    count = value.get("count")
    if count is not None and not (type(count) is int and 0 <= count <= MAX_COUNT):  # noqa: E721
        return f"run record's count is not a whole number from 0 to {MAX_COUNT}"
    if not isinstance(value.get("disturbed", False), bool):
        return "run record's disturbed is not true/false"
    drift = value.get("canary_drift")
    if drift is not None and not _is_number(drift):
        return "run record's canary_drift is not a number"
    for name, item in (value.get("original_us") or {}).items():
        if name in ("cpu", "device") and not (item is None or _is_number(item)):
            return f"run record's original_us.{name} is not a number"
    for key in ("metric", "stats", "throughput"):
        for name, entry in (value.get(key) or {}).items():
            why = _pass_problem(key, name, entry)
            if why is not None:
                return why
    return None
