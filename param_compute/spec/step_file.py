"""The step file (``NAME.step.json``): a captured step's calls in order, with their dataflow.

A captured spec folds a step's calls into configs with counts; the step file keeps what the
folding loses, so that ``run_benchmark --replay-step`` can replay the step as a whole: which
config each call ran, in which order, and which earlier call produced each tensor it read.
Torch-free; written by the capture, read (as untrusted input) by the step replay.

Format (``version`` 1)::

    {"format": "param_compute.step", "version": 1, "source": "...",
     "spec": "NAME.json",                 # the spec captured with it (its file name)
     "spec_sha256": "...",                # optional: the sha256 of that spec's bytes as
                                          # written (a results header's spec_sha256)
     "externals": E,                      # tensors read but not produced in the step
     "calls": [{"run": "aten::mm|0|0|2",  # the call's config: the spec's run key
                "in": [[PATH, CALL, OUT], ...],   # inputs fed by earlier calls' outputs
                "ext": [[PATH, X], ...],          # external tensor X (0 <= X < E), shared
                "original_us": 12.5,              # optional: the call's time in the original
                "faults": 1568,                   # optional: its minor page faults there
                "gap_us": 14.2,                   # optional: the original's host time
                                                  # before it outside captured calls (a shape)
                "hold": [[OUT, UNTIL], ...]}, ...],  # optional: outputs kept past their last
                                                  # reader: until call UNTIL, -1: the step's end
     "real_step_us": 1234.5,              # optional: the unprofiled step (live capture)
     "real_host_us": 1100.0,              # its host time (required with gap_us; at most
                                          # real_step_us where both are given)
     "real_host_from": "unprofiled",      # how: "unprofiled" (live) or "profiled" (a trace's,
                                          # an upper bound; --host-gaps auto leaves it)
     "tail_gap_us": 35.0,                 # optional: host time after the last call (shape)
     "original": {...}}                   # optional: the original's totals (capture report)

Version 2 is a job's (``spec.job``: one step per rank, written by a multi-rank capture, or by a
capture with collectives)::

    {"format": "param_compute.step", "version": 2, "spec": "JOB.json", "source": "...",
     "spec_sha256": "...", "world_size": 2,
     "ranks": [{"rank": 0, "externals": E, "calls": [...], "real_step_us": ..., ...}, ...]}

Each rank's entry holds a version-1 body (its calls, externals, times and host gaps: the rank
replays its own, ``rank_step``), one per rank of the world. Its calls may also say

* ``"waits": [CALL, ...]``: earlier calls (async collectives) whose work is waited right
  before this call, where the original waited it (work never waited is waited at the step's
  end);
* ``"comm_us": 812.0``: a collective call's communication time in the original (from its
  issue to its backend span's end: gloo's thread, or NCCL's kernel), beside ``original_us``
  (the call on the host).

A version-1 file is read as rank 0 of a world of one.

``PATH`` names a tensor among a call's arguments: ``[i]`` (positional ``i``), ``[i, j]`` (item
``j`` of the list at ``i``), ``["name"]`` / ``["name", j]`` for keyword arguments. ``OUT`` names
one of a call's outputs: ``[k]`` (output ``k``; a single returned tensor is output 0) or
``[k, j]`` (item ``j`` of a returned list). ``CALL`` is the index of an earlier call. Tensor
arguments named in neither list are generated for that call alone. ``hold`` (a live capture
saw when each output was released) keeps output ``OUT`` of the call alive until after call
``UNTIL`` (at least the call itself), or with ``-1`` past the step's end, to the next step's
start (a gradient in ``.grad`` until the next ``zero_grad``); without it an output is released
after its last reader.

``spec`` and ``spec_sha256`` say which spec the step belongs to: a replay names a step file
captured with another spec (foreign) or with this one before it changed (stale), see
``runtime.step_run``. Files written before ``spec_sha256`` existed are still read.

A step file is untrusted input: at most ``MAX_STEP_BYTES`` bytes, a regular file (a FIFO is
refused unopened), at most ``MAX_CALLS`` calls counted before the parse, parsed only where its
memory, told before the parse, fits (``untrusted_json``), nested at most ``MAX_STEP_DEPTH``
levels, no object naming a key twice, no ``NaN``/``Infinity``, then every entry checked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from param_compute import untrusted_json
from param_compute.errors import Problem, SpecError
from param_compute.files import read_bounded, write_new
from param_compute.spec.wording import short

FORMAT = "param_compute.step"
VERSION = 1
#: A job's step file: one body per rank.
JOB_VERSION = 2
VERSIONS = (VERSION, JOB_VERSION)
#: The most ranks a step file may hold.
MAX_RANKS = 1 << 16
#: Bounds on an untrusted step file.
MAX_STEP_BYTES = 256 * 2**20
MAX_CALLS = 5_000_000
#: JSON objects besides the calls (``original``'s entries): counted with them before the parse.
MAX_OTHER_OBJECTS = 100_000
#: Nesting levels (a step file nests six).
MAX_STEP_DEPTH = 16
#: Characters of the spec's name a step file records.
MAX_SPEC_NAME_CHARS = 4096
MAX_EDGES_PER_CALL = 4096
MAX_INDEX = 2**31
MAX_NAME_CHARS = 128
#: The largest time (us) or page count a call or step may hold (31 years; 4 EB of pages).
MAX_NUMBER = 1e15
#: The longest host step (µs) a step file may ask a replay keeping host gaps to take (10 min).
MAX_HOST_STEP_US = 6e8
#: How a step file's ``real_host_us`` was timed.
HOST_TIMINGS = ("unprofiled", "profiled")

PathItem = Union[int, str]


class StepFileError(SpecError):
    """A step file that cannot be used: every problem, each at its JSON path."""

    def render(self) -> str:
        count = len(self.problems)
        head = f"{self.source}: invalid step file, {count} problem{'s' if count != 1 else ''}:"
        return "\n".join([head] + ["  " + p.render(self.source) for p in self.problems])


def step_path(spec_path: Path) -> Path:
    """``NAME.json`` -> ``NAME.step.json`` beside it."""
    spec_path = Path(spec_path)
    name = spec_path.name[:-5] if spec_path.name.endswith(".json") else spec_path.name
    return spec_path.with_name(f"{name}.step.json")


def write_step_file(path: Path, data: Dict[str, Any]) -> Path:
    path = Path(path)
    body = {"format": FORMAT, "version": JOB_VERSION if "ranks" in data else VERSION, **data}
    write_new(path, json.dumps(body, separators=(",", ":")) + "\n")
    return path


def _read_bytes(path: Path) -> bytes:
    """The step file's bytes: a regular file (a FIFO never blocks the open) of at most
    ``MAX_STEP_BYTES`` (``files.read_bounded``)."""
    return read_bounded(path, MAX_STEP_BYTES, error=lambda refused: StepFileError(
        str(path), [Problem((), refused.reason)]))


def _count_calls(text: str) -> None:
    """Refuse, before the parse, a text of more JSON objects than ``MAX_CALLS`` calls and
    ``original`` can hold (each call is one object): counted at C speed, then, where the quick
    count (braces inside strings included) is over, outside strings only."""
    most = MAX_CALLS + MAX_OTHER_OBJECTS + 1
    if text.count("{") <= most:
        return
    objects = untrusted_json.shape_of(text).objects
    if objects > most:
        raise untrusted_json.JsonRefused(
            f"{objects:,} JSON objects: more than a step file of at most {MAX_CALLS:,} calls "
            f"holds (one object per call, at most {MAX_OTHER_OBJECTS:,} more in original); "
            "nothing was parsed")


def read_step_file(path: Path) -> Dict[str, Any]:
    """Read and validate a step file; raise ``StepFileError`` naming the file and entry."""
    path = Path(path)
    try:
        text = untrusted_json.decode(_read_bytes(path))  # the bytes freed before the parse
        _count_calls(text)
        data = untrusted_json.parse(text, MAX_STEP_DEPTH, invalid="not valid JSON")
    except untrusted_json.JsonRefused as refused:
        raise StepFileError(str(path), [Problem(refused.where, refused.reason)]) from None
    del text
    problems = validate_step(data)
    if problems:
        raise StepFileError(str(path), problems[:20] + (
            [Problem((), f"... and {len(problems) - 20} more problems")]
            if len(problems) > 20 else []))
    return data


def _is_index(value: Any, limit: int = MAX_INDEX) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < limit


def _path_problem(value: Any, what: str) -> Optional[str]:
    if not isinstance(value, list) or not 1 <= len(value) <= 2:
        return f"{what} must be a list of one or two items"
    head = value[0]
    if not (_is_index(head) or (isinstance(head, str) and 0 < len(head) <= MAX_NAME_CHARS
                                and head.isidentifier())):
        return f"{what}[0] must be an argument index or a keyword name"
    if len(value) == 2 and not _is_index(value[1]):
        return f"{what}[1] must be a list index (an integer >= 0)"
    return None


def _out_problem(value: Any) -> Optional[str]:
    if not isinstance(value, list) or not 1 <= len(value) <= 2 \
            or not all(_is_index(v) for v in value):
        return "the output must be a list of one or two integers >= 0"
    return None


def _number(value: Any) -> bool:
    """A time (us) or page count: finite, >= 0, at most ``MAX_NUMBER`` (sums stay finite)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and 0 <= value <= MAX_NUMBER


