"""Capturing production op configs (execution traces, live dispatch) and replaying them."""

from __future__ import annotations

import io
import json
import textwrap
import time
from pathlib import Path

import pytest
import torch
from rich.console import Console
from torch import nn
from torch.profiler import ExecutionTraceObserver

import param_compute
from conftest import read_results, run_cli, simple_op, tensor
from param_replay import param_replay
from param_compute.capture import (CapturedWorkload, capture_execution_trace, capture_ops,
                                   report_path)
from param_compute.capture.param_form import (ENUM_CODES, noted_configs, param_form_spec,
                                              to_param_form)
from param_compute.capture.schema_args import is_view_op, schema_arguments
from param_compute.results.sinks.console import ConsoleReporter
from param_compute.data.generator import materialize
from param_compute.results.sinks.base import RunSummary
from param_compute.errors import SpecError
from param_compute.plan.runplan import PlannedRun
from param_compute.results.records import PassResult, RunRecord
from param_compute.runtime.toolchain import Toolchain
from param_compute.operators.adapters import AtenOperator
from param_compute.results.totals import WorkloadTotals

REPLAY = dict(warmup=1, iteration=2, throughput=False)


# --- models built here, forward and backward on CPU ---------------------------------------

class ConvNet(nn.Module):
    def __init__(self, channels=4, classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.MaxPool2d(2), nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(2 * channels, classes)

    def forward(self, images, labels):
        logits = self.head(self.features(images).flatten(1))
        return nn.functional.cross_entropy(logits, labels)


class Encoder(nn.Module):
    """Token embedding, one TransformerEncoderLayer, a vocabulary head and cross-entropy."""

    def __init__(self, vocab=50, d_model=16, heads=2, ff=32):
        super().__init__()
        self.embedding = nn.Embedding(vocab, d_model)
        self.layer = nn.TransformerEncoderLayer(d_model, heads, ff, batch_first=True)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens, targets):
        logits = self.head(self.layer(self.embedding(tokens)))
        return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def _models():
    torch.manual_seed(0)
    return {
        "encoder": (Encoder(), (torch.randint(0, 50, (2, 6)), torch.randint(0, 50, (2, 6)))),
        "convnet": (ConvNet(), (torch.randn(2, 3, 8, 8), torch.randint(0, 10, (2,)))),
    }


def _step(model, inputs):
    def step():
        model(*inputs).backward()
    return step


def _execution_trace(function, path: Path) -> Path:
    observer = ExecutionTraceObserver()
    observer.register_callback(str(path))
    observer.start()
    try:
        function()
    finally:
        observer.stop()
        observer.unregister_callback()
    return path


def _replay(spec, **options):
    result = param_compute.run(spec, **{**REPLAY, **options})
    totals = WorkloadTotals()
    for record in result.records:
        totals.add_json(record)
    return result, totals


def _eager_ms(step, repeat=5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2]


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """Each model captured from an execution trace and live, after two warm-up steps."""
    folder = tmp_path_factory.mktemp("captured")
    out = {}
    for name, (model, inputs) in _models().items():
        step = _step(model, inputs)
        step(), step()
        trace = _execution_trace(step, folder / f"{name}_et.json")
        with capture_ops() as live:
            step()
        out[name] = {"et": capture_execution_trace(trace), "live": live.workload,
                     "step": step}
    return out


# --- the acceptance checks ------------------------------------------------------------------

@pytest.mark.parametrize("source", ["et", "live"])
@pytest.mark.parametrize("model", ["encoder", "convnet"])
def test_captured_models_replay_at_least_95_percent(captured, model, source, capsys):
    workload = captured[model][source]
    spec = workload.spec()
    Toolchain.start().validate(spec, f"{model}-{source}")  # raises SpecError if invalid
    assert workload.calls > 30 and workload.configs > 10
    assert workload.captured_calls + sum(s.count for s in workload.skipped) == workload.calls
    for skipped in workload.skipped:
        assert skipped.reason and skipped.op and skipped.count > 0

    result, totals = _replay(spec)
    ok = [r for r in result.records if r["status"] == "ok"]
    failed = [f"{r['op_name']}: {r['error']['message']}" for r in result.records
              if r["status"] != "ok"]
    skipped_configs = len(workload.skipped)  # each reason counts at least one config
    assert len(ok) >= 0.95 * (len(result.records) + skipped_configs), failed
    assert all("count" in r for r in result.records)
    assert totals.calls + totals.failed_calls == workload.captured_calls
    with capsys.disabled():
        eager = _eager_ms(captured[model]["step"])
        print(f"\n  {model}/{source}: {len(ok)}/{len(result.records)} configs replayed, "
              f"{workload.captured_calls} calls, skipped {[s.to_json() for s in workload.skipped]}"
              f"; replayed total {totals.total_ms:.3f} ms vs eager step {eager:.3f} ms "
              "(tiny models: overhead-bound; see bench/capture_fidelity.py)")


