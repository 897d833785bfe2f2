"""Faithful capture of execution traces: steps, stride recovery, recorded ranges, Kineto times,
backend kernels made portable, and every call not captured accounted for (traces recorded here)."""

from __future__ import annotations

import ast
import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest
import torch
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, record_function

import param_compute
from param_compute.capture import capture_execution_trace
from param_compute.capture.accounting import KINDS
from param_compute.capture.portable import has_kernel, missing_kernels
from param_compute.capture.trace.files import read_execution_trace, read_json
from param_compute.capture.values import ET_DTYPES, SCALAR_TYPES, SPEC_DTYPE
from param_compute.cli.capture import main as capture_main
from param_compute.dtypes import DTYPE_NAMES

CAPTURE = Path(param_compute.__file__).parent / "capture"


def _record(step, folder: Path, steps: int = 3, kineto: bool = True, env=None):
    """An execution trace (and a Kineto trace) of ``steps`` ProfilerStep#N windows of ``step``."""
    et_path, kineto_path = folder / "et.json", folder / "kineto.json"
    observer = ExecutionTraceObserver()
    observer.register_callback(str(et_path))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        observer.start()
        for number in range(steps):
            with record_function(f"ProfilerStep#{number}"):
                step()
        observer.stop()
        observer.unregister_callback()
    if kineto:
        prof.export_chrome_trace(str(kineto_path))
    return et_path, kineto_path


@pytest.fixture(scope="module")
def mlp_traces(tmp_path_factory):
    torch.manual_seed(0)
    layer = torch.nn.Linear(8, 4)
    inputs = torch.randn(3, 8)

    def step():
        layer(inputs).relu().sum().backward()

    step()
    return _record(step, tmp_path_factory.mktemp("mlp"))


def _inputs(spec, op):
    return [item for config in spec[op]["config"] for item in config["input"]]


# --- structure ------------------------------------------------------------------------------

def test_capture_modules_import_no_cycle_even_inside_functions():
    imports = {}
    for path in CAPTURE.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "param_compute.capture."):
                found.add(node.module.rsplit(".", 1)[1])
        imports[path.stem] = found
    done, visiting = set(), []

    def visit(name):
        assert name not in visiting, f"import cycle: {' -> '.join(visiting + [name])}"
        if name in done:
            return
        visiting.append(name)
        for dep in imports.get(name, ()):
            visit(dep)
        visiting.pop()
        done.add(name)

    for name in imports:
        visit(name)
    assert "accounting" in imports and imports["accounting"] == set()


def test_capture_dtype_names_come_from_the_project_table():
    assert SPEC_DTYPE == {"float32": "float", "float64": "double", "float16": "float16",
                          "bfloat16": "bfloat16", "int32": "int", "int64": "long",
                          "int8": "int8", "int16": "int16", "uint8": "uint8", "bool": "bool",
                          "complex64": "complex64", "complex128": "complex128"}
    assert set(ET_DTYPES.values()) <= set(DTYPE_NAMES)
    assert set(SCALAR_TYPES.values()) <= set(DTYPE_NAMES)


# --- steps ----------------------------------------------------------------------------------

def test_last_complete_step_is_captured_by_default_and_counts_are_per_step(mlp_traces):
    et_path, _ = mlp_traces
    default = capture_execution_trace(et_path)
    steps = default.steps.to_json()
    assert steps["found"] == [0, 1, 2] and steps["captured"] == [2] and steps["default"]
    per_step = steps["calls_per_step"]
    assert len(set(per_step.values())) == 1 and default.calls == per_step["2"]
    assert "captured #2 (the last complete step, by default" in default.summary_lines()[1]
    everything = capture_execution_trace(et_path, step="all")
    assert everything.captured_calls == 3 * default.captured_calls
    first = capture_execution_trace(et_path, step="0")
    assert first.configs == default.configs and first.steps.selected == [0]
    with pytest.raises(ValueError, match=r"--trace-step 7: the trace has no complete ProfilerStep#7"):
        capture_execution_trace(et_path, step="7")


