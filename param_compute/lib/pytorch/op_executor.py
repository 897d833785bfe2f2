"""PARAM's ``lib.pytorch.op_executor``: time one operator on given inputs, PARAM's result dict.

``OpExecutor(name, op, run_options).run(args, kwargs, run_id)`` returns
``{"forward": {"warmup.time": [...], "measure.time": [...], "warmup.gpu.memory": [...],
"measure.gpu.memory": [...]}, "backward": {...}}`` (backward with ``ExecutionPass.BACKWARD``),
times in milliseconds. The timing is the engine's: its device clocks (CUDA events, L2 flush
unless ``cuda_l2_cache``), its loop for each exec mode, and its backward pass (forward and
gradient creation untimed before each timed backward).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

from param_compute.runtime.options import RunOptions
from param_compute.results.records import PassResult


class OpExecutor:
    def __init__(self, name: str, op: Any, run_options: Dict[str, Any]):
        if op is None:
            raise ValueError(f"{name}: no operator to run (the name did not resolve)")
        self.name = name
        self.op = op
        self.options = RunOptions.from_param(run_options)
        self.device_name = self.options.device
        self._device = None

    def _open_device(self):
        if self._device is None:
            from param_compute.measure.devices import check_device, open_device

            check_device(self.device_name)
            self._device = open_device(self.device_name, flush_l2=not self.options.cuda_l2_cache)
        return self._device

    def run(self, input_args: List[Any], input_kwargs: Dict[str, Any],
            op_run_id: str) -> Dict[str, Dict[str, List[float]]]:
        device = self._open_device()
        op = self.op
        fn = op.bind_forward(list(input_args), dict(input_kwargs))
        if self.options.pt2_model:
            import torch

            fn = torch.compile(fn)
        if self.options.cuda_graph:
            fn = device.capture_graph(fn)
        result = {"forward": self._timed("forward", fn, None)}
        if self.options.backward:
            if not op.supports_backward:
                raise RuntimeError(f"{self.name}: {type(op).__name__} has no backward pass "
                                   "(in-place operator)")

            def prepare() -> None:
                op.remember_output(fn())
                op.create_grad()

            result["backward"] = self._timed("backward", op.backward, prepare)
            op.drop_outputs()
        return result

    def _timed(self, pass_name: str, fn: Callable[[], Any],
               prepare: Optional[Callable[[], Any]]) -> Dict[str, List[float]]:
        from param_compute.measure.timing import time_calls

        device, mode = self._device, self.options.exec_mode
        times: Dict[str, List[float]] = {}
        extra: Dict[str, List[float]] = {}
        for phase, count in (("warmup", self.options.warmup),
                             ("measure", self.options.iteration)):
            device.reset_peak_memory()
            times[phase] = time_calls(fn, count, device.clock, mode, prepare)
            peak = device.peak_memory_mb()
            if peak is not None:
                extra[f"{phase}.gpu.memory"] = [peak] * len(times[phase])
        return PassResult(pass_name, times["warmup"], times["measure"], extra).metric()


__all__ = ["OpExecutor"]
