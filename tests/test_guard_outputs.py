"""The memory guard counts what a call returns (factory ops above all) and what a module build
allocates, estimated on the meta device: nothing is allocated to tell."""

from __future__ import annotations

import pytest
import torch

import param_compute
from conftest import simple_op, tensor
from param_compute.operators.meta import call_output_bytes, on_meta, torch_owned
from param_compute.runtime.memory_guard import on_meta_specs, output_bytes

MB = 10**6


def _int(value):
    return {"type": "int", "value": value}


def _ints(*values):
    return {"type": "genericlist", "value": [_int(v) for v in values]}


def _op(name, args=(), kwargs=None, builds=None):
    return simple_op(name, *args, kwargs=kwargs, builds=builds)


def _run(spec, limit):
    [record] = param_compute.run(spec, max_memory=limit, iteration=1, warmup=0).records
    return record


def _refused(record, size):
    assert record["status"] == "error", record
    assert record["error"]["type"] == "MemoryLimitExceeded" and record["error"]["phase"] == "memory"
    assert f"need an estimated {size}," in record["error"]["message"]


@pytest.mark.parametrize("name, args, kwargs, size", [
    ("torch.ones", (), {"size": _ints(12000, 12000)}, "549 MiB"),  # the probe
    ("torch.zeros", (_int(12000), _int(12000)), None, "549 MiB"),
    ("torch.empty", (_ints(12000, 12000),), {"dtype": {"type": "dtype", "value": "double"}},
     "1.07 GiB"),
    ("torch.full", (_ints(12000, 12000), {"type": "float", "value": 1.5}), None, "549 MiB"),
    ("torch.rand", (_int(12000), _int(12000)), None, "549 MiB"),
    ("torch.randn", (_ints(12000, 12000),), None, "549 MiB"),
    ("torch.randint", (_int(5), _ints(12000, 12000)), None, "1.07 GiB"),  # int64
    ("torch.arange", (_int(10 ** 8),), None, "763 MiB"),
    ("torch.eye", (_int(12000),), None, "549 MiB"),
    ("aten::ones", (_ints(12000, 12000),), None, "549 MiB"),
    # a device the spec names is moved to meta for the estimate, never allocated on
    ("torch.ones", (_ints(12000, 12000),), {"device": {"type": "str", "value": "cpu"}},
     "549 MiB"),
    ("torch.zeros", (_ints(12000, 12000),),
     {"device": {"type": "device", "value": "cpu", "run_device": False}}, "549 MiB"),
])
def test_factory_outputs_are_counted_without_allocating(name, args, kwargs, size):
    _refused(_run(_op(name, args, kwargs), 100 * MB), size)


def test_small_factory_calls_run_and_an_estimate_that_fails_is_the_calls_to_report():
    assert _run(_op("torch.ones", (), {"size": _ints(100, 100)}), 100 * MB)["status"] == "ok"
    assert _run(_op("torch.arange", (_int(10),)), 1 * MB)["status"] == "ok"
    # a call the meta estimate cannot make (a negative size) fails as the run's own error
    record = _run(_op("torch.ones", (_ints(-5, 2),)), 1 * MB)
    assert record["error"]["phase"] == "forward" and "negative" in record["error"]["message"]


def test_outputs_of_calls_on_tensors_are_left_to_the_backstop():
    """A meta call on tensors costs ~0.1 ms: not paid per config (the isolated worker's
    address-space cap is the backstop for, e.g., an outer product)."""
    from param_compute.operators.adapters import CallableOperator
    from param_compute.data.generator import DefaultDataGenerator

    outer = CallableOperator(torch.outer)
    config = {"args": [tensor(100000), tensor(100000)]}
    assert output_bytes(outer, DefaultDataGenerator(), config) == 0
    meta = torch.empty(100000, device="meta")
    assert outer.estimate_output_bytes(meta, meta) == 4 * 10**10  # the hook itself can tell


def test_output_counting_skips_inputs_views_and_shared_storage():
    meta = torch.empty(10, device="meta")
    assert call_output_bytes(torch.add, [meta, meta], {}) == 40
    assert call_output_bytes(torch.Tensor.add_, [meta, meta], {}) == 0  # its input back
    assert call_output_bytes(torch.broadcast_to, [meta, [10**5, 10]], {}) == 0  # a view of it
    assert call_output_bytes(lambda: torch.ones(3).expand(2, 3), [], {}) == 12  # one storage
    with pytest.raises(Exception):  # data-dependent: no meta kernel; the guard counts 0
        call_output_bytes(torch.nonzero, [meta], {})


@pytest.mark.parametrize("name, build, size", [
    ("torch.nn.Linear", [_int(8000), _int(8000)], "244 MiB"),
    ("torch.nn.Conv2d", [_int(1024), _int(1024), _int(9)], "324 MiB"),
    ("torch.nn.Embedding", [_int(1000000), _int(64)], "244 MiB"),
    ("torch.nn.EmbeddingBag", [_int(1000000), _int(64)], "244 MiB"),
])
def test_module_weights_from_build_args_are_counted(name, build, size):
    indices = tensor(4, 8, dtype="long", value_range=[0, 100])
    record = _run(_op(name, (indices,), builds=[{"args": build}]), 100 * MB)
    assert record["error"]["message"].startswith(f"the config's tensors need an estimated {size}")


def test_a_module_built_on_a_named_device_is_estimated_on_meta():
    device = {"type": "device", "value": "cpu", "run_device": False}
    spec = _op("torch.nn.Linear", (tensor(2, 8000),),
               builds=[{"args": [_int(8000), _int(8000)], "kwargs": {"device": device}}])
    _refused(_run(spec, 100 * MB), "244 MiB")


def test_estimates_call_only_torchs_own_functions_on_meta():
    calls = []

    def plugin_function(x):
        calls.append(x)
        return x

    assert torch_owned(torch.ones) and torch_owned(torch.nn.functional.gelu)
    assert torch_owned(torch.Tensor.add) and torch_owned(torch.ops.aten.ones.default)
    assert not torch_owned(plugin_function)
    from param_compute.lib.pytorch.operator_impl import CallableOp

    op = CallableOp(plugin_function)
    from param_compute.data.generator import DefaultDataGenerator

    assert output_bytes(op, DefaultDataGenerator(), {"args": [tensor(4)]}) == 0
    assert calls == []  # a plugin's function is never called by the estimate
    assert on_meta([torch.device("cpu"), "cuda:1", "mean", {"d": "cpu"}]) == [
        torch.device("meta"), "meta", "mean", {"d": "meta"}]
    assert on_meta_specs({"args": [tensor(2, device=0)]}) == {"args": [tensor(2)]}
