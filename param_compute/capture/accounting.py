"""What a capture leaves out, and why: the reasons calls are not captured, grouped by kind.

Every node with compute that a capture does not turn into a config is kept as a ``SkippedOp``
with a true reason and one of the ``KINDS`` below, so that a summary can say in one short line
per group what was left out (details go to DEBUG logging and the capture file). This module is
a leaf: every other capture module may import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

#: kind -> what the group means, as the summary prints it.
KINDS = {
    "collective": "collectives (communication, not compute; replayed by a comms benchmark)",
    "stream": "stream bookkeeping (record_stream, waits: no compute)",
    "triton": "Triton kernels of torch.compile (generated code, no aten schema to replay)",
    "compiled": "compiled regions (torch.compile) not captured as graphs",
    "autograd_node": "bodies of autograd C++ nodes (their recorded calls carry no schema)",
    "namespace": "operators of a namespace not allowed (--allow-namespace NS)",
    "argument": "unsupported argument types",
    "index": "index data a replay cannot recreate from shapes",
    "refused": "refused by the spec resolver",
    "missing": "operators this torch build lacks",
    "unreadable": "unreadable trace nodes",
    "failed": "capture failures",
}

#: Namespaces of communication ops.
COLLECTIVE_NAMESPACES = frozenset({"c10d", "_c10d_functional", "c10d_functional",
                                   "_dtensor", "nccl"})
#: Ops that only order work on streams.
STREAM_OPS = frozenset({"record_stream", "wait_stream", "_wait_tensor", "wait_tensor"})


class Unreplayable(Exception):
    """An operator call a replay cannot recreate; the message says why, ``kind`` which group
    (a key of ``KINDS``; ``argument`` by default)."""

    def __init__(self, message: str, kind: str = "argument"):
        super().__init__(message)
        self.kind = kind


class TraceError(ValueError):
    """A trace or Kineto file that cannot be used: unreadable, over a size or depth cap, not a
    regular file, or malformed. Carries the file and each problem (naming the node or event and
    what is wrong); the command line prints it and exits 2."""

    MAX_SHOWN = 20

    def __init__(self, source: str, problems):
        self.source = str(source)
        self.problems = list(problems) or ["unusable"]
        super().__init__(self.render())

    def render(self) -> str:
        shown = self.problems[:self.MAX_SHOWN]
        if len(self.problems) == 1:
            return f"{self.source}: {shown[0]}"
        more = len(self.problems) - len(shown)
        lines = [f"{self.source}: {len(self.problems)} problems:"]
        lines += [f"  {self.source}: {p}" for p in shown]
        if more:
            lines.append(f"  ... and {more} more")
        return "\n".join(lines)


@dataclass
class SkippedOp:
    op: str
    reason: str
    count: int = 0
    kind: str = "argument"

    def to_json(self) -> Dict[str, Any]:
        return {"op": self.op, "kind": self.kind, "reason": self.reason, "count": self.count}


def op_kind(namespace: str, base: str) -> Optional[str]:
    """The group of an op that is never replayed whatever its arguments, else None."""
    if namespace in COLLECTIVE_NAMESPACES:
        return "collective"
    if base in STREAM_OPS:
        return "stream"
    return None


def kind_reason(kind: str, op: str) -> str:
    """The reason recorded for an op skipped for its kind alone."""
    if kind == "collective":
        return f"{op} is a collective: communication, not compute"
    if kind == "stream":
        return f"{op} is stream bookkeeping: it orders work, it computes nothing"
    return KINDS.get(kind, kind)


class OriginalTimes:
    """Sums of the original (recorded) CPU and device times of calls, in µs, where known."""

    __slots__ = ("calls", "cpu", "cpu_calls", "device", "device_calls")

    def __init__(self):
        self.calls = 0
        self.cpu = self.device = 0.0
        self.cpu_calls = self.device_calls = 0

    def add(self, original: Optional[Tuple[Optional[float], Optional[float]]],
            count: int = 1) -> None:
        self.calls += count
        if original is None:
            return
        cpu, device = original
        if cpu is not None:
            self.cpu += cpu * count
            self.cpu_calls += count
        if device is not None:
            self.device += device * count
            self.device_calls += count

    def mean(self) -> Optional[Dict[str, Optional[float]]]:
        """``{"cpu", "device"}``: the mean per call over the calls whose time is known."""
        if not self.cpu_calls and not self.device_calls:
            return None
        return {"cpu": round(self.cpu / self.cpu_calls, 3) if self.cpu_calls else None,
                "device": round(self.device / self.device_calls, 3) if self.device_calls
                else None}