def test_cli_step_and_errors(mlp_traces, tmp_path, capsys):
    et_path, _ = mlp_traces
    out = tmp_path / "spec.json"
    assert capture_main(["--from-et", str(et_path), "-o", str(out), "--trace-step", "all"]) == 0
    report = json.loads((tmp_path / "spec.capture.json").read_text())
    assert report["steps"]["captured"] is None and report["calls"] == sum(
        report["steps"]["calls_per_step"].values())
    assert capture_main(["--from-et", str(et_path), "-o", str(out), "--trace-step", "x"]) == 2
    assert "--trace-step 'x': write a step number or 'all'" in capsys.readouterr().err


def test_capture_s_old_step_flag_warns_and_still_picks_the_step(mlp_traces, tmp_path, capsys):
    """``capture --step N|all`` was renamed ``--trace-step`` (``--step`` is run's step file):
    the old spelling still works, with a warning on stderr."""
    et_path, _ = mlp_traces
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    assert capture_main(["--from-et", str(et_path), "-o", str(new), "--trace-step", "0"]) == 0
    assert "--trace-step" not in capsys.readouterr().err
    assert capture_main(["--from-et", str(et_path), "-o", str(old), "--step", "0"]) == 0
    assert "warning: capture --step is now --trace-step" in capsys.readouterr().err
    assert json.loads(old.read_text()) == json.loads(new.read_text())
    report = json.loads((tmp_path / "old.capture.json").read_text())
    assert report["steps"]["captured"] == [0] and report["steps"]["default"] is False
    assert capture_main(["--from-et", str(et_path), "-o", str(old), "--step", "0",
                         "--trace-step", "1"]) == 2
    assert "say different steps" in capsys.readouterr().err


# --- Kineto ---------------------------------------------------------------------------------

def test_kineto_join_gives_each_config_its_original_time(mlp_traces, tmp_path, capsys):
    et_path, kineto_path = mlp_traces
    workload = capture_execution_trace(et_path, kineto=kineto_path)
    assert workload.kineto["joined_calls"] == workload.kineto["calls"] == workload.calls
    assert workload.kineto["joined_by"] == "record function id"
    spec = workload.spec()
    addmm = _inputs(spec, "aten::addmm")[0]
    kineto = json.loads(kineto_path.read_text())["traceEvents"]
    window = next(e for e in kineto if e.get("name") == "ProfilerStep#2")
    recorded = [e["dur"] for e in kineto if e.get("name") == "aten::addmm"
                and window["ts"] <= e["ts"] <= window["ts"] + window["dur"]]
    assert addmm["original_us"] == {"cpu": round(recorded[0], 3), "device": None}
    coverage = workload.time_coverage()
    assert coverage["captured_us"]["cpu"] == coverage["total_us"]["cpu"] > 0
    # carried into run records like count
    records = param_compute.run({"aten::addmm": spec["aten::addmm"]}, dry_run=True).records
    assert records[0]["original_us"] == addmm["original_us"] and records[0]["count"] == 1
    # the CLI: gzipped Kineto, coverage line; a tar.gz archive named in errors
    gz = tmp_path / "kineto.json.gz"
    gz.write_bytes(gzip.compress(kineto_path.read_bytes()))
    assert capture_main(["--from-et", str(et_path), "--kineto", str(gz),
                         "-o", str(tmp_path / "s.json")]) == 0
    assert "original time (Kineto: 15 of 15 calls joined): captured cpu 100.0%" in \
        capsys.readouterr().out.replace(f"{workload.calls} of {workload.calls}", "15 of 15")
    broken = tmp_path / "broken.tar.gz"
    with tarfile.open(broken, "w:gz") as archive:
        data = b"{not json"
        info = tarfile.TarInfo("trace.json")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    assert capture_main(["--from-et", str(et_path), "--kineto", str(broken),
                         "-o", str(tmp_path / "s.json")]) == 2
    err = capsys.readouterr().err
    assert f"{broken} (trace.json): not JSON" in err and "Traceback" not in err
    assert capture_main(["--from-et", str(kineto_path), "-o", str(tmp_path / "s.json")]) == 2
    assert "a Kineto trace, not an execution trace" in capsys.readouterr().err