def test_both_paths_see_the_compute_ops_once(captured):
    for model, expected in (("encoder", {"aten::addmm", "aten::mm", "aten::bmm",
                                         "aten::embedding", "aten::embedding_dense_backward",
                                         "aten::nll_loss_forward", "aten::nll_loss_backward",
                                         "aten::native_layer_norm_backward"}),
                            ("convnet", {"aten::convolution", "aten::convolution_backward",
                                         "aten::max_pool2d_with_indices",
                                         "aten::max_pool2d_with_indices_backward",
                                         "aten::native_batch_norm_backward"})):
        for source in ("et", "live"):
            spec = captured[model][source].spec()
            assert expected <= set(spec), (model, source, expected - set(spec))
            # composite wrappers are not replayed on top of what they call
            assert not {"aten::linear", "aten::matmul", "aten::cross_entropy_loss",
                        "aten::dropout"} & set(spec)
        et_counts = _counts(captured[model]["et"].spec())
        live_counts = _counts(captured[model]["live"].spec())
        for op in expected:
            assert et_counts[op] == live_counts[op], op


def _counts(spec):
    return {op: sum(i["count"] for c in entry["config"] for i in c["input"])
            for op, entry in spec.items()}


def test_index_tensors_get_in_range_value_ranges(captured):
    def ranges(spec, op):
        return [a["value_range"] for c in spec[op]["config"] for i in c["input"]
                for a in i["args"] if a.get("type") == "tensor" and "value_range" in a]

    for source in ("et", "live"):
        encoder = captured["encoder"][source].spec()
        for op in ("aten::embedding", "aten::nll_loss_forward", "aten::nll_loss_backward",
                   "aten::embedding_dense_backward"):
            [(low, high)] = ranges(encoder, op)
            assert 0 <= low <= high <= 49, (source, op)
        convnet = captured["convnet"][source].spec()
        # max-pool indices lie in their windows (kernel 2 over an 8x8 plane), not a range
        [config] = convnet["aten::max_pool2d_with_indices_backward"]["config"]
        [indices] = [a for a in config["input"][0]["args"] if "pool_window" in a]
        assert indices["pool_window"] == {"input": [8, 8], "kernel": [2, 2], "stride": [2, 2],
                                          "padding": [0, 0], "dilation": [1, 1]}
        assert "value_range" not in indices
        [(low, high)] = ranges(convnet, "aten::nll_loss_forward")
        assert 0 <= low <= high <= 9
    # the trace has no values: ranges come from shapes; a live capture records min and max
    assert ranges(captured["encoder"]["et"].spec(), "aten::embedding") == [[0, 49]]


def test_skip_views_drops_view_bookkeeping(captured, tmp_path):
    trace = _execution_trace(captured["encoder"]["step"], tmp_path / "et.json")
    full = capture_execution_trace(trace)
    lean = capture_execution_trace(trace, skip_views=True)
    assert lean.views_dropped > 0
    assert lean.captured_calls + lean.views_dropped == full.captured_calls
    for op, entry in lean.spec().items():
        for config in entry["config"]:
            assert not is_view_op(config["build"][0]["args"][0]["value"]), op
    assert {"aten::view", "aten::t", "aten::transpose"} <= set(full.spec())
    assert not {"aten::view", "aten::t", "aten::transpose"} & set(lean.spec())


# --- argument fidelity ----------------------------------------------------------------------

