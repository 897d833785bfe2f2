"""Top-level spec keys that are not operators: what they may hold, checked.

``__process_groups__`` (a job's process groups, written by a multi-rank capture) is
``spec.job``'s; ``__capture__`` is described here.

``__capture__`` (written by ``python -m param_compute.capture``): the settings the captured
workload ran with, so a replay can say when it runs otherwise (``run_benchmark`` warns) or follow
them (``--match-capture``): ``{"device": "cpu" | "cuda" | "cuda:N", "num_threads": N | null,
"source": TEXT, "allocator": {NAME: VALUE}}``. ``allocator`` (a live capture's; absent where
the recording did not say) holds the host allocator's environment settings
(``process.allocator``: ``{}`` for glibc's defaults); a process cannot change its own, so a
replay under others is warned about, and ``--match-capture`` says how to start it. ``num_threads`` is null when the recording did not say (an execution trace
never records it; a Kineto trace does where the recording added it, ``prof.add_metadata(
"num_threads", str(torch.get_num_threads()))``; a live capture always knows). PARAM, which reads
every top-level key as an operator, skips it as an unknown operator. Torch-free.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from param_compute.spec.graphs import GRAPHS_KEY, section_problems
from param_compute.spec.job import PROCESS_GROUPS_KEY, process_groups_problems

CAPTURE_KEY = "__capture__"
#: ``__graphs__``: a captured step's compiled graphs, replayed by ``graph::NAME`` operators
#: (``spec.graphs``); ``__process_groups__``: a job's process groups (``spec.job``).
RESERVED_KEYS = frozenset({CAPTURE_KEY, GRAPHS_KEY, PROCESS_GROUPS_KEY})
CAPTURE_FIELDS = ("device", "num_threads", "source", "allocator")
#: At most this many threads is a believable recorded setting.
MAX_RECORDED_THREADS = 1 << 16


def _is_device(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    kind, sep, index = value.partition(":")
    return kind in ("cpu", "cuda") and (not sep or (index.isdigit() and kind == "cuda"))


def capture_problems(value: Any) -> List[Tuple[tuple, str, Optional[str]]]:
    """(path under the key, message, hint) for each problem of a ``__capture__`` value."""
    if not isinstance(value, dict):
        return [((), f"{CAPTURE_KEY} is an object {{device, num_threads, source}}", None)]
    problems: List[Tuple[tuple, str, Optional[str]]] = [
        ((key,), f"unknown key {key[:40]!r}", f"allowed keys: {', '.join(CAPTURE_FIELDS)}")
        for key in value if key not in CAPTURE_FIELDS]
    if "device" in value and not _is_device(value["device"]):
        problems.append((("device",), f"not a device: {str(value['device'])[:40]!r}",
                         'write "cpu", "cuda" or "cuda:N"'))
    threads = value.get("num_threads")
    if threads is not None and not (isinstance(threads, int) and not isinstance(threads, bool)
                                    and 1 <= threads <= MAX_RECORDED_THREADS):
        problems.append((("num_threads",), f"num_threads is an integer from 1 to "
                                           f"{MAX_RECORDED_THREADS} or null, got "
                                           f"{str(threads)[:40]}", None))
    if "source" in value and not isinstance(value["source"], str):
        problems.append((("source",), "source is text", None))
    problems.extend(_allocator_problems(value.get("allocator", {})))
    return problems


def reserved_problems(key: str, value: Any) -> List[Tuple[tuple, str, Optional[str]]]:
    """(path under the key, message, hint) for each problem of reserved key ``key``'s value."""
    if key == GRAPHS_KEY:
        return [(path[1:], message, hint) for path, message, hint in section_problems(value)]
    if key == PROCESS_GROUPS_KEY:
        return process_groups_problems(value)
    return capture_problems(value)


def _allocator_problems(value: Any) -> List[Tuple[tuple, str, Optional[str]]]:
    from param_compute.process.allocator import ALLOCATOR_VARIABLES, MAX_VALUE_CHARS

    if not isinstance(value, dict):
        return [(("allocator",), "allocator is an object of environment settings "
                                 '{"NAME": "value"} ({} for glibc\'s defaults)', None)]
    problems: List[Tuple[tuple, str, Optional[str]]] = []
    for name, setting in value.items():
        if name not in ALLOCATOR_VARIABLES:
            problems.append((("allocator", str(name)[:40]), f"not an allocator setting: "
                             f"{str(name)[:40]!r}", f"known: {', '.join(ALLOCATOR_VARIABLES)}"))
        elif not isinstance(setting, str) or len(setting) > MAX_VALUE_CHARS \
                or not setting.isprintable():  # an environment value, shown in warnings
            problems.append((("allocator", name), f"{name} is text of at most "
                             f"{MAX_VALUE_CHARS} printable characters", None))
    return problems


def recorded_threads(value: Any) -> Optional[int]:
    """A thread count as a trace's metadata records it (an int, or text such as ``"4"``);
    None where it is absent or not a believable count."""
    if isinstance(value, str) and value.strip().isdigit() and len(value) <= 8:
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) \
            and 1 <= value <= MAX_RECORDED_THREADS:
        return value
    return None


def capture_settings(raw: Any) -> Optional[Dict[str, Any]]:
    """A (validated) spec's ``__capture__`` object, or None."""
    value = raw.get(CAPTURE_KEY) if isinstance(raw, dict) else None
    return value if isinstance(value, dict) else None


def allocator_difference(settings: Optional[Dict[str, Any]],
                         allocator: Dict[str, str]) -> Optional[str]:
    """How a run's allocator settings differ from the capture's (None: the same, or the
    capture did not record them)."""
    from param_compute.process.allocator import describe

    captured = (settings or {}).get("allocator")
    if not isinstance(captured, dict) or captured == allocator:
        return None
    return f"allocator {describe(allocator)} (captured with {describe(captured)})"


def differences(settings: Optional[Dict[str, Any]], device: str,
                num_threads: int) -> List[str]:
    """What a run with ``device`` and ``num_threads`` does otherwise than the capture did."""
    if not settings:
        return []
    out = []
    captured_device = settings.get("device")
    if captured_device and captured_device.split(":")[0] != device.split(":")[0]:
        out.append(f"device {device} (captured on {captured_device})")
    threads = settings.get("num_threads")
    if threads is not None and threads != num_threads:
        out.append(f"--num-threads {num_threads} (captured with {threads})")
    return out
