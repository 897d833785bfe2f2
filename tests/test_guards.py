"""The memory guard counts what is allocated; the isolated worker has a hard cap as backstop."""

from __future__ import annotations

import json
import textwrap
import time
import tracemalloc

import pytest

import param_compute
from conftest import read_results, run_cli, simple_op, tensor, write_spec
from param_compute.runtime.memory_guard import (address_space_cap, spec_bytes,
                                                storage_elements)

MB = 10**6


def _refused(record):
    assert record["status"] == "error", record
    assert record["error"]["phase"] == "memory", record["error"]
    assert record["error"]["type"] == "MemoryLimitExceeded"
    return record["error"]["message"]


@pytest.mark.parametrize("shape, stride, offset, elements", [
    ([1], None, 1_500_000_000, 1_500_000_001),      # an offset view of one element
    ([4, 4], [0, 0], 0, 1),                         # a broadcast view: one element of storage
    ([4, 4], [1, 10**9], 0, 3 * 10**9 + 4),         # a sparse view spans the whole storage
    ([4, 4], [1, 10**9, 7], 0, 3 * 10**9 + 4),      # one stride too many: never less than that
    ([4, 4], [1], 0, 16),                           # one stride too few: never below dense
    ([4, 0], [1, 1], 9, 9),                         # empty: the offset alone
])
def test_storage_estimate_counts_offsets_and_strides(shape, stride, offset, elements):
    assert storage_elements(shape, stride, offset) == elements
    spec = tensor(*shape, stride=stride, storage_offset=offset) if stride else \
        tensor(*shape, storage_offset=offset)
    assert spec_bytes(spec) == 4 * elements


def test_offset_tensor_is_refused_before_allocating():
    spec = simple_op("torch.neg", tensor(1, storage_offset=10 * MB))
    records = param_compute.run(spec, max_memory=4 * MB, iteration=1, warmup=0).records
    assert "need an estimated 38.1 MiB" in _refused(records[0])


def test_stride_longer_than_a_ranged_shape_is_refused():
    """Validation compares a ranged shape's dims with the stride list; the data generator
    refuses a mismatch too, before any storage exists."""
    from param_compute.errors import SpecError
    from param_compute.data.generator import materialize

    ranged = {"type": "tensor", "dtype": "float", "shape": [[1, 2, 1], 4],
              "__range__": ["shape"], "stride": [1, 2 * MB, 5]}
    spec = {"torch.neg": {"input_iterator": "RangeConfigIterator",
                          "input_data_generator": "PyTorch:DefaultDataGenerator",
                          "config": [{"input": [{"args": [ranged]}]}]}}
    with pytest.raises(SpecError, match="stride has 3 entries but the shape has 2 dims"):
        param_compute.run(spec, max_memory=4 * MB)
    with pytest.raises(ValueError, match=r"stride has 3 entries but the shape \[2, 4\]"):
        materialize(tensor(2, 4, stride=[1, 10**12, 5]), "cpu")  # 4 TB, were it allocated


def test_module_weights_from_integer_build_args_are_counted():
    linear = {"type": "int", "value": 2000}
    spec = simple_op("torch.nn.Linear", tensor(2, 2000),
                     builds=[{"args": [linear, linear]}])
    records = param_compute.run(spec, max_memory=8 * MB, iteration=1, warmup=0).records
    message = _refused(records[0])
    assert "15.3 MiB" in message  # 2000*2000 + 2000 float32 weights, plus the 16 KB input
    assert param_compute.run(spec, max_memory=64 * MB, iteration=1,
                             warmup=0).records[0]["status"] == "ok"


def test_tbe_iterator_counts_a_huge_batch_range_lazily():
    from param_compute.workloads.pytorch import split_table_batched_embeddings_ops as tbe

    build = {"args": [{"type": "int", "value": v} for v in (1, 1000, 8, 0)]
             + [{"type": "bool", "value": False}, {"type": "str", "value": "fp32"}]}
    inputs = [{"args": [{"type": "int", "value": [1, 10**12], "__range__": ["value"]},
                        {"type": "int", "value": 2}]}]
    configs = {"build": build, "input": inputs}
    tracemalloc.start()
    started = time.perf_counter()
    iterator = tbe.SplitTableBatchedEmbeddingBagsCodegenInputIterator
    assert iterator.count(configs, "input") == 10**12
    first = [next(iter(iterator(configs, "input", "cpu"))) for _ in range(3)]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert time.perf_counter() - started < 2 and peak < 10 * MB
    assert first[0][0] == "0_0" and first[0][1]["args"][3]["value"] == 1
    generator = tbe.SplitTableBatchedEmbeddingBagsCodegenInputDataGenerator()
    config = dict(first[0][1])
    config["args"] = list(config["args"])
    config["args"][3] = {"type": "int", "value": 10**9}
    assert generator.estimate_bytes(config) == 2 * 10**9 * 8 + (10**9 + 1) * 8