def test_tar_gz_archives_are_read(mlp_traces, tmp_path):
    et_path, _ = mlp_traces
    archive_path = tmp_path / "et.json.tar.gz"
    with tarfile.open(archive_path, "w:gz") as archive:
        archive.add(et_path, arcname="et.json")
    assert read_execution_trace(archive_path)["nodes"] == read_json(et_path)["nodes"]


# --- recorded integer ranges ----------------------------------------------------------------

def test_recorded_tensor_range_becomes_the_value_range(tmp_path, monkeypatch):
    monkeypatch.setenv("ENABLE_PYTORCH_EXECUTION_TRACE_SAVE_INTEGRAL_TENSOR_RANGE", "1")
    table = torch.nn.Embedding(300, 4)
    indices = torch.tensor([100, 150, 196, 120])

    def step():
        table(indices).sum().backward()

    et_path, _ = _record(step, tmp_path, steps=1, kineto=False)
    spec = capture_execution_trace(et_path).spec()
    ranges = [arg["value_range"] for item in _inputs(spec, "aten::embedding")
              for arg in item["args"] if arg.get("dtype") == "long"]
    assert ranges == [[100, 196]]  # the data recorded, not [0, 299] from the table's size
    backward = [arg["value_range"] for item in _inputs(spec, "aten::embedding_dense_backward")
                for arg in item["args"] if arg.get("dtype") == "long"]
    assert backward == [[100, 196]]


# --- stride recovery ------------------------------------------------------------------------

def test_strides_are_recovered_where_a_trace_records_none(tmp_path):
    weight, x = torch.randn(6, 5), torch.randn(4, 5)
    batch = torch.randn(2, 3, 4)

    def step():
        torch.mm(x, weight.t())
        torch.bmm(batch, batch.transpose(1, 2))
        batch.permute(2, 0, 1).clone()

    et_path, _ = _record(step, tmp_path, steps=1, kineto=False)
    with_strides = capture_execution_trace(et_path)
    assert with_strides.strides == {"recorded": True}
    trace = json.loads(et_path.read_text())
    for node in trace["nodes"]:
        node["inputs"].pop("strides", None)
        node["outputs"].pop("strides", None)
    recovered = capture_execution_trace(trace, source="no strides")
    assert recovered.strides["recorded"] is False and recovered.strides["recovered_calls"] >= 3
    for op in ("aten::mm", "aten::bmm", "aten::clone"):
        assert _inputs(recovered.spec(), op) == _inputs(with_strides.spec(), op), op
    assert _inputs(recovered.spec(), "aten::mm")[0]["args"][1]["stride"] == [1, 5]
    assert any("layouts: the trace records no strides; recovered" in line
               for line in recovered.summary_lines())


# --- portable replay and the kernel check ---------------------------------------------------

def _node(node_id, name, schema, types, values, shapes, parent=1, **attrs):
    extra = [{"name": k, "type": "string", "value": v} for k, v in attrs.items()]
    return {"id": node_id, "name": name, "ctrl_deps": parent,
            "inputs": {"values": values, "shapes": shapes, "types": types},
            "outputs": {"values": [], "shapes": [], "types": []},
            "attrs": [{"name": "op_schema", "type": "string", "value": schema}] + extra}


def _trace(*nodes):
    root = {"id": 1, "name": "[pytorch|profiler|execution_trace|process]", "ctrl_deps": 1,
            "inputs": {"values": [], "shapes": [], "types": []}, "attrs": []}
    return {"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": [root, *nodes]}


def _t(tensor_id, numel=8):
    return [tensor_id, tensor_id, 0, numel, 4, "cuda:0"]