def validate_step(data: Any) -> List[Problem]:
    """Every problem of a parsed step file (an empty list: it is valid)."""
    if not isinstance(data, dict):
        return [Problem((), "the step file must be a JSON object")]
    problems: List[Problem] = []
    if data.get("format") != FORMAT:
        problems.append(Problem(("format",), f"must be {FORMAT!r}"))
    if data.get("version") not in VERSIONS:
        problems.append(Problem(("version",), f"unsupported version {short(data.get('version'))}"
                                f" (this param_compute reads versions "
                                f"{', '.join(map(str, VERSIONS))})"))
        return problems
    if data.get("version") == JOB_VERSION:
        return problems + _job_problems(data)
    return problems + _body_problems(data)


def _job_problems(data: Dict[str, Any]) -> List[Problem]:
    """A version-2 file: ``world_size`` and one version-1 body per rank."""
    world = data.get("world_size")
    if not (_is_index(world, MAX_RANKS + 1) and world >= 1):
        return [Problem(("world_size",), f"must be the job's number of ranks, 1 to "
                                         f"{MAX_RANKS}")]
    ranks = data.get("ranks")
    if not isinstance(ranks, list) or len(ranks) != world:
        return [Problem(("ranks",), f"must be a list of {world} steps, one per rank")]
    problems: List[Problem] = _provenance_problems(data)
    seen = set()
    for index, body in enumerate(ranks):
        if not isinstance(body, dict):
            problems.append(Problem(("ranks", index), "a rank's step must be an object"))
            continue
        rank = body.get("rank")
        if not _is_index(rank, world) or rank in seen:
            problems.append(Problem(("ranks", index, "rank"), f"must be a rank from 0 to "
                                    f"{world - 1}, each once"))
        seen.add(rank)
        problems.extend(Problem(("ranks", index) + p.path, p.message, p.hint)
                        for p in _body_problems(body))
        if len(problems) > 100:
            break
    return problems


