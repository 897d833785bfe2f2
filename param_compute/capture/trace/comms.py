"""An execution trace's collectives: their process groups, their backend's spans, the job's shape.

* **The job.** A Kineto trace of a distributed run carries ``distributedInfo``: the backend, this
  trace's ``rank`` and the ``world_size``, and ``pg_config``, every process group's name
  (``pg_name``), description, size and global ``ranks``. ``distributed_info`` reads and checks
  it (untrusted: a wrong type is a ``TraceError`` naming the file and field).
* **A call's group.** NCCL (and older) traces record a ``record_param_comms`` node below each
  ``c10d::`` call, with its ``pg_name`` and a sequence number; gloo records none, and a call is
  then on the default group (``DEFAULT_GROUP``, torch's name for it), which the capture report
  says. A ``record_param_comms`` named ``wait`` marks where a collective (by its sequence
  number) was waited (``wait_records``).
* **Communication time.** The backend runs a collective on its own thread, under a
  ``gloo:<name>`` (or ``nccl:<name>``) record-function node, usually numbered right after the
  ``c10d::`` call's and over the call's tensors: ``backend_nodes`` pairs each call with it (in
  order where there is one per call), and the Kineto join gives the call's communication time,
  from its issue to its span's end (on CUDA, the kernels the call launched are its
  communication instead).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from param_compute.capture.accounting import TraceError
from param_compute.capture.trace.walk import COLLECTIVE_SPAN_PREFIXES, TraceTree, attr
from param_compute.formatting import printable

#: torch's name for the default process group (``pg_config``'s first ``pg_name``).
DEFAULT_GROUP = "0"
MAX_WORLD = 1 << 16
MAX_GROUPS = 4096
MAX_TEXT = 200


@dataclass
class DistInfo:
    """A rank's view of its job, from Kineto's ``distributedInfo``."""

    rank: int
    world_size: int
    backend: str = ""
    groups: Dict[str, Dict[str, Any]] = field(default_factory=dict)


def _int(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _text(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_TEXT


def distributed_info(kineto: Dict[str, Any], source: Any) -> Optional[DistInfo]:
    """The trace's ``distributedInfo`` checked, or None where it has none (not distributed)."""
    info = kineto.get("distributedInfo")
    if info is None:
        return None
    where = "distributedInfo"

    def refuse(what: str) -> TraceError:
        return TraceError(source, [f"{where}: {what}"])

    if not isinstance(info, dict):
        raise refuse("is not an object")
    world = info.get("world_size")
    if not _int(world, 1, MAX_WORLD):
        raise refuse(f"world_size must be an integer from 1 to {MAX_WORLD}")
    rank = info.get("rank")
    if not _int(rank, 0, world - 1):
        raise refuse(f"rank must be an integer from 0 to {world - 1}")
    backend = info.get("backend", "")
    if not _text(backend):
        raise refuse(f"backend must be text of at most {MAX_TEXT} characters")
    groups: Dict[str, Dict[str, Any]] = {}
    configs = info.get("pg_config", [])
    if not isinstance(configs, list) or len(configs) > MAX_GROUPS:
        raise refuse(f"pg_config must be a list of at most {MAX_GROUPS} process groups")
    for index, config in enumerate(configs):
        at = f"pg_config[{index}]"
        if not isinstance(config, dict):
            raise refuse(f"{at} is not an object")
        name = config.get("pg_name")
        if not _text(name) or not name or not name.isprintable():
            raise refuse(f"{at}.pg_name must be printable text of at most {MAX_TEXT} "
                         "characters")
        ranks = config.get("ranks")
        if not isinstance(ranks, list) or not ranks or len(ranks) > MAX_WORLD \
                or not all(_int(r, 0, world - 1) for r in ranks) or len(set(ranks)) != len(ranks):
            raise refuse(f"{at}.ranks must be distinct ranks from 0 to {world - 1}")
        for key in ("pg_desc", "backend_config"):
            if key in config and not _text(config[key]):
                raise refuse(f"{at}.{key} must be text of at most {MAX_TEXT} characters")
        groups[name] = {"ranks": sorted(ranks),
                        "backend": printable(config.get("backend_config") or backend, 100),
                        "desc": printable(config.get("pg_desc", ""), 100)}
    return DistInfo(rank, world, printable(backend, 100), groups)


