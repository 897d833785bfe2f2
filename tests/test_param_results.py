"""Results files read by a reader written PARAM's way (its output_stats loop and header keys)."""

from __future__ import annotations

import enum
import json
from pathlib import Path

import pytest

from conftest import EXAMPLES, REPO, tensor, write_spec
from param_compute.cli.run_benchmark import main as run_benchmark

PARAM_COMPAT = REPO.parent / "shared" / "param-compat"
PARAM_FILES = sorted(PARAM_COMPAT.glob("param_results_*.json")) if PARAM_COMPAT.is_dir() else []


class ExecutionPass(enum.Enum):  # PARAM's enums, as a user's reader would import them
    FORWARD = "forward"
    BACKWARD = "backward"


class OpExecutionMode(enum.Enum):
    DISCRETE = "discrete"
    CONTINUOUS = "continuous"
    CONTINUOUS_EVENTS = "continuous_events"


def _enum_from_str(enum_class, text: str):
    """``"ExecutionPass.FORWARD"`` (``str()`` of PARAM's enum) back to the member."""
    class_name, member = text.split(".")
    assert class_name == enum_class.__name__
    return enum_class[member]


def param_reader(path: Path):
    """Read a results file the way code written against PARAM's output does: plain key access
    (a missing key raises), PARAM's summing loop over every metric list. Returns the header's
    pass type and exec mode and, per run, ``{pass: {metric: (total, average)}}``."""
    lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    header, finish = lines[0], lines[-1]
    options, info = header["run_options"], header["sys_info"]
    pass_type = _enum_from_str(ExecutionPass, options["pass_type"])
    exec_mode = _enum_from_str(OpExecutionMode, options["op_exec_mode"])
    assert isinstance(options["cuda_l2_cache"], bool)
    assert options["cmd_args"]["iteration"] == options["iteration"]
    assert options["cmd_args"]["warmup"] == options["warmup"]
    assert options["cmd_args"]["device"] == options["device"]
    assert isinstance(info["param_train_compute_version"], str)
    assert info["pytorch_version"] and isinstance(info["cuda_available"], bool)
    assert header["start_time"] and finish["finish_time"]
    runs = {}
    for record in lines[1:-1]:
        key = f"{record['op_name']}|{record['id']}"
        assert set(record["config"]) >= {"build", "input"}
        summary = {}
        for pass_name, metric in record["metric"].items():
            ExecutionPass(pass_name)
            for phase in ("warmup", "measure"):  # PARAM writes both on every device
                assert len(metric[f"{phase}.gpu.memory"]) <= max(len(metric[f"{phase}.time"]), 1)
            sums = {}
            for metric_name, values in metric.items():  # output_stats: sum(records) / len
                total = sum(values) if values else 0
                sums[metric_name] = (total, total / len(values) if values else 0)
            summary[pass_name] = sums
        runs[key] = summary
    return pass_type, exec_mode, runs


@pytest.fixture
def param_files():
    if not PARAM_FILES:
        pytest.skip("../shared/param-compat is not beside this checkout")
    return PARAM_FILES


def test_the_reader_reads_param_s_own_files(param_files):
    for path in param_files:
        pass_type, mode, runs = param_reader(path)
        assert pass_type is ExecutionPass.FORWARD and mode is OpExecutionMode.DISCRETE
        assert runs and all(summary["forward"]["measure.time"][0] > 0
                            for summary in runs.values())


def _run(tmp_path: Path, spec: Path, *flags: str) -> Path:
    out = tmp_path / f"{spec.stem}{'_'.join(flags).replace('-', '')}.json"
    status = run_benchmark(["-c", str(spec), "-w", "1", "-i", "3", "--output", str(out),
                            "--no-progress", *flags])
    assert status in (0, 1)
    return out


@pytest.mark.parametrize("spec", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.stem)
def test_the_reader_reads_our_results_of_the_example_specs(tmp_path, spec):
    pass_type, mode, runs = param_reader(_run(tmp_path, spec))
    assert pass_type is ExecutionPass.FORWARD and mode is OpExecutionMode.DISCRETE
    assert runs
    for summary in runs.values():
        forward = summary["forward"]
        assert forward["measure.time"][0] > 0
        assert forward["measure.gpu.memory"] == (0, 0)  # CPU: PARAM's zeros
        assert forward["measure.iterations"] == (3, 3)  # a count, as a list


def test_the_reader_reads_failed_runs_and_backward(tmp_path):
    spec = write_spec(tmp_path, {
        "torch.mm": {"input_data_generator": "PyTorch:DefaultDataGenerator", "config": [
            {"input": [{"args": [tensor(8, 4), tensor(4, 8)]},     # measured
                       {"args": [tensor(8, 4), tensor(5, 8)]}]}]},  # fails in forward
        "torch.add_": {"input_data_generator": "PyTorch:DefaultDataGenerator", "config": [
            {"input": [{"args": [tensor(8, 8), tensor(8, 8)]}]}]},  # no backward: fails there
    })
    out = _run(tmp_path, spec, "-b", "--exec-mode", "continuous")
    pass_type, mode, runs = param_reader(out)
    assert pass_type is ExecutionPass.BACKWARD and mode is OpExecutionMode.CONTINUOUS
    assert set(runs["torch.mm|0|0|0"]) == {"forward", "backward"}
    assert runs["torch.mm|0|0|1"]["forward"]["measure.time"] == (0, 0)  # empty lists
    inplace = runs["torch.add_|0|0|0"]
    assert inplace["forward"]["measure.time"][0] > 0  # measured before the failure
    assert inplace["backward"]["measure.time"] == (0, 0)
    records = [json.loads(line) for line in out.read_text().splitlines()[1:-1]]
    assert [r["status"] for r in records] == ["ok", "error", "error"]
    assert [r["error"]["phase"] for r in records[1:]] == ["forward", "backward"]


def test_header_keeps_ours_beside_param_s(tmp_path):
    out = _run(tmp_path, EXAMPLES / "simple_add.json", "--cuda-l2-cache", "on")
    header = json.loads(out.read_text().splitlines()[0])
    options = header["run_options"]
    assert options["backward"] is False and options["exec_mode"] == "discrete"
    assert options["cuda_l2_cache"] is True and options["cmd_args"]["cuda_l2_cache"] == "on"
    assert "benchmark_args" not in options  # the command line's values: cmd_args only
    assert header["sys_info"]["param_train_compute_version"] == \
        header["sys_info"]["param_compute_version"]
