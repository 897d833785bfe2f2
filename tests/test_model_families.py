"""Issue 31's model families: what a trace cannot know (optimizer state's values), TBE state
metadata, and the ledger naming the cause."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, record_function

from param_compute.analysis.ledger import build_ledger, format_ledger, ledger_section, reason
from param_compute.capture import capture_execution_trace
from param_compute.results.file import upgraded

REPO = Path(__file__).resolve().parent.parent


def _adam_traces(folder: Path):
    """An execution trace and a Kineto trace of one step of a small model trained by Adam
    (single-tensor: the CPU default)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    x = torch.randn(8, 16)

    def step():
        optimizer.zero_grad(set_to_none=True)
        model(x).square().sum().backward()
        optimizer.step()

    step()
    et_path, kineto_path = folder / "et.json", folder / "kineto.json"
    observer = ExecutionTraceObserver()
    observer.register_callback(str(et_path))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        observer.start()
        for number in range(2):
            with record_function(f"ProfilerStep#{number}"):
                step()
        observer.stop()
        observer.unregister_callback()
    prof.export_chrome_trace(str(kineto_path))
    return et_path, kineto_path


@pytest.fixture(scope="module")
def adam_traces(tmp_path_factory):
    return _adam_traces(tmp_path_factory.mktemp("adam"))


def _args(spec, op):
    return [arg for config in spec[op]["config"] for item in config["input"]
            for arg in item["args"]]


# -- the capture says which calls read state it has no values for ---------------------------
def test_a_trace_capture_names_the_calls_that_read_adam_s_state(adam_traces, tmp_path):
    et_path, kineto_path = adam_traces
    workload = capture_execution_trace(et_path, kineto=kineto_path)
    unknown = workload.values_unknown
    # 4 parameters: exp_avg (lerp_, addcdiv_'s tensor1) and exp_avg_sq (mul_, addcmul_, sqrt)
    assert {op: entry["calls"] for op, entry in unknown.items()} == {
        "aten::lerp_": 4, "aten::mul_": 4, "aten::addcmul_": 4, "aten::sqrt": 4,
        "aten::addcdiv_": 4}
    assert {entry["optimizer"] for entry in unknown.values()} == {"Adam.step"}
    # not the step count (a 0-dim tensor), not the forward's or backward's calls
    assert "aten::add_" not in unknown and "aten::addmm" not in unknown
    assert not any("value_profile" in json.dumps(arg) for arg in _args(workload.spec(),
                                                                       "aten::sqrt"))
    lines = "\n".join(workload.summary_lines())
    assert "values unknown: 20 calls read Adam.step's state (aten::" in lines
    assert "--subnormal-state FRACTION" in lines and "capture --run" in lines
    spec_path, report = workload.write(tmp_path / "adam.json")
    assert json.loads(report.read_text())["values_unknown"][0]["calls"] == 4
    step = json.loads((tmp_path / "adam.step.json").read_text())
    assert {e["op"] for e in step["original"]["values_unknown"]} == set(unknown)


def test_subnormal_state_makes_exactly_the_state_inputs_subnormal(adam_traces):
    et_path, kineto_path = adam_traces
    workload = capture_execution_trace(et_path, kineto=kineto_path, subnormal_state=1.0)
    spec = workload.spec()
    profile = {"zeros": 0.0, "subnormal": 1.0}
    sqrt_in = [arg for arg in _args(spec, "aten::sqrt") if arg.get("type") == "tensor"]
    assert sqrt_in and all(arg.get("value_profile") == profile for arg in sqrt_in)
    for item in (c["input"][0]["args"] for c in spec["aten::addcdiv_"]["config"]):
        # param.addcdiv_(exp_avg, denom): only exp_avg is state
        assert "value_profile" not in item[0] and item[1]["value_profile"] == profile
        assert "value_profile" not in item[2]
    assert all("value_profile" not in json.dumps(arg) for arg in _args(spec, "aten::addmm"))
    assert workload.subnormal_state == {"fraction": 1.0, "tensors": 8, "of": 8}
    assert all(entry["profile"] == {"subnormal_state": 1.0, "calls_given_subnormal": 4}
               for entry in workload.values_unknown.values())
    assert "--subnormal-state 1 made 8 of its 8 tensors subnormal (whole tensors)" in \
        "\n".join(workload.summary_lines())


