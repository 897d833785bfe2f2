"""The measuring protocol: how anything timed is warmed up, sampled and stopped. Torch-free.

One ``Protocol`` drives the one ``Measurer`` for every timed thing: a config's passes, the step
replay, a live capture's step, calibration and the canary. Two named protocols exist:

* ``auto`` (what a run takes when no count is given): measure by time and noise, as
  torch.utils.benchmark, do_bench and Google Benchmark do. After ``AUTO["warmup"]`` call and
  ``AUTO["warmup_time"]`` seconds of warm-up, at least ``AUTO["min_samples"]`` samples, then
  blocks growing by a quarter until the median's 95% interval is within ±``max_noise``% of it,
  or ``max_time`` seconds of measuring are spent (the per-config cap; at least
  ``min_samples`` samples are taken whatever it says). The record's ``stop_reason`` says which
  ended it (``noise``, ``max_time``, ``max_iteration``). A tiny config costs about
  ``warmup_time`` plus a few milliseconds; a noisy one at most ``warmup_time + max_time``.
* ``param``: PARAM's counts, ``-w 1 -i 1`` unless given, and nothing else: one sample.

Any count given (``-w``/``-i``) means PARAM's exact counts, as PARAM users expect; the time and
noise bounds (``--warmup-time``, ``--min-time``, ``--max-noise``, ``--max-time``) may be given
with either and replace the protocol's own (``resolve``); ``--min-time S`` alone measures for S
seconds, as it always did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from param_compute.errors import OptionsError
from param_compute.measure.timing import ExecMode

#: The values of each named protocol for the fields the user did not give.
#: ``max_noise`` None: no noise rule.
AUTO: Dict[str, Any] = {"warmup": 1, "iteration": 5, "warmup_time": 0.01, "min_time": 0.0,
                        "max_noise": 2.0, "max_time": 0.1, "min_samples": 5}
PARAM: Dict[str, Any] = {"warmup": 1, "iteration": 1, "warmup_time": 0.0, "min_time": 0.0,
                         "max_noise": None, "max_time": 10.0, "min_samples": 10}
PROTOCOLS = {"auto": AUTO, "param": PARAM}
#: The fields a protocol fills, in the order ``resolve`` reads them.
FIELDS = ("warmup", "iteration", "warmup_time", "min_time", "max_noise", "max_time")


def resolve(protocol: Optional[str], given: Dict[str, Any]) -> Dict[str, Any]:
    """The protocol's name and every field of ``FIELDS``, from what was given (None: not
    given). No protocol named: ``param`` when a count (``warmup``, ``iteration``) was given,
    else ``auto``. Given values are kept; the others come from the protocol, except that under
    ``auto`` a ``min_time`` given asks for that much measuring: no noise rule unless
    ``max_noise`` is given too, and a cap of at least ``min_time``."""
    if protocol is None:
        protocol = "param" if given.get("warmup") is not None \
            or given.get("iteration") is not None else "auto"
    if protocol not in PROTOCOLS:
        raise OptionsError(f"--protocol must be one of {', '.join(PROTOCOLS)}, got "
                           f"{protocol!r}")
    values = dict(PROTOCOLS[protocol])
    min_time = given.get("min_time")
    if protocol == "auto" and min_time is not None:
        values["max_noise"] = None
        if isinstance(min_time, (int, float)) and min_time > values["max_time"]:
            values["max_time"] = min_time
    out = {name: given[name] if given.get(name) is not None else values[name]
           for name in FIELDS}
    out["protocol"] = protocol
    return out


@dataclass(frozen=True)
class Protocol:
    """What the ``Measurer`` does for one measurement.

    ``warmup`` calls, then warm-up until ``warmup_time`` seconds of calls have run (with
    ``min_time``, also until the per-block median settles); ``iteration`` measured calls, then
    more until ``min_time`` seconds are measured, or with ``max_noise`` (percent) until the
    median's 95% interval is within ±``max_noise``% (at least ``min_samples`` values), at most
    ``max_time`` seconds or ``max_iteration`` calls. ``exec_mode``: discrete or continuous
    timing; ``timer``: whose times the sample holds (``measure.clocks``); the discard rules,
    ``keep_samples`` raw values kept, and ``nvtx_iterations`` (an NVTX range per measured
    call, for a profiler)."""

    warmup: int = 1
    iteration: int = 1
    warmup_time: float = 0.0
    min_time: float = 0.0
    max_noise: float = 0.0
    max_time: float = 10.0
    max_iteration: int = 100_000
    min_samples: int = PARAM["min_samples"]
    exec_mode: ExecMode = ExecMode.DISCRETE
    timer: str = "wall"
    discard_disturbed: bool = False
    discard_throttled: bool = False
    keep_samples: int = 2000
    nvtx_iterations: bool = False

    @property
    def extends(self) -> bool:
        """Whether the measurement goes past its ``iteration`` calls (time or noise)."""
        return bool(self.max_noise) or self.min_time > 0