def _tensor_ids(node: Dict[str, Any]) -> set:
    """The tensor and storage ids a node's inputs and outputs name."""
    found: set = set()

    def walk(value: Any) -> None:
        if isinstance(value, list):
            if len(value) >= 6 and isinstance(value[0], int) and isinstance(value[5], str):
                found.add(("t", value[0]))
                found.add(("s", value[1]))
                return
            for item in value:
                walk(item)

    for side in ("inputs", "outputs"):
        entry = node.get(side)
        walk(entry.get("values") if isinstance(entry, dict) else entry)
    return found


def backend_nodes(tree: TraceTree, calls: List[Dict[str, Any]]) -> Dict[Any, Dict[str, Any]]:
    """c10d call node id -> the backend's node that ran it (``gloo:all_reduce``, ...): where
    the trace holds as many backend nodes as calls, each call's in order; else, of the next
    few not yet paired after the call (by id), the first over one of its tensors, else the
    first."""
    spans = sorted((n for n in tree.nodes
                    if str(n.get("name", "")).startswith(COLLECTIVE_SPAN_PREFIXES)
                    and isinstance(n.get("id"), int)), key=lambda n: n["id"])
    ordered = sorted((c for c in calls if isinstance(c.get("id"), int)), key=lambda n: n["id"])
    if ordered and len(ordered) == len(spans):
        # one span per call: the backend ran them in the order they were issued (a call's
        # node may be numbered after its span began: an id says when the node was recorded)
        return {call["id"]: span for call, span in zip(ordered, spans)}
    ids = [n["id"] for n in spans]
    taken: set = set()
    out: Dict[Any, Dict[str, Any]] = {}
    for call in sorted(calls, key=lambda n: n["id"] if isinstance(n["id"], int) else 0):
        if not isinstance(call.get("id"), int):
            continue
        tensors = _tensor_ids(call)
        start = bisect.bisect_right(ids, call["id"])
        free = [span for span in spans[start:start + 64] if span["id"] not in taken][:8]
        if not free:
            continue
        # over one of the call's tensors where one is (gloo runs a reduce-scatter as an
        # all-reduce over a buffer of its own: then simply the next)
        span = next((s for s in free if tensors & _tensor_ids(s)), free[0])
        taken.add(span["id"])
        out[call["id"]] = span
    return out


def _record(tree: TraceTree, node: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The ``record_param_comms`` node below a call (NCCL and older traces), if any."""
    stack = list(tree.children.get(node["id"], []))
    seen = 0
    while stack and seen < 64:
        child = stack.pop()
        seen += 1
        if child.get("name") == "record_param_comms":
            return child
        stack.extend(tree.children.get(child["id"], []))
    return None


def _values(node: Dict[str, Any]) -> list:
    inputs = node.get("inputs")
    values = inputs.get("values") if isinstance(inputs, dict) else inputs
    return values if isinstance(values, list) else []


def recorded_seq(tree: TraceTree, node: Dict[str, Any]) -> Optional[int]:
    """The sequence number a call's ``record_param_comms`` gives its collective (what the
    trace's ``wait`` records name)."""
    record = _record(tree, node)
    values = _values(record) if record is not None else []
    seq = values[1] if len(values) > 1 else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def wait_records(tree: TraceTree, window: Optional[set]) -> List[tuple]:
    """(node, sequence number) of each ``record_param_comms`` ``wait`` in the window: where
    the original waited a collective's work (NCCL traces record them for some: DDP's
    broadcasts)."""
    out = []
    for node in tree.nodes:
        if node.get("name") != "record_param_comms" or attr(node, "collective_name") != "wait":
            continue
        if window is not None and node["id"] not in window:
            continue
        values = _values(node)
        seq = values[0] if values else None
        if isinstance(seq, int) and not isinstance(seq, bool):
            out.append((node, seq))
    return out


def recorded_group(tree: TraceTree, node: Dict[str, Any]) -> Optional[str]:
    """The process group a ``record_param_comms`` node below a call names (NCCL traces)."""
    record = _record(tree, node)
    if record is None:
        return None
    name = attr(record, "pg_name")
    if _text(name) and name:
        return name
    values = _values(record)
    if len(values) > 2 and isinstance(values[2], list) and values[2] and _text(values[2][0]) \
            and values[2][0]:
        return values[2][0]
    return None


def _union(spans: List[tuple]) -> List[tuple]:
    merged: List[list] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [tuple(span) for span in merged]


def uncovered(spans: List[tuple], cover: List[tuple]) -> float:
    """How long the union of ``spans`` lies outside the union of ``cover`` (same unit)."""
    covering = _union(cover)
    total = 0.0
    for start, end in _union(spans):
        inside = sum(max(0.0, min(end, b) - max(start, a)) for a, b in covering
                     if a < end and b > start)
        total += (end - start) - inside
    return total