def test_a_share_of_the_state_is_made_subnormal_tensor_by_tensor(adam_traces):
    from param_compute.capture.trace.value_blind import subnormal_tensors

    found = {1: {"tensors": [("a", 100), ("b", 100)]}, 2: {"tensors": [("c", 100)]},
             3: {"tensors": [("d", 100), ("a", 100)]}}
    assert subnormal_tensors(found, 0.5) == {"c", "d"}  # the last read first, a run of them
    assert subnormal_tensors(found, 1.0) == {"a", "b", "c", "d"}
    assert subnormal_tensors(found, 0.25) == {"d"}
    assert subnormal_tensors(found, 0.01) == set()
    big = {1: {"tensors": [("w", 1000), ("b", 10), ("w2", 1000), ("b2", 10)]}}
    assert subnormal_tensors(big, 0.5) == {"w2", "b2"}  # 1010 of 2020 elements
    workload = capture_execution_trace(adam_traces[0], subnormal_state=0.5)
    given = sum(1 for op in ("aten::sqrt", "aten::mul_", "aten::addcmul_", "aten::lerp_",
                             "aten::addcdiv_") for arg in _args(workload.spec(), op)
                if arg.get("value_profile"))
    assert 0 < given < 20 and 0 < workload.subnormal_state["tensors"] < 8