def rank_step(data: Dict[str, Any], rank: int) -> Dict[str, Any]:
    """The step ``rank`` replays, in version 1's form (``world_size`` and ``rank`` beside):
    a version-2 file's entry for that rank, or a version-1 file as rank 0 of one."""
    if data.get("version") != JOB_VERSION:
        if rank != 0:
            raise StepFileError(str(data.get("spec", "step file")), [Problem(
                (), f"a version-1 step file is one rank's step: rank {rank} has none")])
        return {**data, "world_size": 1, "rank": 0}
    for body in data["ranks"]:
        if body.get("rank") == rank:
            provenance = {key: data[key] for key in ("spec", "spec_sha256") if key in data}
            return {"format": FORMAT, "version": VERSION, **provenance,
                    "source": body.get("source", data.get("source")),
                    "world_size": data["world_size"], **body}
    raise StepFileError(str(data.get("spec", "step file")), [Problem(
        ("ranks",), f"no step for rank {rank}")])


def _body_problems(data: Dict[str, Any]) -> List[Problem]:
    """Every problem of one rank's step (a version-1 file's whole content)."""
    problems: List[Problem] = []
    externals = data.get("externals", 0)
    if not _is_index(externals, MAX_INDEX):
        problems.append(Problem(("externals",), "must be an integer >= 0"))
        externals = 0
    for key in ("real_step_us",):  # (real_host_us: _schedule_problems)
        if key in data and data[key] is not None and not _number(data[key]):
            problems.append(Problem((key,), "must be a finite number >= 0 (at most 1e15)"))
    if "original" in data and not isinstance(data["original"], dict):
        problems.append(Problem(("original",), "must be an object"))
    problems.extend(_provenance_problems(data))
    calls = data.get("calls")
    if not isinstance(calls, list):
        return problems + [Problem(("calls",), "must be a list of calls")]
    if not calls:
        return problems + [Problem(("calls",), "holds no call: a step replay needs at least "
                                   "one (capture writes a step file only where it captured "
                                   "one)")]
    if len(calls) > MAX_CALLS:
        return problems + [Problem(("calls",), f"{len(calls)} calls, over the limit of "
                                   f"{MAX_CALLS}")]
    for index, call in enumerate(calls):
        problems.extend(_call_problems(call, index, externals, len(calls)))
        if len(problems) > 100:
            break
    return problems + _schedule_problems(data, calls)


