"""PARAM's command-line flags: --version, log levels, CUPTI counters, bare --cuda-l2-cache,
--cuda-graph off CUDA, -i 0."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from conftest import EXAMPLES
from param_compute.cli.run_benchmark import main as run_benchmark
from param_compute.profiling import cupti
from param_compute.profiling.traces import profiled

SIMPLE_ADD = EXAMPLES / "simple_add.json"


def _run(tmp_path, *flags):
    out = tmp_path / "out.json"
    status = run_benchmark(["-c", str(SIMPLE_ADD), "--output", str(out), "--no-progress", *flags])
    lines = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return status, lines


def test_version(capsys):
    from param_compute.lib import __version__

    assert run_benchmark(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"param_compute {__version__}"


@pytest.mark.parametrize("level", ["debug", "Warning", "INFO", "critical"])
def test_log_level_in_any_case(tmp_path, level):
    status, lines = _run(tmp_path, "-l", level, "--dry-run")
    assert status == 0 and lines[0]["run_options"]["cmd_args"]["log_level"] == level.upper()


def test_bare_cuda_l2_cache_means_on(tmp_path):
    _, lines = _run(tmp_path, "--cuda-l2-cache", "--dry-run")
    assert lines[0]["run_options"]["cuda_l2_cache"] is True
    _, lines = _run(tmp_path, "--dry-run")
    assert lines[0]["run_options"]["cuda_l2_cache"] is False  # ours: flushed by default


def test_cuda_graph_off_cuda_warns_and_runs_without(tmp_path, capsys):
    status, lines = _run(tmp_path, "--cuda-graph")
    assert status == 0 and lines[1]["status"] == "ok"
    assert lines[0]["run_options"]["cuda_graph"] is False
    assert "--cuda-graph needs a CUDA device; running on cpu without it" in capsys.readouterr().err


def test_zero_iterations_is_an_empty_measurement(tmp_path):
    status, lines = _run(tmp_path, "-i", "0", "-w", "2")
    assert status == 0
    forward = lines[1]["metric"]["forward"]
    assert forward["measure.time"] == [] and forward["measure.gpu.memory"] == []
    assert len(forward["warmup.time"]) == 2 and lines[1]["status"] == "ok"
    assert run_benchmark(["-c", str(SIMPLE_ADD), "-i", "-1", "--dry-run"]) == 2
    assert run_benchmark(["-c", str(SIMPLE_ADD), "-i", "0", "--min-time", "1", "--dry-run"]) == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU fallback")
def test_cupti_profiler_off_cuda_warns_and_runs_on(tmp_path, capsys):
    status, lines = _run(tmp_path, "--cupti-profiler", "--cupti-profiler-metrics",
                         "kineto__cuda_core_flops,kineto__tensor_core_insts",
                         "--cupti-profiler-measure-per-kernel")
    assert status == 0 and lines[1]["status"] == "ok"
    assert "--cupti-profiler needs a CUDA device" in capsys.readouterr().err
    assert not list(tmp_path.glob("*_cupti.json")) and not list(tmp_path.glob("*_trace.json"))
    assert lines[0]["run_options"]["cmd_args"]["cupti_profiler_measure_per_kernel"] is True


def test_cupti_settings_and_experimental_config():
    args = SimpleNamespace(cupti_profiler=True, cupti_profiler_metrics=" a, b ,",
                           cupti_profiler_measure_per_kernel=True)
    settings = cupti.settings_from_args(args, "cuda:0")
    assert settings == cupti.CuptiSettings(("a", "b"), True)
    made = settings.experimental_config(lambda **kwargs: kwargs)
    assert made == {"profiler_metrics": ["a", "b"], "profiler_measure_per_kernel": True}
    real = settings.experimental_config()
    assert isinstance(real, torch.profiler._ExperimentalConfig)
    assert cupti.settings_from_args(SimpleNamespace(cupti_profiler=False), "cuda") is None


def test_profiled_passes_the_experimental_config_to_torch_profiler(tmp_path):
    results = tmp_path / "r.json"
    config = cupti.CuptiSettings(()).experimental_config()  # no counters: runs on a CPU too
    with profiled(results, True, False, "cpu", config) as written:
        torch.mm(torch.rand(8, 8), torch.rand(8, 8))
    trace = json.loads((tmp_path / "r_trace.json").read_text())
    assert written["trace_file"].endswith("r_trace.json") and trace["traceEvents"]


def _event(cat, name, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": args}


def test_counters_are_summed_per_run_id(tmp_path):
    trace = tmp_path / "r_trace.json"
    trace.write_text(json.dumps({"traceEvents": [
        _event("user_annotation", "param_compute|torch.mm|0|0|0", 100, 100),
        _event("user_annotation", "param_compute|torch.mm|0|0|0|measure|forward", 150, 40),
        _event("gpu_user_annotation", "param_compute|torch.mm|0|0|1", 300, 50),
        _event("user_annotation", "unrelated", 0, 1000),
        _event("cuda_profiler_range", "gemm_kernel", 160, 5, kineto__cuda_core_flops=1000),
        _event("cuda_profiler_range", "gemm_kernel", 170, 5, kineto__cuda_core_flops=24),
        _event("cuda_profiler_range", "add_kernel", 310, 5, kineto__cuda_core_flops=7,
               other=3),
        _event("cuda_profiler_range", "__profile__", 900, 5, kineto__cuda_core_flops=1),
        {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "python"}},
    ]}))
    settings = cupti.CuptiSettings(("kineto__cuda_core_flops",))
    path = cupti.write_summary(tmp_path / "r.json", trace, settings)
    summary = json.loads(path.read_text())
    assert path.name == "r_cupti.json" and summary["metrics"] == ["kineto__cuda_core_flops"]
    assert summary["runs"] == {
        "torch.mm|0|0|0": {"ranges": 2, "kineto__cuda_core_flops": 1024},
        "torch.mm|0|0|1": {"ranges": 1, "kineto__cuda_core_flops": 7},
        cupti.UNATTRIBUTED: {"ranges": 1, "kineto__cuda_core_flops": 1}}


def test_a_trace_without_counters_says_so(tmp_path, caplog):
    trace = tmp_path / "r_trace.json"
    trace.write_text(json.dumps({"traceEvents": []}))
    path = cupti.write_summary(tmp_path / "r.json", trace, cupti.CuptiSettings(("m",)))
    assert json.loads(path.read_text())["runs"] == {}