def _capture_cli(*argv):
    return subprocess.run([sys.executable, "-m", "param_compute.capture", *map(str, argv)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


@pytest.mark.parametrize("value, message", [
    ("2", "--subnormal-state is a fraction in (0, 1], got 2.0"),
    ("0", "--subnormal-state is a fraction in (0, 1], got 0.0"),
    ("nan", "--subnormal-state is a fraction in (0, 1], got nan"),
    ("-0.5", "--subnormal-state is a fraction in (0, 1], got -0.5")])
def test_subnormal_state_out_of_range_is_refused_in_one_line(adam_traces, tmp_path, value,
                                                              message):
    out = tmp_path / "s.json"
    done = _capture_cli("--from-et", adam_traces[0], "-o", out, f"--subnormal-state={value}")
    assert done.returncode == 2 and message in done.stderr
    assert "Traceback" not in done.stderr and not out.exists()


def test_subnormal_state_without_a_trace_is_refused(tmp_path):
    out = tmp_path / "s.json"
    done = _capture_cli("--run", "nomodule:step", "-o", out, "--subnormal-state", "0.5")
    assert done.returncode == 2
    assert "--subnormal-state gives a trace's optimizer state its values: use it with " \
           "--from-et (--run measures them)" in done.stderr
    assert not out.exists()


def test_subnormal_state_on_the_command_line_reaches_the_spec(adam_traces, tmp_path):
    out = tmp_path / "s.json"
    done = _capture_cli("--from-et", adam_traces[0], "--kineto", adam_traces[1], "-o", out,
                        "--subnormal-state", "0.25", "--target-device", "cpu")
    assert done.returncode == 0, done.stderr
    assert "--subnormal-state 0.25 made " in done.stdout + done.stderr
    spec = json.loads(out.read_text())
    assert any(arg.get("value_profile") == {"zeros": 0.0, "subnormal": 1.0}
               for arg in _args(spec, "aten::sqrt"))
    assert json.loads((tmp_path / "s.capture.json").read_text())["subnormal_state"][
        "fraction"] == 0.25


def test_an_odd_node_does_not_end_the_state_search():
    from param_compute.capture.trace.value_blind import give_profile, state_inputs
    from param_compute.capture.trace.walk import TraceTree

    tree = TraceTree({"nodes": [
        {"id": 1, "name": "Optimizer.step#SGD.step", "ctrl_deps": 1, "inputs": {}},
        {"id": 2, "name": "aten::mul_", "ctrl_deps": 1, "inputs": "garbage", "outputs": 7},
        {"id": 3, "name": "aten::sqrt", "ctrl_deps": 1,
         "inputs": {"values": [[5, 6, 0, 4, 4, "cpu"]], "shapes": [[4]],
                    "types": ["Tensor(float)"]}, "outputs": {}}]})
    found = state_inputs(tree, [tree.by_id[2], tree.by_id[3]])
    assert found == {3: {"optimizer": "SGD.step", "paths": [[0]], "tensors": [(
        ("T", 5, 6, 0, 4, (4,), None, 4, "cpu"), 4)]}}
    args = [{"type": "tensor", "dtype": "float", "shape": [4]}, {"type": "int", "value": 1}]
    assert give_profile(args, {}, [[0], [1], [5], ["x"]], {"subnormal": 0.1}) == 1
    assert args[0]["value_profile"] == {"subnormal": 0.1} and "value_profile" not in args[1]


# -- the ledger names the cause, with its evidence ------------------------------------------
def _record(op, run_id, median, count, original):
    return {"op_name": op, "id": run_id, "status": "ok", "count": count,
            "stats": {"forward": {"median": median}},
            "original_us": {"cpu": original, "device": None}}


def _step(values_unknown):
    return upgraded({"step_replay": {
        "stats": {"median": 3.0}, "configs": {
            "aten::sqrt|0|0|0": {"in_step_us": 250.0, "calls": 4},
            "aten::addmm|0|0|0": {"in_step_us": 100.0, "calls": 4},
            "aten::mul_|0|0|0": {"in_step_us": 250.0, "calls": 4}},
        "original": {"how": {"file": "kineto.json"}, "values_unknown": values_unknown}}})


RECORDS = [_record("aten::sqrt", "0|0|0", 0.25, 4, 1000.0),
           _record("aten::addmm", "0|0|0", 0.1, 4, 400.0),
           _record("aten::mul_", "0|0|0", 0.25, 4, 300.0)]


def test_the_ledger_names_values_with_the_evidence_and_the_remedy():
    unknown = [{"op": "aten::sqrt", "calls": 4, "optimizer": "Adam.step", "profile": None},
               {"op": "aten::mul_", "calls": 4, "optimizer": "Adam.step", "profile": None}]
    ledger = build_ledger(RECORDS, _step(unknown), {"device": "cpu"})
    rows = {row["op"]: row for row in ledger["ops"]}
    assert rows["aten::sqrt"]["reason"] == "values"  # 0.25x: ordinary values replayed
    assert rows["aten::sqrt"]["evidence"] == (
        "4 of 4 calls read Adam.step's state, whose values the capture did not record (a "
        "trace has none), and the replay runs 0.25x of the original: subnormal state is "
        "several times slower on a CPU, generated values are ordinary. Capture live (capture "
        "--run) for its value profile, or give one: capture --from-et ... --subnormal-state "
        "FRACTION")
    # the same gap without state: a profiled original's per-call cost
    assert rows["aten::addmm"]["reason"] == "profiler" and "evidence" not in rows["aten::addmm"]
    assert rows["aten::mul_"]["reason"] == ""  # 0.83x: within the tolerance, nothing to say
    text = format_ledger(ledger)
    assert "aten::sqrt: values: 4 of 4 calls read Adam.step's state" in text
    assert "several times slower on a CPU" in ledger_section(ledger)


def test_values_is_no_cause_where_the_state_was_given_a_profile_or_the_replay_is_slower():
    given = [{"op": "aten::sqrt", "calls": 4, "optimizer": "Adam.step",
              "profile": {"subnormal_state": 0.5, "calls_given_subnormal": 2}}]
    rows = {row["op"]: row for row in build_ledger(RECORDS, _step(given))["ops"]}
    assert rows["aten::sqrt"]["reason"] == "profiler" and "evidence" not in rows["aten::sqrt"]
    assert reason("aten::sqrt", 1.0, 2.0, 2.0, True, values_unknown=True) == "cache"
    assert reason("aten::sqrt", 1.0, 0.2, 0.2, True, values_unknown=True) == "values"


@pytest.mark.parametrize("hostile", [
    "not a list", [1, None, "x"], [{"op": 5, "calls": 4}], [{"op": "aten::sqrt", "calls": -3,
                                                            "optimizer": "\x1b[2J<b>"}]])
def test_a_hostile_values_unknown_neither_fails_nor_escapes(hostile):
    ledger = build_ledger(RECORDS, _step(hostile), {"device": "cpu"})
    text, html = format_ledger(ledger), ledger_section(ledger)
    assert "\x1b" not in text + html and "<b>" not in html
    rows = {row["op"]: row for row in ledger["ops"]}
    if isinstance(hostile, list) and hostile and isinstance(hostile[-1], dict) \
            and hostile[-1].get("op") == "aten::sqrt":
        assert rows["aten::sqrt"]["evidence"].startswith("? of 4 calls read \\x1b[2J")
    else:
        assert rows["aten::sqrt"]["reason"] == "profiler"


# -- TBE: the optimizer state's tables -------------------------------------------------------
def _long(shape, **more):
    return {"type": "tensor", "dtype": "long", "shape": shape, **more}


def _backward_named(momentum_numel):
    return {"host_weights": {"type": "tensor", "dtype": "float", "shape": [9600]},
            "weights_placements": {"type": "tensor", "dtype": "int", "shape": [3]},
            "weights_offsets": _long([3]), "D_offsets": {"type": "tensor", "dtype": "int",
                                                         "shape": [4]},
            "max_D": {"type": "int", "value": 16},
            "grad_output": {"type": "tensor", "dtype": "float", "shape": [8, 48]},
            "hash_size_cumsum": _long([4]), "indices": _long([120]), "offsets": _long([25]),
            "momentum1_host": {"type": "tensor", "dtype": "float", "shape": [momentum_numel]},
            "momentum1_placements": {"type": "tensor", "dtype": "int", "shape": [3],
                                     "value_range": [3, 3]},
            # a live capture's range: random offsets, most past a table's state
            "momentum1_offsets": _long([3], value_range=[0, 400])}


def test_a_tbe_backward_s_row_wise_state_gets_each_table_s_row_starts():
    from param_compute.capture.tbe_rules import HOST, tbe_rule

    named = _backward_named(600)  # one value per row: 600 rows of 16
    assert tbe_rule(named) is None
    assert named["momentum1_offsets"]["values"] == [0, 200, 400]
    assert "value_range" not in named["momentum1_offsets"]
    assert named["momentum1_placements"]["values"] == [HOST] * 3
    full = _backward_named(9600)  # one value per weight (Adam's): element starts
    assert tbe_rule(full) is None
    assert full["momentum1_offsets"]["values"] == [0, 3200, 6400]
    odd = _backward_named(601)  # neither: left as it was
    assert tbe_rule(odd) is None
    assert "values" not in odd["momentum1_offsets"]
    assert odd["momentum1_offsets"]["value_range"] == [0, 400]


def test_a_pt2_lookup_s_packed_momentum_list_gets_its_offsets():
    from param_compute.capture.tbe_rules import HOST, tbe_rule

    named = _backward_named(600)
    named.pop("momentum1_host"), named.pop("momentum1_placements"), named.pop("momentum1_offsets")
    packed = {"type": "genericlist", "value": [
        {"type": "tensor", "dtype": "float", "shape": [600]},
        {"type": "tensor", "dtype": "int", "shape": [3]}, _long([3])]}
    named["momentum1"] = packed
    named["momentum2"] = {"type": "genericlist", "value": ["odd"]}  # short: left alone
    assert tbe_rule(named) is None
    assert packed["value"][1]["values"] == [HOST] * 3
    assert packed["value"][2]["values"] == [0, 200, 400]


# -- an index reaching its op through a conversion gets the op's structure -------------------
def _tensor(dtype="long", shape=(9,), **more):
    return {"type": "tensor", "dtype": dtype, "shape": list(shape), **more}


def test_a_conversion_feeding_tbe_offsets_gets_their_bags_down_a_chain():
    from param_compute.capture.step.upstream import carry_structure

    bags = {"indices": 40, "bags": 8, "as": "offsets_with_end"}
    configs = {
        ("aten::_to_copy", "s", "a"): {"args": [_tensor("int")], "kwargs": {}},
        ("aten::to", "s", "b"): {"args": [_tensor(value_range=[-3, 7])], "kwargs": {}},
        ("fbgemm::lookup", "s", "c"): {"args": [_tensor(shape=(40,)), {"type": "genericlist",
                                                                       "value": [_tensor(
                                                                           bags=bags)]}],
                                       "kwargs": {"offsets": _tensor(bags=bags)}},
        ("aten::clone", "s", "d"): {"args": [_tensor(shape=(10,))], "kwargs": {}},
        ("aten::mul", "s", "e"): {"args": [_tensor()], "kwargs": {}}}
    calls = [{"config": ("aten::_to_copy", "s", "a"), "in": []},
             {"config": ("aten::to", "s", "b"), "in": [[[0], 0, [0]]]},
             {"config": ("aten::clone", "s", "d"), "in": []},
             {"config": ("aten::mul", "s", "e"), "in": []},
             {"config": ("fbgemm::lookup", "s", "c"),
              "in": [[["offsets"], 1, [0]], [[1, 0], 3, [0]], [[0], 2, [0]]]}]
    assert carry_structure(configs, calls) == 2
    to_in = configs[("aten::to", "s", "b")]["args"][0]
    assert to_in["bags"] == bags and "value_range" not in to_in  # a structure beats a range
    assert configs[("aten::_to_copy", "s", "a")]["args"][0]["bags"] == bags  # up the chain
    to_in["bags"]["bags"] = 99  # a copy, not the consumer's own object
    assert configs[("fbgemm::lookup", "s", "c")]["kwargs"]["offsets"]["bags"]["bags"] == 8
    # not a pass-through op, or not as many elements: left alone
    assert "bags" not in configs[("aten::mul", "s", "e")]["args"][0]
    assert "bags" not in configs[("aten::clone", "s", "d")]["args"][0]
    assert carry_structure(configs, calls) == 0  # nothing stronger left to give


@pytest.mark.parametrize("calls", [
    [{"config": None, "in": [[[0], 5, [0]]]}],
    [{"config": ("x", "s", "k"), "in": [[[0], -1, [0]], [[0], 7, [0]], [[0], "1", [0]]]}],
    [{"config": ("x", "s", "k"), "in": [[[], 0, [0]]]}]])
def test_odd_step_calls_carry_nothing_and_do_not_fail(calls):
    from param_compute.capture.step.upstream import carry_structure

    configs = {("x", "s", "k"): {"args": [_tensor(bags={"indices": 1, "bags": 1})]}}
    assert carry_structure(configs, calls) == 0


def test_a_traced_tbe_s_offsets_conversion_replays_as_bags(tmp_path):
    pytest.importorskip("fbgemm_gpu")
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import (ComputeDevice,
                                                                      EmbeddingLocation)
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        SplitTableBatchedEmbeddingBagsCodegen)

    torch.manual_seed(0)
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        [(50, 8, EmbeddingLocation.HOST, ComputeDevice.CPU)] * 2,
        optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.01)
    indices = torch.randint(0, 50, (2 * 4 * 3,))
    offsets = torch.arange(0, 2 * 4 * 3 + 1, 3)

    def step():
        tbe(indices, offsets).sum().backward()

    step()
    et_path = tmp_path / "tbe_et.json"
    observer = ExecutionTraceObserver()
    observer.register_callback(str(et_path))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True):
        observer.start()
        step()
        observer.stop()
        observer.unregister_callback()
    workload = capture_execution_trace(et_path, allow_namespaces=("fbgemm",))
    conversions = [item["args"][0] for op in ("aten::to", "aten::_to_copy")
                   for config in workload.spec().get(op, {}).get("config", [])
                   for item in config["input"] if item["args"][0].get("shape") == [9]]
    assert conversions and all(arg.get("bags") == {"indices": 24, "bags": 8,
                                                   "as": "offsets_with_end"}
                               for arg in conversions)