def test_backend_kernels_replay_portably_on_cpu():
    schema = str(torch.ops.aten.cudnn_batch_norm_backward.default._schema)
    bn = str(torch.ops.aten.batch_norm.default._schema)
    cudnn_bn = str(torch.ops.aten.cudnn_batch_norm.default._schema)
    c, shape = 4, [2, 4, 3, 3]
    vec = [c]
    trace = _trace(
        _node(2, "aten::batch_norm", bn, ["Tensor(float)"] * 5 + ["Bool", "Double", "Double",
                                                                  "Bool"],
              [_t(10, 72), _t(11), _t(12), _t(13), _t(14), True, 0.1, 1e-5, True],
              [shape, vec, vec, vec, vec, [], [], [], []]),
        _node(3, "aten::cudnn_batch_norm", cudnn_bn, ["Tensor(float)"] * 5 + [
            "Bool", "Double", "Double"], [_t(10, 72), _t(11), _t(12), _t(13), _t(14), True, 0.1,
                                           1e-5], [shape, vec, vec, vec, vec, [], [], []],
              parent=2),
        _node(4, "aten::cudnn_batch_norm_backward", schema, ["Tensor(float)"] * 7 + [
            "Double", "Tensor(unsigned char)"],
              [_t(10, 72), _t(20, 72), _t(11), _t(13), _t(14), _t(15), _t(16), 1e-5, _t(17, 0)],
              [shape, shape, vec, vec, vec, vec, vec, [], [0]]))
    workload = capture_execution_trace(trace, source="bn", target_device="cpu")
    spec = workload.spec()
    assert sorted(spec) == ["aten::batch_norm", "aten::native_batch_norm_backward"]
    assert workload.report()["no_kernel_on_target"] == []
    result = param_compute.run(spec, iteration=1, warmup=0, throughput=False)
    assert [r["status"] for r in result.records] == ["ok", "ok"]


def test_configs_without_a_kernel_on_the_target_are_reported_before_running():
    assert has_kernel("aten::add.Tensor", "cpu") and has_kernel("aten::linear", "cpu")
    assert not has_kernel("aten::cudnn_batch_norm", "cpu")
    spec = {"aten::cudnn_grid_sampler": {"config": [{
        "build": [{"args": [{"type": "str", "value": str(
            torch.ops.aten.cudnn_grid_sampler.default._schema)}]}],
        "input": [{"args": [], "count": 3}, {"args": [], "count": 2}]}]}}
    assert missing_kernels(spec, "cpu") == [{"op": "aten::cudnn_grid_sampler",
                                              "qualified": "aten::cudnn_grid_sampler",
                                              "configs": 2, "calls": 5}]


# --- honest accounting ----------------------------------------------------------------------

