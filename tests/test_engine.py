"""The engine end to end: real runs, records, ids, resume/stop, errors, plugins, CLI."""

from __future__ import annotations

import json
import os
import re
import textwrap

import pytest
import torch

import param_compute
from conftest import (EXAMPLES, REPO, read_results, run_cli, simple_op, tensor, write_spec)
from param_compute.results.file import FORMAT_VERSION
from param_compute.data.generator import DefaultDataGenerator, seed_for_run, seed_generators

LIGHT_SPECS = ["simple_add", "simple_add_range", "simple_mm", "simple_mm_range", "mm",
               "mm_range", "test_native_basic_ops", "aten_ops",
               "split_table_batched_embeddings_ops"]


def _expected_count(shared, name):
    return len((shared / "expected" / f"{name}.expected.jsonl").read_text().splitlines())


@pytest.mark.parametrize("name", LIGHT_SPECS)
def test_param_specs_run_for_real_on_cpu(shared_configs, name):
    if name.startswith("split_table"):
        pytest.importorskip("fbgemm_gpu")
    result = param_compute.run(shared_configs / f"{name}.json", warmup=1, iteration=2)
    assert len(result.records) == _expected_count(shared_configs, name)
    assert [r["status"] for r in result.records] == ["ok"] * len(result.records)
    for record in result.records:
        forward = record["metric"]["forward"]
        assert len(forward["warmup.time"]) == 1 and len(forward["measure.time"]) == 2
        assert all(t > 0 for t in forward["measure.time"])
        assert record["stats"]["forward"]["n"] == 2
    assert result.summary.exit_status == 0


def test_alex_net_spec_runs_for_real(shared_configs):
    """PARAM's alex_net.json as it is but for the batch, cut from 128 to 4 images (~6 s of CPU
    per forward pass at 128, and the batch only scales the arithmetic); the spec untouched runs
    in ``test_alex_net_runs_for_real_at_full_batch``."""
    spec = json.loads((shared_configs / "alex_net.json").read_text())
    [arg] = spec["pytorch.model.alex_net"]["config"][0]["input"][0]["args"]
    assert arg["shape"] == [128, 3, 224, 224]
    arg["shape"][0] = 4
    result = param_compute.run(spec, warmup=0, iteration=1)
    [record] = result.records
    assert record["status"] == "ok" and record["stats"]["forward"]["median"] > 0


@pytest.mark.skipif(not os.environ.get("PARAM_COMPUTE_SLOW"),
                    reason="AlexNet at batch 128 takes ~6 s of CPU here; set PARAM_COMPUTE_SLOW=1")
def test_alex_net_runs_for_real_at_full_batch(shared_configs):
    result = param_compute.run(shared_configs / "alex_net.json", warmup=0, iteration=1)
    [record] = result.records
    assert record["status"] == "ok" and record["stats"]["forward"]["median"] > 0


@pytest.mark.skipif(not os.environ.get("PARAM_COMPUTE_SLOW"),
                    reason="ResNet-50 at batch 128 takes ~65 s and ~11 GB here; "
                           "set PARAM_COMPUTE_SLOW=1")
def test_resnet_runs_for_real(shared_configs):
    result = param_compute.run(shared_configs / "resnet.json", warmup=0, iteration=1)
    assert [r["status"] for r in result.records] == ["ok"]


def test_unregistered_torch_functions_resolve_and_run():
    spec = {}
    spec.update(simple_op("torch.nn.functional.gelu", tensor(8, 16)))
    spec.update(simple_op("torch.nn.functional.dropout", tensor(8, 16),
                          kwargs={"p": {"type": "float", "value": 0.25}}))
    spec.update(simple_op("torch.special.expit", tensor(8)))
    spec.update(simple_op("torch.linalg.vector_norm", tensor(8, 8)))
    spec.update(simple_op("torch.fft.rfft", tensor(64)))
    result = param_compute.run(spec, warmup=1, iteration=3, backward=True)
    assert [(r["op_name"], r["status"]) for r in result.records] == [
        (name, "ok") for name in spec]
    for record in result.records:
        assert len(record["metric"]["backward"]["measure.time"]) == 3


