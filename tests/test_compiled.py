"""Compiled steps: torch.compile regions counted honestly from traces, captured live as graphs
(``__graphs__``, ``graph::NAME``), replayed compiled with Inductor or eagerly, and a hostile
graph refused before anything runs.

Compiling costs seconds on a CPU, so one small model is compiled, captured and replayed once
for the module (``compiled_capture``); every other test here compiles nothing."""

from __future__ import annotations

import copy
import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from conftest import run_cli
from param_compute.analysis.ledger import build_ledger, format_ledger
from param_compute.capture import capture_execution_trace
from param_compute.operators.graphs import GraphOperator, check_graph
from param_compute.spec.graphs import graph_problems, section_problems
from param_compute.spec.step_file import read_step_file, step_path

SHARED_TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
MM = str(torch.ops.aten.mm.default._schema)
F32 = "Tensor(float)"


# -- a graph written by hand -----------------------------------------------------------------
def _graph(**changes):
    """relu(x @ w + b): three aten nodes, two outputs (the result and x)."""
    graph = {"version": 1, "region": "0/0", "pass": "forward",
             "inputs": [{"name": "x", "dtype": "float32", "shape": [4, 8], "stride": [8, 1]},
                        {"name": "w", "dtype": "float32", "shape": [8, 8], "stride": [8, 1]},
                        {"name": "b", "dtype": "float32", "shape": [8], "stride": [1]}],
             "nodes": [{"name": "mm", "op": "aten::mm.default",
                        "args": [{"ref": "x"}, {"ref": "w"}], "kwargs": {}},
                       {"name": "add", "op": "aten::add.Tensor",
                        "args": [{"ref": "mm"}, {"ref": "b"}], "kwargs": {"alpha": 1}},
                       {"name": "relu", "op": "aten::relu.default",
                        "args": [{"ref": "add"}], "kwargs": {}}],
             "outputs": [{"ref": "relu"}, {"ref": "x"}]}
    graph.update(changes)
    return graph


def _tensor(shape):
    return {"type": "tensor", "dtype": "float", "shape": shape, "requires_grad": False}


def _spec(graph, name="g"):
    return {"__graphs__": {name: graph},
            f"graph::{name}": {"config": [{"input": [{"args": [
                _tensor([4, 8]), _tensor([8, 8]), _tensor([8])], "count": 2}]}]}}


def _run(tmp_path, spec, *flags):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    out = tmp_path / "out.json"
    result = run_cli("-c", path, "--output", out, "--num-threads", "1", "-q", *flags)
    return result, out


def _problem_lines(result):
    return [line for line in result.stderr.splitlines() if "spec.json: __graphs__" in line]


def test_a_hand_written_graph_is_well_formed():
    assert graph_problems("g", _graph()) == []
    assert check_graph("g", _graph()) == []


@pytest.mark.parametrize("change, node, words", [
    # an operator outside the allow-list: a file, a process, printing
    (lambda g: g["nodes"][1].update(op="aten::_print.default"), "node 1 (add)",
     "not on the graph allow-list"),
    (lambda g: g["nodes"][1].update(op="os::system.default"), "node 1 (add)",
     "not on the graph allow-list"),
    (lambda g: g["nodes"][0].update(op="aten::nonzero.default"), "node 0 (mm)",
     "not on the graph allow-list"),
    # a cycle: mm reads relu, which is defined after it
    (lambda g: g["nodes"][0].update(args=[{"ref": "relu"}, {"ref": "w"}]), "node 0 (mm)",
     "defined after it (a cycle"),
    # a shape that would need TBs (full of 2^20 x 2^20 floats: 4 TiB)
    (lambda g: g["nodes"].insert(0, {"name": "huge", "op": "aten::full.default",
                                      "args": [[2**20, 2**20], 1.0], "kwargs": {}}),
     "node 0 (huge)", "over the 1 TiB a graph may need"),
    # arguments that do not bind to the operator's schema
    (lambda g: g["nodes"][2].update(args=[{"ref": "add"}, 1, 2]), "node 2 (relu)",
     "positional arguments"),
])
def test_a_hostile_graph_is_refused_naming_the_file_and_node_and_nothing_runs(
        tmp_path, change, node, words):
    graph = _graph()
    change(graph)
    result, out = _run(tmp_path, _spec(graph))
    assert result.returncode == 2, result.stderr
    lines = _problem_lines(result)
    assert len(lines) == 1, result.stderr
    assert node in lines[0] and words in lines[0], lines[0]
    assert "Traceback" not in result.stderr
    assert not out.exists()  # nothing ran, nothing was written