def _fidelity_calls():
    torch.manual_seed(0)
    a, b = torch.randn(6, 4), torch.randn(6, 5)
    table = torch.randn(20, 3)
    out = torch.empty(4, 5)
    image = torch.randn(1, 3, 4, 4)
    acc = torch.zeros(6, 4)

    def run():
        torch.mm(a.t(), b, out=out)                                   # out=, non-contiguous
        acc.add_(a, alpha=0.5)                                        # in-place, alpha
        torch.index_select(table, 0, torch.tensor([3, 7, 19]))        # indices
        torch.gather(table, 1, torch.tensor([[0, 2], [1, 1]]))
        torch.zeros(5, 3).scatter_(0, torch.tensor([[4, 0, 2]]), 1.0)
        nn.functional.embedding(torch.tensor([[1, 19], [0, 5]]), table)
        nn.functional.cross_entropy(torch.randn(3, 7), torch.tensor([6, 0, 2]))
        torch.empty(2, 3, dtype=torch.float64)                        # dtype / layout args
        image.to(memory_format=torch.channels_last)                   # memory_format
        a.masked_fill(a > 0, float("-inf"))                           # non-finite scalar
        torch.sum(a, dim=[0], keepdim=True, dtype=torch.float64)      # list, bool, dtype
        torch.arange(6, device="cpu")                                 # device
    return run


def test_live_capture_keeps_argument_fidelity_and_replays():
    with capture_ops() as cap:
        _fidelity_calls()()
    spec = cap.spec()
    Toolchain.start().validate(spec, "fidelity")
    [mm] = spec["aten::mm"]["config"]
    assert mm["build"][0]["args"][0]["value"].startswith("aten::mm.out(")
    [mm_input] = mm["input"]
    assert mm_input["args"][0]["stride"] == [1, 4]              # a.t() kept non-contiguous
    assert mm_input["kwargs"]["out"]["shape"] == [4, 5]
    [add_] = spec["aten::add_"]["config"]
    assert add_["input"][0]["kwargs"]["alpha"] == {"type": "float", "value": 0.5}
    [index_select] = spec["aten::index_select"]["config"][0]["input"]
    assert index_select["args"][2]["value_range"] == [3, 19]
    [masked] = spec["aten::masked_fill"]["config"][0]["input"]
    assert masked["args"][2] == {"type": "float", "value": "-inf"}
    text = json.dumps(spec)
    assert '"type": "memory_format", "value": "channels_last"' in text
    assert '"type": "dtype", "value": "double"' in text
    assert '"type": "device", "value": "cpu", "run_device": true' in text  # follows -d
    assert not cap.skipped
    result, _ = _replay(spec, iteration=1)
    assert [r["op_name"] for r in result.records if r["status"] != "ok"] == []


def test_execution_trace_keeps_argument_fidelity_and_replays(tmp_path):
    trace = _execution_trace(_fidelity_calls(), tmp_path / "et.json")
    workload = capture_execution_trace(trace)
    spec = workload.spec()
    Toolchain.start().validate(spec, "fidelity-et")
    [index_select] = spec["aten::index_select"]["config"][0]["input"]
    assert index_select["args"][2]["value_range"] == [0, 19]   # from the table's rows
    [gather] = spec["aten::gather"]["config"][0]["input"]
    assert gather["args"][2]["value_range"] == [0, 2]          # along dim 1 of [20, 3]
    scatter = spec["aten::scatter_"]["config"][0]["input"][0]
    assert scatter["args"][2]["value_range"] == [0, 4]
    mm = spec["aten::mm"]["config"][0]
    assert mm["input"][0]["args"][0]["stride"] == [1, 4]
    assert "out" in mm["input"][0]["kwargs"]
    text = json.dumps(spec)
    assert '"type": "memory_format"' in text and '"type": "dtype", "value": "double"' in text
    assert '"value": "-inf"' in text
    result, _ = _replay(spec, iteration=1)
    assert [r["op_name"] for r in result.records if r["status"] != "ok"] == []