def _provenance_problems(data: Dict[str, Any]) -> List[Problem]:
    """``spec`` (a file name) and ``spec_sha256`` (64 hexadecimal digits), which name the
    spec the step was captured with, where given."""
    out = []
    name = data.get("spec")
    if "spec" in data and not (isinstance(name, str) and 0 < len(name) <= MAX_SPEC_NAME_CHARS):
        out.append(Problem(("spec",), f"must be the spec's file name (a string of 1 to "
                           f"{MAX_SPEC_NAME_CHARS} characters), not {short(name)}"))
    digest = data.get("spec_sha256")
    if "spec_sha256" in data and not (isinstance(digest, str) and len(digest) == 64
                                      and all(c in "0123456789abcdef" for c in digest)):
        out.append(Problem(("spec_sha256",), f"must be a sha256 digest (64 lowercase "
                           f"hexadecimal digits), not {short(digest)}"))
    return out


def _schedule_problems(data: Dict[str, Any], calls: List[Any]) -> List[Problem]:
    """The host gaps: ``real_host_us``, which a replay keeping them stretches its host step
    to, is required with them and bounded (a file must not make a replay wait for hours)."""
    out = []
    end = data.get("real_host_us")
    if data.get("real_host_from", "unprofiled") not in HOST_TIMINGS:
        out.append(Problem(("real_host_from",), f"must be one of {', '.join(HOST_TIMINGS)}, "
                           f"not {short(data['real_host_from'])}"))
    if "tail_gap_us" in data and not _number(data["tail_gap_us"]):
        out.append(Problem(("tail_gap_us",), "must be a finite number >= 0 (at most 1e15)"))
    if end is None:
        if "tail_gap_us" in data or any(isinstance(c, dict) and "gap_us" in c for c in calls):
            out.append(Problem(("real_host_us",), "is required with gap_us and tail_gap_us "
                               "(the host step they lie in)"))
    elif not _number(end) or end > MAX_HOST_STEP_US:
        out.append(Problem(("real_host_us",), f"must be a number from 0 to "
                           f"{MAX_HOST_STEP_US:.0f} (µs: 10 minutes)"))
    elif _number(data.get("real_step_us")) and end > data["real_step_us"] + 1:
        # the host's part of the step (to its return) cannot outlast the step: a replay
        # keeping it would wait past the real step
        out.append(Problem(("real_host_us",), f"{end:g} µs is longer than the step it is part "
                           f"of (real_step_us {data['real_step_us']:g})"))
    return out