def test_form_problems_name_where():
    bad = _graph()
    bad["nodes"][1]["kwargs"]["alpha"] = {"float": "huge"}
    bad["compile"] = {"options": {"cpp.cxx": True}, "static_inputs": [7]}
    bad["nodes"].append({"name": "mm", "op": "aten::relu.default", "args": [{"ref": "nope"}],
                         "kwargs": {}})
    messages = [message for _, message, _ in graph_problems("g", bad)]
    assert any("float huge is none of" in m for m in messages)
    assert any("not an Inductor option a graph may set" in m for m in messages)
    assert any("static_inputs" in m for m in messages)
    assert any("defined twice" in m for m in messages)
    assert any("'nope', which no input or earlier node defines" in m.replace('"', "'")
               or "nope, which no input" in m for m in messages)
    assert section_problems([]) and graph_problems("not a name!", _graph())


def test_a_graph_op_needs_its_graph_and_inputs_of_its_shapes(tmp_path):
    spec = _spec(_graph())
    spec["graph::other"] = spec.pop("graph::g")
    result, _ = _run(tmp_path, spec)
    assert result.returncode == 2 and "no graph 'other'" in result.stderr
    spec = _spec(_graph())
    spec["graph::g"]["config"][0]["input"][0]["args"][1] = _tensor([8, 9])
    result, _ = _run(tmp_path, spec)
    assert result.returncode == 2 and "has shape [8, 8] in the graph" in result.stderr


# -- traces: compiled regions counted as not covered -----------------------------------------
def _t(tensor_id):
    return [tensor_id, tensor_id, 0, 64, 4, "cuda:0"]


def _record(node_id, name, parent, **attrs):
    return {"id": node_id, "name": name, "ctrl_deps": parent,
            "inputs": {"values": [], "shapes": [], "types": []},
            "outputs": {"values": [], "shapes": [], "types": []},
            "attrs": [{"name": k, "type": "string", "value": v} for k, v in attrs.items()]}


def _mm(node_id, parent, a, b, out):
    node = _record(node_id, "aten::mm", parent, op_schema=MM)
    node["inputs"] = {"values": [_t(a), _t(b)], "shapes": [[8, 8], [8, 8]], "types": [F32, F32],
                      "strides": [[8, 1], [8, 1]]}
    node["outputs"] = {"values": [_t(out)], "shapes": [[8, 8]], "types": [F32],
                       "strides": [[8, 1]]}
    return node


def compiled_et():
    """One step: a compiled region's forward (an extern mm and a Triton kernel) and its
    backward (the same), as an execution trace records them."""
    nodes = [_record(1, "[pytorch|profiler|execution_trace|process]", 1),
             _record(2, "ProfilerStep#1", 1),
             _record(3, "Torch-Compiled Region: 0/0", 2), _record(4, "CompiledFunction", 3),
             _mm(5, 4, 10, 11, 12),
             _record(6, "triton_poi_fused_relu_0", 4, kernel_backend="triton",
                     kernel_file="x.py"),
             _record(7, "autograd::engine::evaluate_function: CompiledFunctionBackward", 2),
             _record(8, "CompiledFunctionBackward", 7), _mm(9, 8, 12, 11, 13),
             _record(10, "triton_poi_fused_threshold_backward_1", 8, kernel_backend="triton",
                     kernel_file="y.py")]
    return {"schema": "1.1.1-chakra.0.0.4", "pid": 7, "nodes": nodes}


def _event(name, ts, dur, cat="cpu_op", **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 7, "tid": 7,
            "args": args}


def _kernel(name, ts, dur, correlation):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0,
            "tid": 7, "args": {"correlation": correlation}}


def compiled_kineto():
    """Its Kineto trace: the forward region spans 200 µs (its mm 50), the backward 300 (mm 80);
    each launches a GEMM inside its mm and a Triton kernel outside it."""
    return {"schemaVersion": 1, "traceEvents": [
        _event("ProfilerStep#1", 1000, 1000, cat="user_annotation"),
        _event("Torch-Compiled Region: 0/0", 1100, 200),
        _event("CompiledFunction", 1110, 180),
        _event("aten::mm", 1120, 50),
        _event("cudaLaunchKernel", 1130, 5, cat="cuda_runtime", correlation=1),
        _event("cuLaunchKernel", 1200, 5, cat="cuda_driver", correlation=2),
        _event("autograd::engine::evaluate_function: CompiledFunctionBackward", 1500, 310),
        _event("CompiledFunctionBackward", 1505, 300),
        _event("aten::mm", 1510, 80),
        _event("cudaLaunchKernel", 1520, 5, cat="cuda_runtime", correlation=3),
        _event("cuLaunchKernel", 1700, 5, cat="cuda_driver", correlation=4),
        _kernel("gemm", 1140, 40, 1), _kernel("triton_poi_fused_relu_0", 1210, 25, 2),
        _kernel("gemm", 1530, 60, 3),
        _kernel("triton_poi_fused_threshold_backward_1", 1710, 30, 4)]}


