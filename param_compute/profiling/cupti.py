"""``--cupti-profiler``: CUDA performance counters through torch.profiler's CUPTI range profiler.

PARAM's flags and defaults: ``--cupti-profiler-metrics`` (comma separated, default
``kineto__cuda_core_flops``) and ``--cupti-profiler-measure-per-kernel``. The run goes under
torch.profiler (``-p`` is implied) with ``_ExperimentalConfig(profiler_metrics=...,
profiler_measure_per_kernel=...)``; Kineto writes each measured range, its counters in ``args``,
into the Chrome trace as a ``cuda_profiler_range`` event. After the run the counters are summed
per run id (each range goes to the innermost ``param_compute|OP|ID...`` range around it) into
``RESULTS_cupti.json`` beside the results. On a device other than CUDA: a warning, and the run goes
on without it, as PARAM does.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from param_compute.files import read_bounded

log = logging.getLogger("param_compute")

DEFAULT_METRICS = "kineto__cuda_core_flops"
RANGE_CATEGORY = "cuda_profiler_range"
#: Trace categories of the ranges that name runs (CPU side and their GPU-side projection).
_RUN_RANGE_CATEGORIES = ("user_annotation", "gpu_user_annotation")
UNATTRIBUTED = "(outside any run)"
#: The largest Kineto trace summarized (as ``capture``'s bound on a trace).
MAX_TRACE_BYTES = 2 << 30


@dataclass(frozen=True)
class CuptiSettings:
    metrics: Tuple[str, ...]
    per_kernel: bool = False

    def experimental_config(self, config_class: Optional[Callable[..., Any]] = None) -> Any:
        """torch.profiler's ``_ExperimentalConfig`` asking for the counters (``config_class``:
        the seam tests substitute)."""
        if config_class is None:
            from torch.profiler import _ExperimentalConfig as config_class
        return config_class(profiler_metrics=list(self.metrics),
                            profiler_measure_per_kernel=self.per_kernel)


def add_arguments(parser) -> None:
    parser.add_argument("--cupti-profiler", action="store_true",
                        help="measure CUDA performance counters with the CUPTI range profiler "
                             "(implies -p): in the trace, summed per run in RESULTS_cupti.json")
    parser.add_argument("--cupti-profiler-metrics", default=DEFAULT_METRICS, metavar="M1,M2",
                        help=f"counters to measure, comma separated (default {DEFAULT_METRICS}; "
                             "kineto__tensor_core_insts counts tensor-core instructions)")
    parser.add_argument("--cupti-profiler-measure-per-kernel", action="store_true",
                        help="one CUPTI range per kernel (slow) instead of one per profile")


def settings_from_args(args, device: str) -> Optional[CuptiSettings]:
    """The CUPTI settings the command line asks for; None when not asked or not on CUDA."""
    if not args.cupti_profiler:
        return None
    if not device.startswith("cuda"):
        log.warning("--cupti-profiler needs a CUDA device; running on %s without it", device)
        return None
    metrics = tuple(m.strip() for m in args.cupti_profiler_metrics.split(",") if m.strip())
    if not metrics:
        from param_compute.errors import OptionsError

        raise OptionsError("--cupti-profiler-metrics: no metric named")
    return CuptiSettings(metrics, args.cupti_profiler_measure_per_kernel)


def warm_up_kineto() -> None:
    """A short empty CUDA profiling session first, so Kineto has seen the CUDA context before the
    counters are set up (PARAM does the same)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]):
        pass


def _run_key(range_name: str) -> Optional[str]:
    """``param_compute|OP|CFG|BUILD|INPUT[|phase|pass]`` -> ``OP|CFG|BUILD|INPUT``."""
    from param_compute.measure.ranges import parse_range_name

    parsed = parse_range_name(range_name)
    return None if parsed is None else parsed[0].text


def summarize_trace(trace_file: Path, metrics: Tuple[str, ...]) -> Dict[str, Dict[str, Any]]:
    """Counters of the trace's CUPTI ranges, summed per run id: ``{run: {metric: total,
    "ranges": n}}``; ranges outside every run go under ``UNATTRIBUTED``."""
    events = json.loads(read_bounded(trace_file, MAX_TRACE_BYTES)).get("traceEvents") or []
    runs: List[Tuple[float, float, str]] = []
    measured = []
    for event in events:
        if not isinstance(event, dict) or "ts" not in event:
            continue
        if event.get("cat") == RANGE_CATEGORY:
            measured.append(event)
        elif event.get("cat") in _RUN_RANGE_CATEGORIES:
            key = _run_key(str(event.get("name", "")))
            if key is not None:
                start = float(event["ts"])
                runs.append((start, start + float(event.get("dur", 0)), key))
    summary: Dict[str, Dict[str, Any]] = {}
    for event in measured:
        at = float(event["ts"])
        around = [r for r in runs if r[0] <= at <= r[1]]
        key = min(around, key=lambda r: r[1] - r[0])[2] if around else UNATTRIBUTED
        totals = summary.setdefault(key, {"ranges": 0})
        totals["ranges"] += 1
        args = event.get("args") or {}
        for metric in metrics:
            value = args.get(metric)
            if isinstance(value, (int, float)):
                totals[metric] = totals.get(metric, 0) + value
    return summary


def write_summary(results: Path, trace_file: Path, settings: CuptiSettings) -> Path:
    """Summarize the trace's counters into ``RESULTS_cupti.json``; say when it holds none."""
    summary = summarize_trace(trace_file, settings.metrics)
    path = Path(f"{Path(results).with_suffix('')}_cupti.json")
    from param_compute.files import write_new

    write_new(path, json.dumps({"trace_file": str(trace_file), "metrics": list(settings.metrics),
                                "per_kernel": settings.per_kernel, "runs": summary}, indent=1)
              + "\n")  # a new file renamed into place: never written through a planted link
    if not summary:
        log.warning("--cupti-profiler: the trace holds no CUPTI range (this torch build's Kineto "
                    "may lack the range profiler, or reading counters needs permission: "
                    "NVreg_RestrictProfilingToAdminUsers=0)")
    log.info("CUPTI counters: %s (%d runs)", path, len(summary))
    return path