def test_unreplayable_calls_are_skipped_with_their_reason():
    weight = torch.randn(10, 3)
    generator = torch.Generator().manual_seed(1)
    sparse = torch.randn(4, 4).to_sparse()
    with capture_ops() as cap:
        nn.functional.embedding_bag(torch.tensor([1, 2, 4, 5]), weight, torch.tensor([0, 2]))
        torch.randn(3, generator=generator)
        sparse.to_dense()
    reasons = {s.op: s.reason for s in cap.skipped}
    assert "aten::_embedding_bag_forward_only" not in reasons  # replayable: bags from shapes
    assert "Generator" in reasons["aten::randn.generator"]
    assert "sparse_coo tensor" in reasons["aten::_to_dense"]
    report = cap.report()
    assert report["skipped_calls"] == sum(s["count"] for s in report["skipped"]) >= 2
    assert report["calls"] == report["captured_calls"] + report["skipped_calls"]


def test_identical_calls_fold_into_one_config_with_a_count():
    x, y = torch.randn(3, 3), torch.randn(3, 3)
    with capture_ops() as cap:
        for _ in range(4):
            torch.add(x, y)
        torch.add(x, y, alpha=2)
        torch.index_select(x, 0, torch.tensor([0]))
        torch.index_select(x, 0, torch.tensor([2]))
    spec = cap.spec()
    [add] = spec["aten::add"]["config"]
    assert [i["count"] for i in add["input"]] == [4, 1]
    [index_select] = spec["aten::index_select"]["config"][0]["input"]  # ranges merge
    assert index_select["count"] == 2 and index_select["args"][2]["value_range"] == [0, 2]


# --- spec format extensions -----------------------------------------------------------------

def test_extended_data_specs_validate_and_generate():
    strided = tensor(4, 3, stride=[1, 4], requires_grad=False)
    offset = tensor(2, 2, stride=[0, 1], storage_offset=5, dtype="long", value_range=[1, 3])
    spec = simple_op("aten::add", strided, strided,
                     builds=[{"args": [{"type": "str", "value": str(
                         torch.ops.aten.add.Tensor._schema)}]}])
    spec["aten::add"]["config"][0]["input"][0]["count"] = 7
    spec.update(simple_op("aten::empty_like", tensor(1, 3, 4, 4), kwargs={
        "layout": {"type": "layout", "value": "strided"},
        "memory_format": {"type": "memory_format", "value": "channels_last"}}))
    spec.update(simple_op("torch.clamp", tensor(3), {"type": "float", "value": "-inf"},
                          {"type": "double", "value": "inf"}))
    spec.update(simple_op("torch.add", offset, tensor(2, 2, dtype="long", device="cpu")))
    result = param_compute.run(spec, warmup=0, iteration=1)
    assert [r["status"] for r in result.records] == ["ok"] * 4
    assert result.records[0]["count"] == 7 and "count" not in result.records[1]

    t = materialize(strided, "cpu")
    assert t.stride() == (1, 4) and not t.is_contiguous() and not t.requires_grad
    t = materialize(offset, "cpu")
    assert t.stride() == (0, 1) and t.storage_offset() == 5
    assert int(t.min()) >= 1 and int(t.max()) <= 3
    assert materialize({"type": "layout", "value": "sparse_coo"}, "cpu") is torch.sparse_coo
    assert materialize({"type": "float", "value": "nan"}, "cpu") != \
        materialize({"type": "float", "value": "nan"}, "cpu")
    ints = materialize(tensor(1000, dtype="long", value_range=[5, 9]), "cpu")
    assert int(ints.min()) == 5 and int(ints.max()) == 9  # value_range is inclusive


def test_captured_device_args_follow_the_run_device():
    captured = {"type": "device", "value": "cuda:0", "run_device": True}
    assert materialize(captured, "cpu") == torch.device("cpu")
    assert materialize(captured, "cuda:1") == torch.device("cuda:1")
    assert materialize({"type": "device", "value": "cuda:0"}, "cpu") == torch.device("cuda:0")
    spec = simple_op("torch.zeros", {"type": "int", "value": 3},
                     kwargs={"device": {"type": "device", "value": "cuda:3", "run_device": True}})
    [record] = param_compute.run(spec, iteration=1).records  # a CPU machine runs it on cpu
    assert record["status"] == "ok"
    workload = CapturedWorkload("a CUDA capture")
    on_gpu = {**tensor(4), "device": "cuda:0"}
    zeros = "aten::zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, " \
            "Device? device=None, bool? pin_memory=None) -> Tensor"
    size = {"type": "genericlist", "value": [{"type": "int", "value": 4}]}
    workload.add("aten::relu(Tensor self) -> Tensor", [on_gpu])
    for name in ("cuda", "cuda:0", "cuda:1", "cpu"):
        workload.add(zeros, [size], {"device": {"type": "device", "value": name}})
    out = workload.spec()
    assert out["aten::relu"]["config"][0]["input"][0]["args"] == [tensor(4)]  # main device
    devices = [c["kwargs"]["device"] for c in out["aten::zeros"]["config"][0]["input"]]
    assert [d.get("run_device", False) for d in devices] == [True, True, False, False]