def test_backward_pass_times_and_grad_creation_untimed():
    spec = simple_op("torch.nn.Linear", tensor(4, 16),
                     builds=[{"args": [{"type": "int", "value": 16},
                                       {"type": "int", "value": 8}]}])
    [record] = param_compute.run(spec, warmup=2, iteration=4, backward=True).records
    assert record["status"] == "ok"
    assert len(record["metric"]["backward"]["warmup.time"]) == 2
    assert record["stats"]["backward"]["n"] == 4


def test_failed_backward_keeps_the_forward_measurement():
    spec = simple_op("torch.add_", tensor(4, 4), tensor(4, 4))
    [record] = param_compute.run(spec, iteration=3, backward=True).records
    assert record["status"] == "error"
    assert record["error"]["phase"] == "backward"
    assert "no backward" in record["error"]["message"]
    assert len(record["metric"]["forward"]["measure.time"]) == 3


def test_continuous_mode_reports_the_mean_per_call():
    spec = simple_op("torch.add", tensor(8), tensor(8))
    [record] = param_compute.run(spec, warmup=3, iteration=50, exec_mode="continuous").records
    # issue 14: the loop is stamped in 10 blocks (5 calls each here), each block's mean a value
    assert len(record["metric"]["forward"]["measure.time"]) == 10
    assert record["metric"]["forward"]["measure.iterations"] == [50]
    assert len(record["metric"]["forward"]["warmup.time"]) == 3


def test_a_failing_run_becomes_an_error_record_and_the_run_goes_on(tmp_path):
    spec = {"torch.mm": {"input_data_generator": "PyTorch:DefaultDataGenerator", "config": [
        {"input": [{"args": [tensor(2, 3), tensor(4, 5)]}]},
        {"input": [{"args": [tensor(2, 3), tensor(3, 5)]}]}]}}
    out = tmp_path / "results.json"
    result = run_cli("-c", write_spec(tmp_path, spec), "--output", out, "-i", "2")
    assert result.returncode == 1
    _, runs, finish = read_results(out)
    assert [(r["id"], r["status"]) for r in runs] == [("0|0|0", "error"), ("1|0|0", "ok")]
    assert runs[0]["error"]["phase"] == "forward"
    assert runs[0]["error"]["type"] == "RuntimeError"
    assert "cannot be multiplied" in runs[0]["error"]["message"]
    assert finish["runs_failed"] == 1 and finish["runs_ok"] == 1
    assert "failed torch.mm|0|0|0" in result.stdout and "Traceback" not in result.stderr


def _ids(records):
    return [r["id"] for r in records]


def test_resume_and_stop_ids(shared_configs):
    spec = shared_configs / "simple_add_range.json"
    resumed = param_compute.run(spec, dry_run=True, resume_id="torch.add|0|0|1_4").records
    assert _ids(resumed)[0] == "0|0|1_4" and len(resumed) == 33 - 14
    stopped = param_compute.run(spec, dry_run=True, stop_id="torch.add|0|0|1_0").records
    assert _ids(stopped)[-1] == "0|0|0_9" and len(stopped) == 10
    both = param_compute.run(spec, dry_run=True, resume_id="torch.add|0|0|0_8",
                             stop_id="torch.add|1|0|0_0").records
    assert _ids(both) == ["0|0|0_8", "0|0|0_9"] + [f"0|0|1_{i}" for i in range(6)]


def test_unmatched_resume_and_stop_ids_are_reported(shared_configs, tmp_path):
    out = tmp_path / "r.json"
    result = run_cli("-c", shared_configs / "simple_add.json", "--dry-run", "--output", out,
                     "-r", "torch.add|9|9|9", "--stop_id", "torch.nope|0|0|0")
    assert result.returncode == 0
    assert "--resume-id 'torch.add|9|9|9' matched no run" in result.stderr
    assert "--stop-id 'torch.nope|0|0|0' matched no run" in result.stderr
    assert read_results(out)[1] == []