def _hold_problems(holds: Any, where: Tuple[Any, ...], index: int,
                   count: int) -> List[Problem]:
    if not isinstance(holds, list) or len(holds) > MAX_EDGES_PER_CALL:
        return [Problem(where, f"must be a list of at most {MAX_EDGES_PER_CALL} entries")]
    out, held = [], set()
    for j, hold in enumerate(holds):
        at = where + (j,)
        if not isinstance(hold, list) or len(hold) != 2:
            out.append(Problem(at, "must be a list of 2 items: [output, until call]"))
            continue
        problem = _out_problem(hold[0])
        if problem:
            out.append(Problem(at, problem))
        elif tuple(hold[0]) in held:  # two untils for one output: which one holds?
            out.append(Problem(at, f"output {hold[0]} is held twice"))
        else:
            held.add(tuple(hold[0]))
        until = hold[1]
        if (until != -1 or type(until) is not int) and not (
                _is_index(until, count) and until >= index):
            out.append(Problem(at, f"until {short(until)} must be -1 (past the step's end) or a "
                               f"call from this one ({index}) to the last ({count - 1})"))
    return out


def _call_problems(call: Any, index: int, externals: int, count: int) -> List[Problem]:
    where = ("calls", index)
    if not isinstance(call, dict):
        return [Problem(where, "a call must be an object")]
    out: List[Problem] = []
    run = call.get("run")
    if not isinstance(run, str) or run.count("|") != 3 or len(run) > 1024:
        out.append(Problem(where + ("run",), "must be a run key OP|CONFIG|BUILD|INPUT"))
    for key in ("original_us", "faults", "gap_us", "comm_us"):
        if key in call and not _number(call[key]):
            out.append(Problem(where + (key,), "must be a finite number >= 0 (at most 1e15)"))
    if "waits" in call:
        waits = call["waits"]
        if not isinstance(waits, list) or len(waits) > MAX_EDGES_PER_CALL or not all(
                _is_index(w, index) for w in waits):
            out.append(Problem(where + ("waits",), f"must be a list of earlier calls (0 to "
                               f"{index - 1}) whose work is waited here"))
    if "hold" in call:
        out.extend(_hold_problems(call["hold"], where + ("hold",), index, count))
    for field in ("in", "ext"):
        edges = call.get(field, [])
        if not isinstance(edges, list) or len(edges) > MAX_EDGES_PER_CALL:
            out.append(Problem(where + (field,), f"must be a list of at most "
                               f"{MAX_EDGES_PER_CALL} entries"))
            continue
        for j, edge in enumerate(edges):
            at = where + (field, j)
            size = 3 if field == "in" else 2
            if not isinstance(edge, list) or len(edge) != size:
                out.append(Problem(at, f"must be a list of {size} items"))
                continue
            problem = _path_problem(edge[0], "the argument path")
            if problem:
                out.append(Problem(at, problem))
            if field == "in":
                if not _is_index(edge[1], index):
                    out.append(Problem(at, f"producer {short(edge[1])} is not an earlier call "
                                       f"(0 to {index - 1})" if index else
                                       "the first call cannot read an earlier call's output"))
                problem = _out_problem(edge[2])
                if problem:
                    out.append(Problem(at, problem))
            elif not _is_index(edge[1], externals):
                out.append(Problem(at, f"external {short(edge[1])} is not one of the "
                                   f"{externals} externals"))
    return out


def split_run_key(run: str) -> Tuple[str, str]:
    """``"aten::mm|0|0|2"`` -> (``"aten::mm"``, ``"0|0|2"``): the op and the record id."""
    op, _, run_id = run.partition("|")
    return op, run_id


def path_text(path: Sequence[PathItem]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