ALLOCATOR = textwrap.dedent("""
    import torch
    from param_compute import OperatorInterface, register_operator

    class Allocate(OperatorInterface):
        '''Allocates far more than any tensor spec says (8 GB, untouched).'''
        def forward(self, *args):
            return torch.empty(8 * 10**9, dtype=torch.uint8)

    register_operator("test.allocate", Allocate)
""")


def test_isolated_worker_has_a_hard_cap(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "allocate.py").write_text(ALLOCATOR)
    spec = {**simple_op("test.allocate", {"type": "int", "value": 1}),
            **simple_op("torch.add", tensor(4), tensor(4))}
    out = tmp_path / "r.json"
    result = run_cli("-c", write_spec(tmp_path, spec), "--workloads-dir", plugins, "--isolate",
                     "--max-memory", "100MB", "--output", out, "-i", "1", "-w", "0")
    assert result.returncode == 1, result.stderr
    _, runs, finish = read_results(out)
    assert [r["status"] for r in runs] == ["error", "ok"]
    assert "memory" in runs[0]["error"]["message"].lower()
    assert finish["runs_ok"] == 1
    assert address_space_cap(None, "cpu", 1) is None
    assert address_space_cap(100 * MB, "cuda:0", 1) is None


def test_operators_that_read_out_of_bounds_run_isolated(tmp_path):
    """A segfaulting backward op and segment_reduce(unsafe=True) crash an isolated worker, not
    the run; the safe segment_reduce runs in process."""
    indices = tensor(1, 1, 2, 2, dtype="long", value_range=[10**8, 10**8])
    pool = {"aten::max_pool2d_with_indices_backward": {
        "input_data_generator": "PyTorch:DefaultDataGenerator",
        "config": [{"input": [{"args": [
            tensor(1, 1, 2, 2), tensor(1, 1, 4, 4),
            {"type": "genericlist", "value": [{"type": "int", "value": 2}] * 2},
            {"type": "genericlist", "value": [{"type": "int", "value": 2}] * 2},
            {"type": "genericlist", "value": [{"type": "int", "value": 0}] * 2},
            {"type": "genericlist", "value": [{"type": "int", "value": 1}] * 2},
            {"type": "bool", "value": False}, indices]}]}]}}
    lengths = tensor(1, dtype="long", value_range=[10**8, 10**8])
    segment = simple_op("torch.segment_reduce", tensor(4), {"type": "str", "value": "sum"},
                        kwargs={"lengths": lengths, "unsafe": {"type": "bool", "value": True}})
    safe = {"torch.neg": simple_op("torch.neg", tensor(4))["torch.neg"]}
    out = tmp_path / "r.json"
    result = run_cli("-c", write_spec(tmp_path, {**pool, **segment, **safe}), "--output", out,
                     "-i", "1", "-w", "0")
    assert result.returncode == 1, result.stderr
    _, runs, finish = read_results(out)
    assert [(r["op_name"], r["status"]) for r in runs] == [
        ("aten::max_pool2d_with_indices_backward", "error"),
        ("torch.segment_reduce", "error"), ("torch.neg", "ok")]
    assert all(r["error"]["message"].startswith("crashed: signal 11") for r in runs[:2])
    assert "measured in an isolated worker" in result.stderr
    assert finish["runs_ok"] == 1


def test_unsafe_reason_reads_names_and_flags():
    from param_compute.operators.unsafe import unsafe_reason

    flag = {"type": "bool", "value": True}
    assert unsafe_reason("aten::adaptive_max_pool2d_backward.grad_input", {}) is not None
    assert unsafe_reason("torch.segment_reduce", {"kwargs": {"unsafe": flag}}) is not None
    assert unsafe_reason("aten::segment_reduce", {"args": [None] * 6 + [flag]}) is not None
    assert unsafe_reason("torch.segment_reduce", {"kwargs": {"unsafe": {"value": False}}}) is None
    assert unsafe_reason("torch.add", {"kwargs": {"unsafe": flag}}) is None


