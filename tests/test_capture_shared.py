"""Acceptance on real traces recorded by others (``../shared/traces``; skipped when absent):
ResNet under DDP, a 20-layer MLP with its Kineto trace, a torch.compile run."""

from __future__ import annotations

from pathlib import Path

import pytest

import param_compute
from param_compute.capture import capture_execution_trace
from param_compute.capture.trace.execution_trace import _inputs
from param_compute.capture.sample import smallest_per_op
from param_compute.capture.trace.strides import layouts_agree, recover_strides
from param_compute.capture.trace.files import read_execution_trace
from param_compute.capture.trace.walk import TraceTree, replay_level_nodes
from param_compute.capture.values import contiguous_stride

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def _trace(name: str) -> Path:
    path = TRACES / name
    if not path.exists():
        pytest.skip(f"{path} is not beside this checkout")
    return path


@pytest.fixture(scope="module")
def resnet():
    return capture_execution_trace(_trace("resnet_et.json.gz"), target_device="cpu")


def test_resnet_replays_on_cpu_with_per_step_counts(resnet):
    steps = resnet.steps.to_json()
    assert steps["found"] == [6, 7, 8] and steps["captured"] == [8]
    assert len(set(steps["calls_per_step"].values())) == 1  # the same work each step
    assert resnet.calls == steps["calls_per_step"]["8"]
    spec = resnet.spec()
    assert not [op for op in spec if "cudnn" in op or "miopen" in op]
    assert "aten::batch_norm" in spec and "aten::native_batch_norm_backward" in spec
    report = resnet.report()
    assert report["no_kernel_on_target"] == []
    assert report["not_captured"] == []  # its collectives too: a job of one rank
    assert {"c10d::allreduce_", "c10d::broadcast_"} <= set(spec)
    planned = param_compute.run(spec, dry_run=True).records
    assert sum(r["count"] for r in planned) == resnet.captured_calls
    result = param_compute.run(smallest_per_op(spec), warmup=0, iteration=1,
                               throughput=False)
    assert len(result.records) == len(spec)
    assert [r["op_name"] for r in result.records if r["status"] != "ok"] == []


def test_resnet_strides_recovered_agree_with_the_recorded_ones():
    without = read_execution_trace(_trace("resnet_et.json.gz"))
    recorded = read_execution_trace(_trace("resnet_1gpu_et.json.tar.gz"))
    tree = TraceTree(without)
    taken, _ = replay_level_nodes(tree)
    recovered = recover_strides(tree, {node["id"] for node in taken})
    # The two recordings hold the same nodes in the same order (their ids differ).
    position = {n["id"]: i for i, n in enumerate(sorted(without["nodes"], key=lambda n: n["id"]))}
    ordered = sorted(recorded["nodes"], key=lambda n: n["id"])
    agree = 0
    for node in taken:
        twin = ordered[position[node["id"]]]
        assert twin["name"] == node["name"]
        _, shapes, types, strides = _inputs(twin)
        same = True
        for index, (kind, shape, stride) in enumerate(zip(types, shapes, strides)):
            if kind.startswith("Tensor(") and isinstance(shape, list) and stride:
                mine = recovered[node["id"]].get(index) or contiguous_stride(shape)
                same = same and layouts_agree(mine, stride, shape)
        agree += same
    assert len(taken) > 5000 and agree / len(taken) >= 0.99
    assert recovered["summary"]["recovered_calls"] > 0


def test_mlp_kineto_join_covers_every_call():
    workload = capture_execution_trace(_trace("linear_et.json.gz"),
                                       kineto=_trace("linear_kineto.json.gz"))
    assert workload.kineto["joined_calls"] == workload.kineto["calls"] == workload.calls
    coverage = workload.time_coverage()
    assert coverage["captured_us"] == coverage["total_us"]
    assert coverage["total_us"]["device"] > 0 and coverage["total_us"]["cpu"] > 0
    spec = workload.spec()
    gemms = [item for op in ("aten::mm", "aten::addmm") for config in spec[op]["config"]
             for item in config["input"]]
    assert all(item["original_us"]["device"] > 0 for item in gemms)
    # the transposed weights of the GEMMs replay transposed (recovered layouts)
    assert any("stride" in arg for item in gemms for arg in item["args"])


def test_compile_trace_reports_its_triton_kernels():
    workload = capture_execution_trace(_trace("pt2_et.json.tar.gz"), step="all")
    groups = {g["kind"]: g for g in workload.groups()}
    assert groups["triton"]["calls"] == 2
    assert workload.captured_calls == 2 and "aten::mm" in workload.spec()
    assert any("Triton kernels" in line for line in workload.summary_lines())


def test_resnet_collectives_waited_where_the_trace_says(resnet):
    """DDP's buffer broadcasts carry NCCL's wait records (``record_param_comms`` ``wait``):
    each is waited there; its gradient all-reduces, which carry none, before the first call
    that reads their bucket."""
    calls = resnet.step.to_json(resnet.run_keys(), "r.json", "resnet")["calls"]
    collectives = {i: c["run"] for i, c in enumerate(calls) if c["run"].startswith("c10d::")}
    assert sorted(set(r.split("|")[0] for r in collectives.values())) == [
        "c10d::allreduce_", "c10d::broadcast_"]
    waited = {w: i for i, c in enumerate(calls) for w in c.get("waits", [])}
    assert set(waited) == set(collectives)  # every one waited within the step
    broadcasts = [i for i, r in collectives.items() if r.startswith("c10d::broadcast_")]
    assert waited[broadcasts[0]] > broadcasts[1]  # the first waited after the second began
    for index, run in collectives.items():
        if run.startswith("c10d::allreduce_"):
            assert calls[waited[index]]["run"].startswith("aten::as_strided")