def test_several_builds_get_non_accumulating_ids():
    linear = {"torch.nn.Linear": {
        "build_iterator": "RangeConfigIterator",
        "input_data_generator": "PyTorch:DefaultDataGenerator",
        "config": [{"build": [{"args": [{"type": "int", "value": [4, 6, 2],
                                         "__range__": ["value"]},
                                        {"type": "int", "value": 3}]}],
                    "input": [{"args": [tensor(2, 4)]}, {"args": [tensor(5, 4)]}]}]}}
    records = param_compute.run(linear, dry_run=True).records
    assert _ids(records) == ["0|0_0|0", "0|0_0|1", "0|0_1|0", "0|0_1|1"]
    assert [r["config"]["build"]["args"][0]["value"] for r in records] == [4, 4, 6, 6]


def test_generated_data_depend_only_on_seed_and_run_key():
    config = {"args": [tensor(3, 3), tensor(4, dtype="long"),
                       {"type": "float", "value_range": [1.0, 2.0]}],
              "kwargs": {"k": {"type": "int", "value_range": [1, 100]}}}
    generator = DefaultDataGenerator()

    def draw(seed, key):
        seed_generators(seed_for_run(seed, key))
        return generator.get_data(config, "cpu")

    (a, ai, af), ak = draw(0, "torch.add|0|0|0")
    (b, bi, bf), bk = draw(0, "torch.add|0|0|0")
    assert torch.equal(a, b) and torch.equal(ai, bi) and af == bf and ak == bk
    (c, _, cf), _ = draw(1, "torch.add|0|0|0")
    (d, _, _), _ = draw(0, "torch.add|0|0|1")
    assert not torch.equal(a, c) and not torch.equal(a, d)
    assert a.requires_grad and not ai.requires_grad and ai.dtype == torch.int64
    assert 1.0 <= af <= 2.0 and 1 <= ak["k"] <= 100