def _pool_backward(indices, grad=(1, 2, 2, 2), pooled=(1, 2, 4, 4), by_name=False):
    ints = {"type": "genericlist", "value": [{"type": "int", "value": 2}] * 2}
    args = [tensor(*grad), tensor(*pooled), ints, ints,
            {"type": "genericlist", "value": [{"type": "int", "value": 0}] * 2},
            {"type": "genericlist", "value": [{"type": "int", "value": 1}] * 2},
            {"type": "bool", "value": False}, indices]
    if by_name:
        return {"args": args[:7], "kwargs": {"indices": indices}}
    return {"args": args}


@pytest.mark.parametrize("indices, grad, pooled, safe", [
    (tensor(1, 2, 2, 2, dtype="long", value_range=[0, 15]), (1, 2, 2, 2), (1, 2, 4, 4), True),
    (tensor(1, 2, 2, 2, dtype="long", value_range=[3, 3]), (1, 2, 2, 2), (1, 2, 4, 4), True),
    (tensor(2, 2, 2, dtype="long", value_range=[0, 15]), (2, 2, 2), (2, 4, 4), True),
    # one past the plane, a negative index, no range (the generator's -10..9), not long
    (tensor(1, 2, 2, 2, dtype="long", value_range=[0, 16]), (1, 2, 2, 2), (1, 2, 4, 4), False),
    (tensor(1, 2, 2, 2, dtype="long", value_range=[-1, 3]), (1, 2, 2, 2), (1, 2, 4, 4), False),
    (tensor(1, 2, 2, 2, dtype="long"), (1, 2, 2, 2), (1, 2, 4, 4), False),
    (tensor(1, 2, 2, 2, dtype="int", value_range=[0, 15]), (1, 2, 2, 2), (1, 2, 4, 4), False),
    # indices shaped unlike grad_output; more channels than the input; a 1-d input
    (tensor(1, 2, 2, 1, dtype="long", value_range=[0, 15]), (1, 2, 2, 2), (1, 2, 4, 4), False),
    (tensor(1, 3, 2, 2, dtype="long", value_range=[0, 15]), (1, 3, 2, 2), (1, 2, 4, 4), False),
    (tensor(4, dtype="long", value_range=[0, 3]), (4,), (16,), False),
])
def test_pool_backward_with_indices_inside_the_plane_is_proved_safe(indices, grad, pooled, safe):
    from param_compute.operators.unsafe import unsafe_reason

    default = "PyTorch:DefaultDataGenerator"
    for by_name in (False, True):
        config = _pool_backward(indices, grad, pooled, by_name)
        for name in ("aten::max_pool2d_with_indices_backward",
                     "aten::max_pool2d_with_indices_backward.grad_input"):
            assert (unsafe_reason(name, config, default) is None) == safe
        # only the default generator's ranges are known to bound what it draws
        assert unsafe_reason("aten::max_pool2d_with_indices_backward", config,
                             "MyPlugin:Generator") is not None
        assert unsafe_reason("aten::max_pool2d_with_indices_backward", config) is not None
    adaptive = {"args": [tensor(*grad), tensor(*pooled), indices]}
    assert (unsafe_reason("aten::adaptive_max_pool2d_backward", adaptive, default) is None) \
        == safe
    assert unsafe_reason("aten::_segment_reduce_backward", adaptive, default) is not None


@pytest.mark.parametrize("high, safe", [(63, True), (64, False)])
def test_a_3d_pool_s_plane_is_depth_times_height_times_width(high, safe):
    from param_compute.operators.unsafe import unsafe_reason

    indices = tensor(1, 2, 2, 2, 2, dtype="long", value_range=[0, high])
    config = {"args": [tensor(1, 2, 2, 2, 2), tensor(1, 2, 4, 4, 4), indices]}
    assert (unsafe_reason("aten::adaptive_max_pool3d_backward", config,
                          "PyTorch:DefaultDataGenerator") is None) == safe


def test_a_pool_backward_proved_in_bounds_runs_in_process(tmp_path):
    """What a capture writes for a CNN's max-pool backward runs like any op: no worker."""
    indices = tensor(1, 2, 2, 2, dtype="long", value_range=[0, 15])
    spec = {"aten::max_pool2d_with_indices_backward": {
        "input_data_generator": "PyTorch:DefaultDataGenerator",
        "config": [{"input": [_pool_backward(indices)]}]}}
    out = tmp_path / "r.json"
    result = run_cli("-c", write_spec(tmp_path, spec), "--output", out, "-i", "2", "-w", "0")
    assert result.returncode == 0, result.stderr
    assert "isolated worker" not in result.stderr
    _, [run], _ = read_results(out)
    assert run["status"] == "ok" and len(run["metric"]["forward"]["measure.time"]) == 2