def test_every_call_with_compute_not_captured_is_accounted_for(tmp_path, capsys):
    add = str(torch.ops.aten.add.Tensor._schema)
    # functional collectives (a new output, waited by wait_tensor) are left out; c10d's are
    # captured (tests/test_jobs.py)
    allreduce = "_c10d_functional::all_reduce(Tensor input, str reduce_op, str group_name) -> Tensor"
    record_stream = str(torch.ops.aten.record_stream.default._schema)
    fbgemm = "fbgemm::asynchronous_complete_cumsum(Tensor t_in) -> Tensor"
    trace = _trace(
        _node(2, "aten::add", add, ["Tensor(float)", "Tensor(float)", "Int"],
              [_t(10), _t(11), 1], [[8], [8], []]),
        _node(3, "_c10d_functional::all_reduce", allreduce, ["Tensor(float)", "String", "String"],
              [_t(10), "sum", "0"], [[8], [], []]),
        _node(4, "aten::record_stream", record_stream, ["Tensor(float)", "Stream"],
              [_t(10), 7], [[8], []]),
        _node(5, "triton_poi_fused_0", "", ["Tensor(float)"], [_t(10)], [[8]],
              kernel_backend="triton", kernel_file="abc.py"),
        _node(6, "torch::autograd::CppNode<SplitLookupFunction_sgd_Op>", "", [], [], []),
        _node(7, "fbgemm::asynchronous_complete_cumsum", fbgemm, ["Tensor(long int)"],
              [_t(12)], [[8]]),
        _node(8, "aten::add", add, ["Tensor(float)", "Object", "Int"],
              [_t(10), "<Object>", 1], [[8], [], []]))
    workload = capture_execution_trace(trace, source="mixed")
    kinds = {group["kind"]: group for group in workload.groups()}
    assert set(kinds) == {"collective", "stream", "triton", "autograd_node", "namespace",
                          "argument"}
    assert kinds["namespace"]["ops"] == {"fbgemm::asynchronous_complete_cumsum": 1}
    assert workload.captured_calls == 1 and workload.calls == 7
    report = workload.report()
    assert sum(g["calls"] for g in report["not_captured"]) == 6
    assert {s["kind"] for s in report["skipped"]} == set(kinds)
    lines = [line for line in workload.summary_lines() if "not captured" in line]
    assert len(lines) == 6 and all(KINDS[kind] in " ".join(lines) for kind in kinds)
    assert all(len(line) < 200 for line in lines)
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(trace))
    assert capture_main(["--from-et", str(path), "-o", str(tmp_path / "s.json"),
                         "--allow-namespace", "fbgemm", "-v"]) == 0
    captured = capsys.readouterr()
    assert "Triton kernel triton_poi_fused_0 (abc.py)" in captured.err  # the DEBUG details
    report = json.loads((tmp_path / "s.capture.json").read_text())
    assert report["allowed_namespaces"] == ["fbgemm"]
    assert "namespace" not in {g["kind"] for g in report["not_captured"]}


# --- namespaces besides aten: allowed by the run, never by the spec -------------------------

def test_allow_namespace_runs_fbgemm_ops_only_where_the_run_allows_them(tmp_path):
    pytest.importorskip("fbgemm_gpu")
    from conftest import read_results, run_cli

    schema = "fbgemm::asynchronous_complete_cumsum(Tensor t_in) -> Tensor"
    spec = {"fbgemm::asynchronous_complete_cumsum": {"config": [{
        "build": [{"args": [{"type": "str", "value": schema}]}],
        "input": [{"args": [{"type": "tensor", "dtype": "long", "shape": [16],
                             "value_range": [0, 5]}], "count": 4}]}]}}
    path = tmp_path / "fbgemm.json"
    path.write_text(json.dumps(spec))
    refused = run_cli("-c", path, "-i", "1", "--output", tmp_path / "no.json")
    assert refused.returncode == 2
    assert "pass --allow-namespace fbgemm" in refused.stderr
    out = tmp_path / "yes.json"
    allowed = run_cli("-c", path, "-i", "2", "--output", out, "--allow-namespace", "fbgemm")
    assert allowed.returncode == 0, allowed.stderr
    _, runs, _ = read_results(out)
    assert [(r["op_name"], r["status"], r["count"]) for r in runs] == [
        ("fbgemm::asynchronous_complete_cumsum", "ok", 4)]
    # a live capture takes them only where allowed too
    from param_compute.capture import capture_ops

    lengths = torch.tensor([1, 2, 3])
    with capture_ops() as refused_capture:
        torch.ops.fbgemm.asynchronous_complete_cumsum(lengths)
    assert [g["kind"] for g in refused_capture.workload.groups()] == ["namespace"]
    with capture_ops(allow_namespaces=["fbgemm"]) as allowed_capture:
        torch.ops.fbgemm.asynchronous_complete_cumsum(lengths)
    assert list(allowed_capture.spec()) == ["fbgemm::asynchronous_complete_cumsum"]


