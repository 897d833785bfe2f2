"""PARAM's ``lib.pytorch.config_util``: its enums, default run options, spec-entry builders."""

from __future__ import annotations

import copy
import enum
import random
from typing import Any, Dict, List


@enum.unique
class ExecutionPass(enum.Enum):
    FORWARD = "forward"  # always runs
    BACKWARD = "backward"  # forward, then backward


@enum.unique
class OpExecutionMode(enum.Enum):
    DISCRETE = "discrete"
    CONTINUOUS = "continuous"
    CONTINUOUS_EVENTS = "continuous_events"


def get_op_run_id(op_name: str, run_id: str) -> str:
    return f"{op_name}:{run_id}"


def get_benchmark_options() -> Dict[str, Any]:
    """PARAM's default ``run_options``: one warm-up and one measured forward call on the CPU,
    discrete mode, CUDA L2 cache flushed."""
    return {
        "device": "cpu", "pass_type": ExecutionPass.FORWARD, "warmup": 1, "iteration": 1,
        "op_exec_mode": OpExecutionMode.DISCRETE, "cuda_l2_cache": False,
        "time_unit": "millisecond", "out_file_prefix": None, "out_stream": None,
        "run_ncu": False, "ncu_bin": "ncu", "ncu_args": "", "ncu_warmup": 5, "ncu_iteration": 1,
        "run_nsys": False, "nsys_bin": "nsys", "nsys_args": "", "nsys_warmup": 5,
        "nsys_iteration": 10, "run_batch_size": 50, "batch_cuda_device": 1,
        "batch_cmd": "python -m param_compute.run_batch",
        "resume_op_run_id": None, "stop_op_run_id": None,
    }


def create_op_info() -> Dict[str, Any]:
    """An operator's spec entry with default iterators (null), PyTorch's data generator and one
    empty config."""
    return {"build_iterator": None, "input_iterator": None, "build_data_generator": None,
            "input_data_generator": "PyTorch:DefaultDataGenerator",
            "config": [{"build": [], "input": []}]}


def create_bench_config(name: str) -> Dict[str, Any]:
    return {name: create_op_info()}


def create_op_args(args: List[Any], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    return {"args": args, "kwargs": kwargs}


_VALUE_TYPES = ("int", "long", "float", "double")
_TYPES: Dict[str, Dict[str, Any]] = {
    **{name: {"type": name, "value": None} for name in _VALUE_TYPES},
    **{f"{name}_range": {"type": name, "value_range": None} for name in _VALUE_TYPES},
    **{name: {"type": name, "value": None}
       for name in ("bool", "device", "str", "genericlist", "tuple")},
    "tensor": {"type": "tensor", "dtype": "float", "shape": None},
}


def create_type(type: str) -> Dict[str, Any]:  # noqa: A002 - PARAM's parameter name
    """A fresh data spec of ``type`` to fill in (``"tensor"``, ``"int"``, ``"int_range"``...)."""
    return copy.deepcopy(_TYPES[type])


def get_sys_info() -> Dict[str, Any]:
    """The results header's ``sys_info`` (ours, with PARAM's keys)."""
    from param_compute.lib import __version__
    from param_compute.runtime.sysinfo import sys_info

    info = sys_info("cpu", include_torch=True)
    info["param_train_compute_version"] = __version__
    return info


def init_pytorch(run_options: Dict[str, Any]) -> None:
    """One intra-op thread and fixed seeds, as PARAM sets them before a benchmark."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    random.seed(0)