def test_thread_count_beyond_the_machine_and_non_finite_timeout_are_refused(tmp_path):
    from param_compute.runtime.options import max_threads

    spec = write_spec(tmp_path, simple_op("torch.neg", tensor(4)))
    out = tmp_path / "r.json"
    too_many = run_cli("-c", spec, "--num-threads", "100000", "--output", out)
    assert too_many.returncode == 2
    assert f"--num-threads 100000 is more than this machine allows: at most {max_threads()}" \
        in too_many.stderr
    for value in ("nan", "inf", "-1"):
        bad = run_cli("-c", spec, "--timeout", value, "--output", out)
        assert bad.returncode == 2 and "--timeout must be a finite number" in bad.stderr, value
    assert not out.exists()


def test_header_records_the_runs_thread_count(tmp_path):
    out = tmp_path / "r.json"
    spec = write_spec(tmp_path, simple_op("torch.neg", tensor(4)))
    assert run_cli("-c", spec, "--num-threads", "1", "--output", out).returncode == 0
    header = read_results(out)[0]
    assert header["sys_info"]["pytorch_num_threads"] == 1
    assert header["run_options"]["num_threads"] == 1


def test_a_fifo_spec_is_read_once_and_hashed(tmp_path):
    import hashlib
    import os
    import threading

    text = json.dumps(simple_op("torch.neg", tensor(4))).encode()
    fifo = tmp_path / "spec.fifo"
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "wb") as stream:
            stream.write(text)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    out = tmp_path / "r.json"
    result = run_cli("-c", fifo, "--output", out, timeout=60)
    writer.join(5)
    assert result.returncode == 0, result.stderr
    header, runs, _ = read_results(out)
    assert header["run_options"]["spec_sha256"] == hashlib.sha256(text).hexdigest()
    assert [r["status"] for r in runs] == ["ok"]


def test_a_huge_exception_message_is_stored_once_truncated(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "big.py").write_text(textwrap.dedent("""
        from param_compute import OperatorInterface, register_operator

        class Big(OperatorInterface):
            def forward(self, *args):
                raise RuntimeError("y" * (50 * 10**6) + "\\nsecond line")

        register_operator("test.big_message", Big)
    """))
    out = tmp_path / "r.json"
    spec = write_spec(tmp_path, simple_op("test.big_message", {"type": "int", "value": 1}))
    result = run_cli("-c", spec, "--workloads-dir", plugins, "--output", out)
    assert result.returncode == 1
    assert out.stat().st_size < 20_000 and len(result.stderr) < 20_000
    [run] = read_results(out)[1]
    message = run["error"]["message"]
    assert message.endswith("... [truncated: 50000000 characters in all]")
    assert message.startswith("y" * 4000) and len(message) < 4100


def test_tbe_tables_and_batches_are_counted_by_the_guard():
    pytest.importorskip("fbgemm_gpu")
    from pathlib import Path

    spec = json.loads((Path(__file__).parent / "hostile_specs" /
                       "tbe_batch_range_step_zero.json").read_text())
    op = spec["SplitTableBatchedEmbeddingBagsCodegen"]["config"][0]
    op["build"][0]["args"][1]["value"] = 10**9  # rows: 32 GB of fp32 weights at dim 8
    op["input"][0]["args"][0] = {"type": "int", "name": "batch_size", "value": 4}
    [record] = param_compute.run(spec, max_memory=10**9, iteration=1, warmup=0).records
    assert "33.5 GiB" in _refused(record)
    op["build"][0]["args"][1]["value"] = 100
    op["input"][0]["args"][0] = {"type": "int", "name": "batch_size", "value": 10**9}
    [record] = param_compute.run(spec, max_memory=10**9, iteration=1, warmup=0).records
    assert "22.4 GiB" in _refused(record)  # 2e9 int64 indices + 1e9 offsets


def test_the_default_limit_is_half_of_what_ulimit_or_a_cgroup_leaves(monkeypatch):
    """The issue-31 probe ran under a 4 GB cap the guard did not see: it read the host's
    available memory alone, let a 12 GiB step start, and allocations failed midway."""
    from param_compute import untrusted_json
    from param_compute.runtime.memory_guard import default_limit

    monkeypatch.setattr(untrusted_json, "_address_space_room", lambda: 64 * MB)
    monkeypatch.setattr(untrusted_json, "_cgroup_room", lambda: None)
    assert default_limit("cpu") == 32 * MB
    monkeypatch.setattr(untrusted_json, "_address_space_room", lambda: None)
    monkeypatch.setattr(untrusted_json, "_cgroup_room", lambda: 10 * MB)
    assert default_limit("cpu") == 5 * MB