def test_extended_data_specs_are_checked():
    bad = simple_op("torch.add", tensor(4, 3, stride=[1]), tensor(3, device="gpu:x"),
                    kwargs={"alpha": {"type": "float", "value": "infinity"},
                            "x": {"type": "memory_format", "value": "channel_last"},
                            "y": {"type": "layout", "value": 3}})
    counted = simple_op("torch.mul", tensor(2), tensor(2))
    counted["torch.mul"]["config"][0]["input"][0]["count"] = 0
    for spec, messages in ((bad, ("stride has 1 entries but the shape has 2 dims",
                                  "not a device: 'gpu:x'", '"inf", "-inf", "nan"',
                                  "did you mean 'channels_last'?", "unknown layout 3")),
                           (counted, ("count: must be >= 1",))):
        with pytest.raises(SpecError) as error:
            param_compute.run(spec, dry_run=True)
        for expected in messages:
            assert expected in str(error.value), expected


def test_count_is_carried_by_both_iterators_into_records():
    spec = simple_op("torch.add", tensor(2), tensor(2))
    spec["torch.add"]["config"][0]["input"][0]["count"] = 3
    ranged = simple_op("torch.mul", {**tensor(2), "shape": [[1, 2]], "__range__": ["shape"]},
                       tensor(1), iterator="RangeConfigIterator")
    ranged["torch.mul"]["config"][0]["input"][0]["count"] = 5
    spec.update(ranged)
    records = param_compute.run(spec, dry_run=True).records
    assert [(r["op_name"], r["count"]) for r in records] == [
        ("torch.add", 3), ("torch.mul", 5), ("torch.mul", 5)]
    assert records[1]["config"]["input"]["count"] == 5


def test_internal_aten_ops_resolve_but_dunder_and_side_effects_do_not():
    ok = simple_op("aten::_softmax", tensor(2, 3), {"type": "int", "value": 1},
                   {"type": "bool", "value": False})
    assert param_compute.run(ok, iteration=1).records[0]["status"] == "ok"
    for name in ("aten::__and__", "aten::_print"):
        with pytest.raises(SpecError, match="refused"):
            param_compute.run(simple_op(name, tensor(2)), dry_run=True)


def test_schema_arguments_read_declared_enum_types():
    args = schema_arguments(str(torch.ops.aten.empty_like.default._schema))
    assert [(a.name, a.kwarg_only, a.enum_kind) for a in args] == [
        ("self", False, None), ("dtype", True, "dtype"), ("layout", True, "layout"),
        ("device", True, None), ("pin_memory", True, None),
        ("memory_format", True, "memory_format")]
    assert is_view_op(str(torch.ops.aten.split.Tensor._schema))
    assert not is_view_op(str(torch.ops.aten.add_.Tensor._schema))


# --- console and command line ---------------------------------------------------------------

def test_console_shows_where_the_time_goes_for_counted_records():
    buffer = io.StringIO()
    reporter = ConsoleReporter(None, progress=False,
                               console=Console(file=buffer, width=160, force_terminal=False))
    reporter.start(3)
    for op, median, count in (("aten::mm", 1.0, 3), ("aten::add", 0.5, 2), ("aten::mm", 2.0, 1)):
        run = PlannedRun(op, 0, 0, "0", None, str(count), {"args": [], "count": count})
        reporter.run_done(run, RunRecord(op, run.id, run.config(), passes=[
            PassResult("forward", [median], [median, median])]))
    reporter.finish(RunSummary(ok=3))
    text = buffer.getvalue()
    assert "where the time goes" in text and "top operators by total time" in text
    assert "replayed workload: 6.000 ms" in text
    mm_row = next(line for line in text.splitlines() if "aten::mm" in line and "83.3%" in line)
    assert "5.000 ms" in mm_row  # 1.0 x 3 + 2.0 x 1 of the 6.0 ms whole


