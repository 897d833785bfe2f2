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


#: The keys of PARAM's metric dict.
PARAM_KEYS = ("warmup.time", "measure.time", "warmup.gpu.memory", "measure.gpu.memory")


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
        """PARAM's metric of one pass, measured by the one ``Measurer`` with the options'
        protocol (PARAM's counts): the times and a phase's memory peak repeated per
        iteration, as PARAM writes it."""
        from param_compute.measure.measurer import Measurer

        result = Measurer(self.options.measuring(), self._device).measure(fn, prepare,
                                                                          pass_name)
        for phase, times in (("warmup", result.warmup_ms), ("measure", result.measure_ms)):
            peak = result.extra.get(f"{phase}.gpu.memory")
            if peak is not None:
                result.extra[f"{phase}.gpu.memory"] = peak * len(times)
        metric = result.metric()  # zeros where the device has no allocator, as PARAM writes
        return {key: metric[key] for key in PARAM_KEYS}  # PARAM's keys only


__all__ = ["OpExecutor"]
