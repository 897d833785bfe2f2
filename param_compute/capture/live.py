"""Live capture: a ``TorchDispatchMode`` recording the aten calls of whatever runs inside it.

    with param_compute.capture.capture_ops() as cap:
        loss = model(x)
        loss.backward()
    cap.write("spec.json")

The mode sits below autograd, so it sees the aten ops forward and backward actually dispatch
(composite ops already decomposed, ``aten::linear`` as ``aten::t`` + ``aten::addmm``), each once:
an op a kernel calls internally runs with the mode off and is not recorded again. Argument specs
are taken before the call (an in-place op or ``resize_`` changes its inputs), and integer
tensors record the actual min and max of their values, so replayed indices stay in range.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from param_compute.capture.schema_args import split_name
from param_compute.capture.accounting import Unreplayable
from param_compute.capture.values import live_spec
from param_compute.capture.workload import CapturedWorkload


class LiveCapture(TorchDispatchMode):
    """Records every aten call made while active; ``spec()``/``write()`` give the workload."""

    def __init__(self, skip_views: bool = False, source: str = "live capture",
                 allow_namespaces: Sequence[str] = ()):
        super().__init__()
        self.workload = CapturedWorkload(source, skip_views, allow_namespaces=allow_namespaces)
        self.workload.num_threads = torch.get_num_threads()  # what the captured calls ran with

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self._record(func, args, kwargs)
        return func(*args, **kwargs)

    def _record(self, func, args, kwargs: Dict[str, Any]) -> None:
        schema = str(func._schema)
        try:
            arg_specs = [live_spec(value) for value in args]
            kwarg_specs = {name: live_spec(value) for name, value in kwargs.items()}
        except Exception as exc:  # recording never breaks the model it watches
            reason = str(exc) if isinstance(exc, Unreplayable) else \
                f"capture failed: {type(exc).__name__}: {exc}"
            namespace, base, overload = split_name(schema)
            self.workload.skip(f"{namespace}::{base}"
                               + ("" if overload == "default" else f".{overload}"), reason)
            return
        self.workload.add(schema, arg_specs, kwarg_specs)

    # -- the workload ------------------------------------------------------------------------
    def spec(self, param_form: bool = False) -> Dict[str, Any]:
        return self.workload.spec(param_form)

    def report(self) -> Dict[str, Any]:
        return self.workload.report()

    def write(self, path, param_form: bool = False):
        """Write the spec to ``path`` and the capture report to ``NAME.capture.json``
        (``param_form``: in the form PARAM's own replay runs, see ``capture.param_form``)."""
        return self.workload.write(path, param_form)

    @property
    def skipped(self):
        return self.workload.skipped


def capture_ops(skip_views: bool = False, source: Optional[str] = None,
                allow_namespaces: Sequence[str] = ()) -> LiveCapture:
    """A context manager capturing the aten calls made inside it (forward and backward), and
    those of ``allow_namespaces`` (``fbgemm``...)."""
    return LiveCapture(skip_views, source or "live capture", allow_namespaces)
