"""Capture production op configs and replay them with ``run_benchmark``.

From a PyTorch execution trace:

    python -m param_compute.capture --from-et trace.json -o spec.json [--skip-views]

Live, around any code (forward and backward):

    with param_compute.capture.capture_ops() as cap:
        loss = model(x)
        loss.backward()
    cap.write("spec.json")

or ``python -m param_compute.capture --run module:function -o spec.json``.

Either way the spec has one entry per aten op in PARAM's ``aten::`` + schema-string form, one
input config per distinct argument signature with the number of occurrences as ``count``
(carried into each run's record), and a ``NAME.capture.json`` report beside it listing every
call that was not captured, with its kind and reason. From a trace, also: one ``ProfilerStep#N``
window by default (``trace.walk``), backend kernels made portable (``portable``), layouts
recovered where the trace records no strides (``trace.strides``), recorded integer ranges, and
with a Kineto trace each config's original time (``trace.kineto``). A trace is untrusted data:
read within bounds (``trace.files``), checked node by node (``trace.check``), and nothing it
names runs but the allow-listed pure tensor ops of the layout replay (``meta_ops``);
``TraceError`` says what is wrong with one.

By source: ``trace/`` (recorded traces), ``live/`` (a live run), ``step/`` (the step's dataflow
and original); shared: ``values``, ``workload``, ``accounting``, ``coverage``, the index and
TBE rules, ``param_form``, ``portable``.
"""

from param_compute.capture.trace.execution_trace import (capture_execution_trace,
                                                        read_execution_trace)
from param_compute.capture.live.dispatch import LiveCapture, capture_ops
from param_compute.capture.accounting import SkippedOp, TraceError, Unreplayable
from param_compute.capture.workload import CapturedWorkload, report_path

__all__ = ["CapturedWorkload", "LiveCapture", "SkippedOp", "TraceError", "Unreplayable",
           "capture_execution_trace", "capture_ops", "read_execution_trace", "report_path"]
