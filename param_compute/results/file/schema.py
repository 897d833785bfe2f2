"""Which kind each line of a results file is, and the JSON types a line must have to be usable.

Every line written since format version 2 says its kind (``"kind"``: :data:`KINDS`); a line
without one (our files before, PARAM's) has it guessed from its keys, here and nowhere else
(:func:`line_kind`), and an old ``{"step_replay": {...}}`` line is read as today's step record
(:func:`upgraded`). The tools compute with what a record holds (counts times medians, sums of
original times...), so a field of the wrong type makes the whole line unusable: reported by the
reader with its file, line and field (:func:`schema_problem`), never a crash further on.
Torch-free.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from param_compute.formatting import printable

#: The format version a header carries (``format_version``); see ``results.file``.
FORMAT_VERSION = 2
#: Line kinds: the header, a run's record, the step replay's record, the finish line, a resume
#: marker, a profiler batch line; ``OTHER``: a line of no kind this version knows.
HEADER, RUN, STEP, FINISH, RESUME, BATCH, OTHER = (
    "header", "run", "step", "finish", "resume", "batch", "other")
#: The name the tools have used for a run's record.
RECORD = RUN
#: The kinds of a record (``op_name``, ``id``, ``status``...): a config's run, the step replay.
RECORDS = (RUN, STEP)
KINDS = (HEADER, RUN, STEP, FINISH, RESUME, BATCH)
#: ``op_name``, ``id`` and pass name of the step replay's record (``runtime.step_run``).
STEP_OP, STEP_ID, STEP_PASS = "step_replay", "0|0|0", "step"


def line_kind(value: Dict[str, Any]) -> str:
    """Which kind of line a JSON object is: its ``kind`` (``OTHER`` for one this version does
    not know), or for a line without one (written before format version 2, or by PARAM) the
    kind its keys say."""
    kind = value.get("kind")
    if kind is not None:
        return kind if isinstance(kind, str) and kind in KINDS else OTHER
    if "run_options" in value and "sys_info" in value:
        return HEADER
    if "op_name" in value and "id" in value:
        return RUN
    if "finish_time" in value:
        return FINISH
    if "resume_time" in value:
        return RESUME
    if "step_replay" in value:
        return STEP
    if "ncu_file" in value or "nsys_file" in value:
        return BATCH
    return OTHER


def _error_object(error: Any) -> Any:
    """An old step line's ``error`` ("Type: message") as a record's ``error`` object."""
    if not isinstance(error, str):
        return error  # not text: the record's schema check says so
    kind, colon, message = error.partition(": ")
    if not colon or not kind.isidentifier():
        kind, message = "StepReplayError", error
    return {"type": kind, "message": message, "phase": "step"}


def upgraded(value: Dict[str, Any]) -> Dict[str, Any]:
    """A line in today's shape: an old ``{"step_replay": {...}}`` line (no ``kind``) as the
    step record (``kind`` step, ``op_name`` step_replay, ``id`` 0|0|0, ``status`` ok or error,
    the step times as the ``step`` pass's ``metric`` and ``stats``, the step file and its
    calls as the config's input, every other field of the replay under ``step``); any other
    line as it is."""
    old = value.get("step_replay")
    if "kind" in value or not isinstance(old, dict) or "op_name" in value:
        return value
    step = dict(old)
    error = step.pop("error", None)
    stats = step.pop("stats", None)
    times = step.pop("step_ms", None)
    record: Dict[str, Any] = {"kind": STEP, "op_name": STEP_OP, "id": STEP_ID,
                              "status": "ok" if error is None else "error",
                              "metric": {STEP_PASS: {"measure.time": times}}
                              if times is not None else {},
                              "stats": {STEP_PASS: stats} if stats is not None else {}}
    if error is not None:
        record["error"] = _error_object(error)
    record["config"] = {"input": {key: step[key] for key in ("step_file", "calls")
                                  if key in step}}
    record["step"] = step
    return record


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


def _pass_problem(key: str, name: str, entry: Any, who: str) -> Optional[str]:
    """What is wrong with one pass entry of ``metric``/``stats``/``throughput`` (null: a pass
    that measured nothing, as ``-i 0`` writes it)."""
    if entry is None:
        return None
    where = f"{who}'s {key}.{name}"
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
    a ``kind`` this version knows; a header's ``run_options`` and ``sys_info`` are objects; a
    record's ``op_name``, ``id`` and ``status`` are strings, its ``count`` a whole number >= 0,
    its ``config``, ``metric``, ``stats``, ``original_us``... objects; each pass of
    ``metric``/``stats``/``throughput`` an object (or null) whose values the tools compute with
    are numbers (``measure.time`` a list of numbers), and ``original_us``'s ``cpu``/``device``
    numbers; a step record's ``step`` an object whose counts, times and per-config entries are
    numbers (:func:`_step_problem`)."""
    kind = value.get("kind")
    if kind is not None and not (isinstance(kind, str) and kind in KINDS):
        shown = f"'{printable(kind, 40)}'" if isinstance(kind, str) else "not a string"
        return f"a line of unknown kind ({shown}; this version reads {', '.join(KINDS)})"
    kind = line_kind(value)
    if kind == HEADER:
        for key in ("run_options", "sys_info"):
            if not isinstance(value.get(key), dict):
                return f"header's {key} is not an object"
        version = value.get("format_version")
        if version is not None and not (type(version) is int and version > 0):  # noqa: E721
            return "header's format_version is not a whole number"
        return None
    if kind == RUN:
        return _record_problem(value, "run record")
    if kind == STEP:
        if "step_replay" in value and "step" not in value:  # an old line, not upgradable
            return "step line's step_replay is not an object"
        return _record_problem(value, "step record") or _step_problem(value.get("step"))
    return None


def _record_problem(value: Dict[str, Any], who: str) -> Optional[str]:
    for key in _RECORD_TEXT:
        if key in value and not isinstance(value[key], str):
            return f"{who}'s {key} is not a string"
        if key != "status" and key not in value:
            return f"{who} has no {key}"
        if len(value.get(key) or "") > MAX_NAME:
            return f"{who}'s {key} is longer than {MAX_NAME} characters"
    for key in _RECORD_OBJECTS:
        if value.get(key) is not None and not isinstance(value[key], dict):
            return f"{who}'s {key} is not an object"
    count = value.get("count")
    if count is not None and not (type(count) is int and 0 <= count <= MAX_COUNT):  # noqa: E721
        return f"{who}'s count is not a whole number from 0 to {MAX_COUNT}"
    if not isinstance(value.get("disturbed", False), bool):
        return f"{who}'s disturbed is not true/false"
    drift = value.get("canary_drift")
    if drift is not None and not _is_number(drift):
        return f"{who}'s canary_drift is not a number"
    for name, item in (value.get("original_us") or {}).items():
        if name in ("cpu", "device") and not (item is None or _is_number(item)):
            return f"{who}'s original_us.{name} is not a number"
    for key in ("metric", "stats", "throughput"):
        for name, entry in (value.get(key) or {}).items():
            why = _pass_problem(key, name, entry, who)
            if why is not None:
                return why
    return None


#: A step record's counts (whole numbers >= 0) and times or page counts (numbers), where given.
_STEP_COUNTS = ("calls", "replayed_calls", "iterations", "fed_inputs", "dataflow_mismatches",
                "failed_calls", "externals", "warmup", "held_outputs", "held_past_step")
_STEP_NUMBERS = ("real_step_us", "real_host_us")
_STEP_OBJECTS = ("configs", "host_gaps", "original")
#: Per config of the step (``configs``): the numbers the ledger sums.
_CONFIG_NUMBERS = ("in_step_us", "calls", "faults", "original_faults")


def _is_count(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_COUNT  # noqa: E721


def _numbers_problem(entry: Dict[str, Any], names, where: str) -> Optional[str]:
    for name in names:
        item = entry.get(name)
        if item is not None and not _is_number(item):
            return f"{where}.{name} is not a number"
    return None


def _step_problem(step: Any) -> Optional[str]:
    """What is wrong with a step record's ``step`` (the replay's details) where the tools read
    it: its counts, its times, each config's in-step time and page faults, the host gaps and
    the original's totals."""
    where = "step record's step"
    if not isinstance(step, dict):
        return f"{where} is not an object"
    for name in _STEP_COUNTS:
        if step.get(name) is not None and not _is_count(step[name]):
            return f"{where}.{name} is not a whole number from 0 to {MAX_COUNT}"
    why = _numbers_problem(step, _STEP_NUMBERS, where)
    if why is not None:
        return why
    for name in _STEP_OBJECTS:
        if step.get(name) is not None and not isinstance(step[name], dict):
            return f"{where}.{name} is not an object"
    for key, entry in (step.get("configs") or {}).items():
        if not isinstance(entry, dict):
            return f"{where}.configs[{printable(key, 80)}] is not an object"
        why = _numbers_problem(entry, _CONFIG_NUMBERS, f"{where}.configs[{printable(key, 80)}]")
        if why is not None:
            return why
    gaps = step.get("host_gaps") or {}
    if not isinstance(gaps.get("kept", False), bool):
        return f"{where}.host_gaps.kept is not true/false"
    why = _numbers_problem(gaps, ("added_us",), f"{where}.host_gaps")
    if why is not None:
        return why
    return _original_problem(step.get("original") or {}, f"{where}.original")


def _original_problem(original: Dict[str, Any], where: str) -> Optional[str]:
    for name in ("total_us", "captured_us"):
        totals = original.get(name)
        if totals is None:
            continue
        if not isinstance(totals, dict):
            return f"{where}.{name} is not an object"
        why = _numbers_problem(totals, ("cpu", "device"), f"{where}.{name}")
        if why is not None:
            return why
    missing = original.get("not_captured")
    if missing is not None and not isinstance(missing, list):
        return f"{where}.not_captured is not a list"
    for index, item in enumerate(missing or []):
        at = f"{where}.not_captured[{index}]"
        if not isinstance(item, dict):
            return f"{at} is not an object"
        if item.get("calls") is not None and not _is_count(item["calls"]):
            return f"{at}.calls is not a whole number from 0 to {MAX_COUNT}"
        times = item.get("original_us")
        if times is not None and not isinstance(times, dict):
            return f"{at}.original_us is not an object"
        why = _numbers_problem(times or {}, ("cpu", "device"), f"{at}.original_us")
        if why is not None:
            return why
    how = original.get("how")
    if how is not None and not isinstance(how, dict):
        return f"{where}.how is not an object"
    return None