def test_cli_from_execution_trace_then_run_benchmark(captured, tmp_path):
    trace = _execution_trace(captured["convnet"]["step"], tmp_path / "trace.json")
    spec_path = tmp_path / "spec.json"
    result = run_cli("--from-et", trace, "-o", spec_path, "--skip-views",
                     module="param_compute.cli.capture")
    assert result.returncode == 0, result.stderr
    assert "captured" in result.stdout and spec_path.exists()
    report = json.loads(report_path(spec_path).read_text())
    assert report["views_dropped"] > 0 and report["configs"] > 5
    out = tmp_path / "results.json"
    result = run_cli("-c", spec_path, "--output", out, "-i", "2")
    assert result.returncode == 0, result.stderr
    _, runs, finish = read_results(out)
    assert finish["runs_failed"] == 0 and all(r["count"] >= 1 for r in runs)
    assert sum(r["count"] for r in runs) == report["captured_calls"]
    assert "top operators by total time" in result.stdout


def test_cli_run_captures_a_users_function(tmp_path):
    (tmp_path / "user_step.py").write_text(textwrap.dedent("""
        import torch
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 1))
        x = torch.randn(4, 8)

        def step():
            model(x).sum().backward()
    """))
    spec_path = tmp_path / "out.json"
    result = run_cli("--run", "user_step:step", "-o", spec_path, "--steps", "2",
                     module="param_compute.cli.capture", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    spec = json.loads(spec_path.read_text())
    settings = spec.pop("__capture__")  # not an operator: the settings the step ran with
    assert settings["device"] == "cpu" and settings["source"] == "--run user_step:step"
    assert isinstance(settings["num_threads"], int) and settings["num_threads"] >= 1
    assert _counts(spec)["aten::addmm"] == 4  # two layers, two captured steps
    assert {"aten::threshold_backward", "aten::mm"} <= set(spec)
    bad = run_cli("--run", "user_step:nothing", "-o", spec_path, module="param_compute.cli.capture",
                  cwd=tmp_path)
    assert bad.returncode == 2 and "nothing" in bad.stderr


def test_captured_spec_keeps_params_aten_form(captured, shared_configs):
    """Same shape as PARAM's aten_ops.json: op -> generators + configs whose build is the
    schema string; input arg-spec-lists only add ``count`` (PARAM ignores unknown keys)."""
    param = json.loads((shared_configs / "aten_ops.json").read_text())
    param_keys = {k for entry in param.values() for k in entry}
    spec = captured["encoder"]["live"].spec()
    for op, entry in spec.items():
        assert op.startswith("aten::") and "." not in op
        assert set(entry) <= param_keys | {"config"}
        for config in entry["config"]:
            [build] = config["build"]
            [schema] = build["args"]
            assert schema["type"] == "str" and schema["value"].startswith(op)
            for arg_spec_list in config["input"]:
                assert set(arg_spec_list) <= {"args", "kwargs", "count"}


# --- --param-form: what PARAM's own replay runs ---------------------------------------------

@pytest.mark.parametrize("source", ["et", "live"])
@pytest.mark.parametrize("model", ["encoder", "convnet"])
def test_param_form_runs_under_params_replay_and_notes_every_exception(captured, model, source):
    workload = captured[model][source]
    spec, notes = param_form_spec(workload.spec())
    Toolchain.start().validate(spec, f"{model}-{source}-param")
    failing = noted_configs(notes, fails=True)
    ran, failed = param_replay(spec, skip=failing)
    assert failed == []  # every config PARAM can't run is noted, with the reason
    assert ran + len(failing) == workload.configs and ran >= 0.85 * workload.configs
    for entry in spec.values():
        for config in entry["config"]:
            declared = schema_arguments(config["build"][0]["args"][0]["value"])
            for arg_spec_list in config["input"]:
                assert set(arg_spec_list) <= {"args", "count"}
                assert len(arg_spec_list["args"]) == len(declared)
    result, _ = _replay(spec, iteration=1)  # and param_compute replays it all
    assert [r["op_name"] for r in result.records if r["status"] != "ok"] == []
    assert sum(r["count"] for r in result.records) == workload.captured_calls


def test_param_form_writes_every_argument_with_enum_codes():
    args, reasons = to_param_form(
        "aten::_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, "
        "Device? device=None, bool? pin_memory=None, bool non_blocking=False, "
        "MemoryFormat? memory_format=None) -> Tensor",
        [tensor(2, 3)], {"dtype": {"type": "dtype", "value": "bfloat16"},
                         "memory_format": {"type": "memory_format", "value": "channels_last"}})
    assert args == [tensor(2, 3), {"type": "int", "value": 15}, {"type": "none"},
                    {"type": "none"}, {"type": "none"}, {"type": "bool", "value": False},
                    {"type": "int", "value": 2}]
    assert reasons == []
    args, _ = to_param_form(
        "aten::randint(SymInt high, SymInt[] size, *, ScalarType? dtype=long, "
        "Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
        [{"type": "int", "value": 5}, {"type": "genericlist", "value": []}], {})
    assert args[2] == {"type": "int", "value": 4}  # the named default, as its code
    args, _ = to_param_form("aten::mse_loss(Tensor self, Tensor target, int reduction=Mean) "
                            "-> Tensor", [tensor(3), tensor(3)], {})
    assert args[2] == {"type": "int", "value": 1}
    args, _ = to_param_form("aten::add_.Tensor(Tensor(a!) self, Tensor other, *, "
                            "Scalar alpha=1) -> Tensor(a!)",
                            [tensor(3), {"type": "int", "value": 1}], {})
    assert args[1] == {"type": "tensor", "dtype": "long", "shape": [], "requires_grad": False}
    assert args[2] == {"type": "int", "value": 1}
    with pytest.raises(ValueError, match="not in the schema"):
        to_param_form("aten::relu(Tensor self) -> Tensor", [tensor(3)],
                      {"inplace": {"type": "bool", "value": True}})
    odd = {"aten::relu": {"config": [{
        "build": [{"args": [{"type": "str", "value": "aten::relu(Tensor self) -> Tensor"}]}],
        "input": [{"args": [tensor(3)], "count": 2}, {"args": []}]}]}}
    spec, notes = param_form_spec(odd)  # a config it can't rewrite is kept, with a note
    assert spec["aten::relu"]["config"][0]["input"] == [{"args": [tensor(3)], "count": 2},
                                                         {"args": []}]
    assert [(n.input_index, n.fails) for n in notes] == [(1, True)]
    assert notes[0].reason == ("not written in PARAM's form: no value for self, which has no "
                               "default")


@pytest.mark.parametrize("kind,name", [(kind, name) for kind, codes in ENUM_CODES.items()
                                       for name in codes])
def test_enum_codes_are_the_ones_torch_uses(kind, name):
    code = ENUM_CODES[kind][name]
    if kind == "dtype":
        want = materialize({"type": "dtype", "value": name}, "cpu")
        assert torch.ops.aten.empty.memory_format([1], dtype=code).dtype == want
    elif kind == "memory_format":
        image = torch.empty(1, 2, 3, 4, 5)[:, :, :, :, 0] if name != "channels_last_3d" \
            else torch.empty(1, 2, 3, 4, 5)
        want = materialize({"type": "memory_format", "value": name}, "cpu")
        got = torch.ops.aten.empty_like.default(image, memory_format=code)
        assert got.stride() == torch.empty_like(image, memory_format=want).stride()
    else:
        want = materialize({"type": "layout", "value": name}, "cpu")
        try:
            assert torch.ops.aten.empty.memory_format([2, 2], layout=code).layout == want
        except RuntimeError as exc:  # block layouts can't be made empty; torch names the one
            assert name.title().replace("_", "") in str(exc)  # it got: "... got SparseBsr"


def test_param_form_notes_what_param_would_not_reproduce():
    schema = ("aten::embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, "
              "bool scale_grad_by_freq=False, bool sparse=False) -> Tensor")
    indices = {**tensor(4, dtype="long"), "value_range": [0, 19]}
    _, reasons = to_param_form(schema, [tensor(20, 3), indices], {})
    assert reasons == [("indices: indices in [0, 19], but PARAM fills integer tensors with "
                        "values in [-10, 10)", True)]
    counter = {**tensor(dtype="long"), "shape": [], "value_range": [0, 0]}
    _, reasons = to_param_form("aten::add_.Tensor(Tensor(a!) self, Tensor other, *, "
                               "Scalar alpha=1) -> Tensor(a!)",
                               [counter, {"type": "int", "value": 1}], {})
    assert reasons == []  # a counter's range does not matter: not an index
    strided = {**tensor(4, 6), "stride": [1, 4]}
    _, reasons = to_param_form("aten::masked_fill.Scalar(Tensor self, Tensor mask, "
                               "Scalar value) -> Tensor",
                               [strided, tensor(4, 6, dtype="bool"),
                                {"type": "float", "value": "-inf"}], {})
    assert reasons == [("self: PARAM makes a contiguous tensor, not the captured strided view",
                        False), ("value: PARAM cannot make the float -inf", True)]
    _, reasons = to_param_form("aten::view_as_real(Tensor(a) self) -> Tensor(a)",
                               [tensor(3, dtype="complex64")], {})
    assert reasons == [("self: PARAM makes no complex64 tensors", True)]
    _, reasons = to_param_form("aten::foo(Tensor self, int[2] stride=[1, 1]) -> Tensor",
                               [tensor(3)], {})
    assert reasons == [("stride: PARAM splits the schema's argument list at every comma, "
                        "which breaks the default [1, 1]", True)]


def test_aten_binding_drops_none_keywords_whose_default_is_none():
    operator = AtenOperator("aten::_to_copy")
    operator.build("aten::_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, "
                   "Device? device=None, bool? pin_memory=None, bool non_blocking=False, "
                   "MemoryFormat? memory_format=None) -> Tensor")
    x = torch.ones(2)
    call = operator.bind_forward([x, 7, None, None, None, False, None], {})
    assert call.args == (x,) and call.keywords == {"dtype": 7, "non_blocking": False}
    assert call().dtype == torch.float64


def test_cli_param_form_reports_its_notes(tmp_path):
    (tmp_path / "lookup_step.py").write_text(textwrap.dedent("""
        import torch
        table = torch.nn.Embedding(20, 4)
        tokens = torch.tensor([[1, 19], [0, 5]])

        def step():
            table(tokens).to(torch.float64).sum().backward()
    """))
    spec_path = tmp_path / "out.json"
    result = run_cli("--run", "lookup_step:step", "-o", spec_path, "--param-form",
                     module="param_compute.cli.capture", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    spec = json.loads(spec_path.read_text())
    to_copy = spec["aten::_to_copy"]["config"][0]["input"]  # float64 forward, float32 back
    assert [c["args"][1] for c in to_copy] == [{"type": "int", "value": 7},
                                               {"type": "int", "value": 6}]
    assert all(len(c["args"]) == 7 and "kwargs" not in c for c in to_copy)
    report = json.loads(report_path(spec_path).read_text())
    notes = report["param_form"]["notes"]
    embedding, signs = sorted((n for n in notes if n["op"] == "aten::embedding"),
                              key=lambda n: not n["fails"])
    assert embedding["fails"] and "indices in [0, 19]" in embedding["reason"]
    assert not signs["fails"] and signs["reason"].startswith(  # the table's normal values
        "weight: PARAM fills floating tensors with ordinary values in [0, 1), not the "
        "captured share of zeros, subnormals and negatives")
    failing = report["param_form"]["configs_param_fails_on"]
    assert failing == len({(n["op"], n["schema"], n["input"]) for n in notes if n["fails"]}) >= 1
    configs = report["configs"]
    assert (f"PARAM form: PARAM runs {configs - failing} of {configs} configs "
            f"({report['param_form']['configs_param_runs_differently']} not exactly as "
            f"captured), fails on {failing}") in result.stdout
    assert "fails: aten::embedding input 0: indices: indices in [0, 19]" in result.stdout
    out = tmp_path / "results.json"
    assert run_cli("-c", spec_path, "--output", out, "-i", "2").returncode == 0