def test_a_trace_counts_compiled_regions_time_as_not_covered_and_names_it(tmp_path):
    workload = capture_execution_trace(compiled_et(), source="et", kineto=compiled_kineto(),
                                       target_device="cpu")
    regions = workload.compiled_regions()
    by_name = {row["region"]: row for row in regions["regions"]}
    assert regions["count"] == 2 and regions["captured_as_graphs"] == 0
    forward = by_name["Torch-Compiled Region: 0/0"]
    backward = by_name["Torch-Compiled Region: 0/0 (backward)"]
    # the region's own CPU time: its span less the mm captured inside it
    assert forward["not_covered_us"]["cpu"] == pytest.approx(150)
    assert backward["not_covered_us"]["cpu"] == pytest.approx(220)
    # Inductor's Triton kernel is the region's; the GEMM the mm launched is the mm's
    assert forward["device_us"] == pytest.approx(25) and forward["kernels"] == 1
    assert backward["device_us"] == pytest.approx(30)
    cover = workload.time_coverage()
    assert cover["captured_us"]["cpu"] == pytest.approx(130)  # the two mm calls
    assert cover["total_us"]["cpu"] >= 130 + 150 + 220  # the regions' kernels count
    assert cover["captured_us"]["device"] == pytest.approx(100)
    lines = "\n".join(workload.summary_lines())
    assert "compiled regions: 2 (torch.compile)" in lines
    assert "0.370 ms cpu, 0.055 ms device of compiled region kernels" in lines
    spec, report = workload.write(tmp_path / "t.json")
    assert json.loads(report.read_text())["compiled_regions"]["count"] == 2
    original = read_step_file(step_path(spec))["original"]
    missing = {item["op"]: item for item in original["not_captured"]}
    assert missing["compiled region kernels: Torch-Compiled Region: 0/0"]["original_us"] == \
        {"cpu": 150.0, "device": 25.0}


def test_the_shared_torch_compile_trace_has_its_region_counted(tmp_path):
    trace = SHARED_TRACES / "pt2_et.json.tar.gz"
    if not trace.exists():
        pytest.skip("the shared traces are not here")
    workload = capture_execution_trace(trace, target_device="cpu")
    regions = workload.compiled_regions()
    assert regions["count"] == 1 and regions["time_us"] is None  # no Kineto: time unknown
    lines = "\n".join(workload.summary_lines())
    assert "compiled regions: 1 (torch.compile): no Kineto trace" in lines
    assert "Triton kernels of torch.compile" in lines  # its kernel node, not captured


# -- live: a compiled step captured as graphs and replayed -------------------------------------
TRAIN = textwrap.dedent("""
    import torch, torch.nn as nn, torch.nn.functional as F
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))

    def forward(x):
        h = model[1](model[0](x))
        torch._dynamo.graph_break()  # two regions: 0/0 before the break, 1/0 after it
        return model[2](h)

    compiled = torch.compile(forward)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))

    def step():
        optimizer.zero_grad()
        F.cross_entropy(compiled(x), y).backward()
        optimizer.step()
""")


@pytest.fixture(scope="module")
def compiled_capture(tmp_path_factory):
    """A compiled two-layer MLP's step captured live, then replayed compiled and eagerly."""
    folder = tmp_path_factory.mktemp("compiled")
    (folder / "ctrain.py").write_text(TRAIN)
    sys.modules.pop("ctrain", None)
    captured = run_cli("--run", "ctrain:step", "-o", folder / "c.json",
                       module="param_compute.cli.capture", cwd=folder)
    replays = {}
    for mode, flags in (("compiled", ()), ("eager", ("--eager-regions",))):
        out = folder / f"{mode}.json"
        result = run_cli("-c", folder / "c.json", "--replay-step", "--output", out,
                         "--num-threads", "1", "-q", "-w", "1", "-i", "3", *flags)
        assert out.exists(), (captured.stdout, captured.stderr, result.stdout, result.stderr)
        replays[mode] = (result, [json.loads(line) for line in out.read_text().splitlines()])
    return folder, captured, replays


