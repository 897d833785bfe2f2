"""``-p/--profile`` and ``--et``: torch.profiler Chrome traces and PyTorch execution traces.

Both files are written beside the results file (``RESULTS_trace.json``, ``RESULTS_et.json``).
While profiling, every run and timed phase is also a torch.profiler range named with the op name
and run id (see ``measure.ranges``), so the trace can be sliced by run.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator


def trace_paths(results: Path) -> Dict[str, Path]:
    stem = results.with_suffix("")
    return {"trace_file": Path(f"{stem}_trace.json"), "et_file": Path(f"{stem}_et.json")}


@contextmanager
def profiled(results: Path, profile: bool, execution_trace: bool, device: str,
             experimental_config: Any = None) -> Iterator[Dict[str, str]]:
    """Run the body under the requested tracers; yields the paths written (filled at exit).
    ``experimental_config`` goes to torch.profiler as is (``--cupti-profiler``'s counters)."""
    written: Dict[str, str] = {}
    if not (profile or execution_trace):
        yield written
        return
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile as torch_profile

    paths = trace_paths(results)
    Path(results).parent.mkdir(parents=True, exist_ok=True)
    observer = None
    if execution_trace:
        observer = ExecutionTraceObserver()
        observer.register_callback(str(paths["et_file"]))
        observer.start()
    profiler = None
    if profile:
        activities = [ProfilerActivity.CPU]
        if device.startswith("cuda"):
            activities.append(ProfilerActivity.CUDA)
        extra = {} if experimental_config is None else {
            "experimental_config": experimental_config}
        profiler = torch_profile(activities=activities, **extra)
        profiler.__enter__()
    try:
        yield written
    finally:
        if profiler is not None:
            profiler.__exit__(None, None, None)
            profiler.export_chrome_trace(str(paths["trace_file"]))
            written["trace_file"] = str(paths["trace_file"])
        if observer is not None:
            observer.stop()
            observer.unregister_callback()
            if paths["et_file"].exists():
                written["et_file"] = str(paths["et_file"])