def test_run_benchmark_reports_configs_without_a_kernel_before_running(tmp_path):
    from conftest import run_cli

    schema = str(torch.ops.aten.cudnn_grid_sampler.default._schema)
    spec = {"aten::cudnn_grid_sampler": {"config": [{
        "build": [{"args": [{"type": "str", "value": schema}]}],
        "input": [{"args": [{"type": "tensor", "dtype": "float", "shape": [1, 1, 2, 2]},
                            {"type": "tensor", "dtype": "float", "shape": [1, 2, 2, 2]}],
                   "count": 2}]}]}}
    path = tmp_path / "cudnn.json"
    path.write_text(json.dumps(spec))
    result = run_cli("-c", path, "--dry-run", "--output", tmp_path / "r.json")
    assert result.returncode == 0, result.stderr
    assert "aten::cudnn_grid_sampler: no kernel on cpu (1 configs, 2 calls)" in result.stderr


def test_workload_totals_sets_replayed_time_beside_the_original(mlp_traces, tmp_path, capsys):
    from conftest import run_cli
    from param_compute.analysis.workload_totals import main as totals_main

    et_path, kineto_path = mlp_traces
    spec_path, results = tmp_path / "spec.json", tmp_path / "results.json"
    assert capture_main(["--from-et", str(et_path), "--kineto", str(kineto_path),
                         "-o", str(spec_path)]) == 0
    run = run_cli("-c", spec_path, "-i", "3", "--output", results)
    assert run.returncode == 0, run.stderr
    records = [json.loads(line) for line in results.read_text().splitlines()
               if '"op_name"' in line]
    assert all(r["original_us"]["cpu"] > 0 for r in records)
    capsys.readouterr()
    assert totals_main([str(results)]) == 0
    table = capsys.readouterr().out
    largest, compared = table.split("replay/orig", 1)  # the largest configs, then per op
    assert "largest configs" in largest and "4·3×8·8×4·beta=1·alpha=1 f32" in largest
    addmm = next(line for line in compared.splitlines() if line.startswith("aten::addmm"))
    original = next(r["original_us"]["cpu"] for r in records if r["op_name"] == "aten::addmm")
    assert f"{original / 1e3:.3f}" in addmm and addmm.rstrip().endswith("x")
    assert totals_main([str(tmp_path / "missing.json")]) == 2
    from param_compute.results.file import read_results
    from param_compute.analysis.report import build_report

    html, _ = build_report(read_results(results))
    where = html[html.index("<h2>Where the time goes</h2>"):html.index("Largest configs")]
    assert "replayed / original" in where and "<td>aten::addmm</td>" in where


def test_param_form_notes_params_remaining_limits():
    from param_compute.capture.param_form import param_form_spec

    def entry(schema, args):
        return {"config": [{"build": [{"args": [{"type": "str", "value": schema}]}],
                            "input": [{"args": args, "count": 2,
                                       "original_us": {"cpu": 1.5, "device": None}}]}]}

    floats = {"type": "tensor", "dtype": "float", "shape": [2], "requires_grad": False}
    bytes_ = {**floats, "dtype": "uint8"}
    pair = {"type": "genericlist", "value": [floats, floats]}
    spec = {"aten::cat": entry(str(torch.ops.aten.cat.default._schema), [pair]),
            "aten::stack": entry(str(torch.ops.aten.stack.default._schema), [pair]),
            "aten::unbind": entry(str(torch.ops.aten.unbind.int._schema), [floats]),
            "aten::abs": entry(str(torch.ops.aten.abs.default._schema), [bytes_]),
            "aten::neg": entry(str(torch.ops.aten.neg.default._schema), [floats])}
    rewritten, notes = param_form_spec(spec)
    reasons = {(n.op, n.reason) for n in notes if n.fails}
    assert ("aten::cat", "PARAM skips aten::cat: it is on PARAM's list of unsupported ops") \
        in reasons
    assert ("aten::stack", "tensors: PARAM's graph declares a Tensor[] argument as a single "
            "Tensor") in reasons
    assert any(op == "aten::unbind" and "(a -> *)" in why for op, why in reasons)
    assert any(op == "aten::abs" and "uint8" in why for op, why in reasons)
    assert not [n for n in notes if n.op == "aten::neg"]
    assert rewritten["aten::neg"]["config"][0]["input"][0]["original_us"] == {"cpu": 1.5,
                                                                             "device": None}