def test_every_compiled_region_is_captured_as_a_graph(compiled_capture):
    folder, captured, _ = compiled_capture
    assert captured.returncode == 0, captured.stderr
    assert "compiled regions: 4 graphs ran" in captured.stdout
    assert "4 captured as graphs" in captured.stdout
    spec = json.loads((folder / "c.json").read_text())
    graphs = spec["__graphs__"]
    assert sorted((g["region"], g["pass"]) for g in graphs.values()) == [
        ("0/0", "backward"), ("0/0", "forward"), ("1/0", "backward"), ("1/0", "forward")]
    first = next(g for g in graphs.values() if g["pass"] == "forward" and g["region"] == "0/0")
    assert {"aten::addmm.default", "aten::tanh.default"} <= {n["op"] for n in first["nodes"]}
    assert first["eager"]["user_outputs"] == 1  # tanh's output; the rest saved for backward
    calls = [c["run"].split("|")[0] for c in read_step_file(folder / "c.step.json")["calls"]]
    assert sum(c.startswith("graph::") for c in calls) == 4
    assert "aten::tanh" not in calls  # inside the region: the graph's, not an eager call
    report = json.loads((folder / "c.capture.json").read_text())["compiled_regions"]
    assert report["count"] == report["captured_as_graphs"] == 4
    # the graph break is listed with dynamo's reason
    assert report["graph_breaks"] and all(b["reason"] and b["count"] >= 1
                                          for b in report["graph_breaks"])
    assert "graph break" in captured.stdout


def test_the_compiled_step_replays_with_its_graphs_compiled_or_eager(compiled_capture):
    _, _, replays = compiled_capture
    for mode, (result, records) in replays.items():
        assert result.returncode == 0, result.stderr
        step = next(r for r in records if r.get("kind") == "step")
        assert step["status"] == "ok" and step["step"]["failed_calls"] == 0
        assert step["step"]["dataflow_mismatches"] == 0
        assert step["step"]["graphs"]["mode"] == mode
        graphs = [r for r in records if str(r.get("op_name")).startswith("graph::")]
        assert len(graphs) == 4 and all(r["status"] == "ok" for r in graphs)
        if mode == "compiled":
            assert all(r["metric"]["forward"]["compile.time"][0] > 0 for r in graphs)
            assert all(r["throughput"]["forward"]["flops"] > 0 for r in graphs)
        else:
            assert set(step["step"]["graphs"]["eager_as"].values()) == {"pytorch"}
            ledger = format_ledger(build_ledger(graphs, step))
            assert "(eager)" in ledger and "replayed eagerly" in ledger
            assert "as PyTorch runs them uncompiled" in ledger


def test_a_graph_replays_what_it_computes():
    graph = _graph()
    x, w, b = torch.randn(4, 8), torch.randn(8, 8), torch.randn(8)
    for eager in (True, False):
        op = GraphOperator("graph::g", copy.deepcopy(graph), eager=eager)
        op.device = "cpu"
        out, passed_through = op.bind_forward([x, w, b], {})()
        assert torch.allclose(out, torch.relu(x @ w + b), atol=1e-5)
        assert passed_through is x or torch.equal(passed_through, x)


def test_graph_records_go_to_compare_report_and_history(compiled_capture, tmp_path):
    folder, _, _ = compiled_capture
    compiled, eager = folder / "compiled.json", folder / "eager.json"
    table = tmp_path / "c.csv"
    compared = run_cli(compiled, eager, "--csv", table, module="param_compute.compare")
    assert compared.returncode == 0, compared.stderr
    text = table.read_text()
    assert "graph::r0_0_for" in text and "graph::r0_0_bac" in text
    page = tmp_path / "r.html"
    reported = run_cli(compiled, "-o", page, module="param_compute.report")
    assert reported.returncode == 0, reported.stderr
    assert "graph::r0_0_for" in page.read_text()
    db = tmp_path / "h.db"
    for path in (compiled, eager):
        added = run_cli("add", path, "--label", path.stem, "--db", db,
                        module="param_compute.cli.history")
        assert added.returncode == 0, added.stderr
    shown = run_cli("show", "--db", db, module="param_compute.cli.history")
    assert shown.returncode == 0 and "graph::r0_0_for" in shown.stdout, shown.stdout