def test_results_file_layout_and_output_prefix_naming(tmp_path):
    result = run_cli("-c", EXAMPLES / "simple_add.json", "-o", tmp_path / "bench", "-i", "3",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    [path] = list(tmp_path.glob("bench_*.json"))
    assert re.fullmatch(r"bench_\d+_\d+\.json", path.name)
    header, runs, finish = read_results(path)
    assert set(header) == {"kind", "format_version", "run_options", "sys_info", "start_time"}
    assert list(header)[:2] == ["kind", "format_version"] and header["kind"] == "header"
    assert header["format_version"] == FORMAT_VERSION
    assert header["run_options"]["iteration"] == 3
    assert header["run_options"]["pass_type"] == "ExecutionPass.FORWARD"  # PARAM's form
    assert header["sys_info"]["pytorch_version"] == torch.__version__
    assert json.loads(json.dumps(header)) == header  # plain JSON values only
    [run] = runs
    assert set(run) >= {"op_name", "id", "status", "metric", "stats", "config"}
    assert next(iter(run)) == "kind" and run["kind"] == "run" and finish["kind"] == "finish"
    assert set(run["stats"]["forward"]) >= {"n", "mean", "median", "min", "max", "stdev",
                                            "p10", "p90"}
    assert set(finish) >= {"finish_time"}
    assert f"results: {path.name}" in result.stderr.replace(str(tmp_path) + "/", "")


def test_append_adds_a_second_run_to_the_same_file(tmp_path):
    out = tmp_path / "r.json"
    for _ in range(2):
        assert run_cli("-c", EXAMPLES / "simple_add.json", "--dry-run", "--output", out,
                       "-a").returncode == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert ["run_options" in l for l in lines].count(True) == 2 and len(lines) == 6


def test_list_ops_lists_workloads_and_namespaces():
    result = run_cli("--list-ops")
    assert result.returncode == 0
    for name in ("torch.add", "pytorch.model.alex_net", "pytorch.model.resnet",
                 "torch.nn.Conv2d", "RangeConfigIterator", "PyTorch:DefaultDataGenerator",
                 "torch.nn.functional.X"):
        assert name in result.stdout


def test_workloads_dir_plugins_and_a_broken_module(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "scaled.py").write_text(textwrap.dedent("""
        import torch
        from param_compute import OperatorInterface, register_operator

        class ScaledAdd(OperatorInterface):
            def build(self, scale):
                self.scale = scale
            def forward(self, a, b):
                return torch.add(a, b, alpha=self.scale)

        register_operator("custom.scaled_add", ScaledAdd)
    """))
    (plugins / "broken.py").write_text("import surely_not_installed_module\n")
    spec = simple_op("custom.scaled_add", tensor(4), tensor(4),
                     builds=[{"args": [{"type": "float", "value": 2.0}]}])
    spec["custom.scaled_add"]["build_data_generator"] = "PyTorch:DefaultDataGenerator"
    out = tmp_path / "r.json"
    result = run_cli("-c", write_spec(tmp_path, spec), "--output", out, "--workloads-dir",
                     plugins, "-b")
    assert result.returncode == 0, result.stderr
    assert "missing module 'surely_not_installed_module'" in result.stderr
    [run] = read_results(out)[1]
    assert run["status"] == "ok"  # measured by the default protocol: by time and noise
    assert run["stats"]["backward"]["n"] >= 5
    assert run["stats"]["backward"]["stop_reason"] in ("noise", "max_time")


def test_missing_input_data_generator_warns_and_uses_the_default(tmp_path):
    spec = simple_op("torch.add", tensor(4), tensor(4))
    del spec["torch.add"]["input_data_generator"]
    result = run_cli("-c", write_spec(tmp_path, spec), "--output", tmp_path / "r.json")
    assert result.returncode == 0
    assert "no input_data_generator; using PyTorch:DefaultDataGenerator" in result.stderr


def test_readme_demo_and_library_example_run(tmp_path, capsys):
    demo = run_cli("-c", EXAMPLES / "simple_add.json", "--output", tmp_path / "demo.json")
    assert demo.returncode == 0 and "torch.add" in demo.stdout and "1 measured" in demo.stdout
    import runpy

    capsys.readouterr()
    runpy.run_path(str(REPO / "examples" / "library_use.py"), run_name="__main__")
    printed = capsys.readouterr().out
    assert "torch.nn.functional.layer_norm" in printed and "median" in printed
    assert "7 measured, 0 failed" in printed  # 3 layer_norm + 4 softmax (inclusive range)


LONG_FAILURE = """
from param_compute import OperatorInterface, register_operator

class DispatcherLike(OperatorInterface):
    def forward(self, *args):
        raise NotImplementedError("Could not run 'aten::thing' with arguments from the 'CPU' "
                                  "backend.\\n" + "  registered at some/file.cpp:1 [kernel]\\n" * 500)

register_operator("test.long_failure", DispatcherLike)
"""


def test_a_long_error_message_is_one_line_in_the_log_summary_and_record(tmp_path):
    """A dispatcher-style message (kilobytes of kernel registrations) is said once per place in
    one line; the rest is for --log-level DEBUG."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "long_failure.py").write_text(LONG_FAILURE)
    spec = write_spec(tmp_path, simple_op("test.long_failure", {"type": "int", "value": 1}))
    out = tmp_path / "r.json"
    result = run_cli("-c", spec, "--workloads-dir", plugins, "--output", out, "-i", "1")
    assert result.returncode == 1
    first = "Could not run 'aten::thing' with arguments from the 'CPU' backend."
    assert result.stderr.count(first) == 1  # the log line
    [row] = [line for line in result.stdout.splitlines() if "failed test.long_failure" in line]
    assert row.startswith("  failed test.long_failure|0|0|0 (forward): NotImplementedError: "
                          "Could not run 'aten::thing'")  # the summary row: one line, cut
    assert len(row) <= 120 and (first in row or row.endswith("…"))
    assert "registered at" not in result.stderr + result.stdout
    _, [run], _ = read_results(out)
    assert run["error"]["message"] == first


MARKUP_FAILURE = """
from param_compute import OperatorInterface, register_operator

class Bracketed(OperatorInterface):
    def forward(self, *args):
        raise ValueError("size [/bold] does not match [link=x]")

register_operator("test.bracketed_failure", Bracketed)
"""


def test_an_error_message_with_brackets_is_shown_as_it_is_not_as_markup(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "bracketed.py").write_text(MARKUP_FAILURE)
    spec = write_spec(tmp_path, simple_op("test.bracketed_failure", {"type": "int", "value": 1}))
    result = run_cli("-c", spec, "--workloads-dir", plugins, "--output", tmp_path / "r.json")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and "MarkupError" not in result.stderr
    assert "  failed test.bracketed_failure|0|0|0 (forward): ValueError: size [/bold] does not " \
           "match [link=x]" in result.stdout
