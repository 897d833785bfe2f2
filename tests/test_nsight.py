"""--ncu / --nsys batching: profiled child processes, NVTX iteration ranges, batch records, the
report tools. Runs on CPU with stand-in profilers (tests/fixtures/fake_ncu, fake_nsys) that
record their argv and environment, run the child and write a profile in the real tools' layout.
"""

from __future__ import annotations

import csv
import json
import os
import shlex
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

import param_compute
from conftest import ZYGOTE, run_cli, simple_op, tensor, write_spec
from param_compute.measure import ranges as annotations
from param_compute.measure.ranges import NCU_ITERATION_FILTER, iteration_range_name
from param_compute.results.sinks.base import RunSummary
from param_compute.errors import OptionsError
from param_compute.plan.runplan import PlannedRun
from param_compute.plan.runkey import RunKey
from param_compute.profiling.batches import BatchProfiler
from param_compute.profiling.nsight import BatchSettings, Profiler, find_binary
from param_compute.runtime.options import RunOptions
from param_compute.results.records import STATUS_ERROR, STATUS_OK, RunError, RunRecord
from param_compute.profiling import ncu_report, nsys_report
from param_compute.profiling.profiles import parse_iteration_range

TESTS = Path(__file__).resolve().parent
FIXTURES = TESTS / "fixtures"


def install_fake(directory: Path, tool: str, name: str = None) -> Path:
    """The fixture script as an executable whose shebang is this interpreter."""
    directory.mkdir(parents=True, exist_ok=True)
    body = (FIXTURES / f"fake_{tool}").read_text().split("\n", 1)[1]
    path = directory / (name or tool)
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path


@pytest.fixture
def fakes(tmp_path):
    """PATH with the fake ncu and nsys first; the file their calls are recorded in."""
    bin_dir = tmp_path / "bin"
    install_fake(bin_dir, "ncu")
    install_fake(bin_dir, "nsys")
    record = tmp_path / "profiler_calls.jsonl"
    # The profiled children they start are forked from the tests' pre-imported zygote.
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
               FAKE_PROFILER_RECORD=str(record),
               FAKE_PROFILER_ZYGOTE=os.pathsep.join([str(TESTS), ZYGOTE.address]))
    env.pop("FAKE_PROFILER_FAIL", None)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    # Tests of what is batched and recorded leave the child unstarted (its two seconds of torch
    # import prove nothing there); the child itself runs in the args-file, replay and crash tests.
    batching = dict(env, FAKE_PROFILER_RUN="0")
    return SimpleNamespace(bin=bin_dir, record=record, env=env, batching=batching)


def calls(fakes, tool=None):
    if not fakes.record.exists():
        return []
    lines = [json.loads(line) for line in fakes.record.read_text().splitlines()]
    return [line for line in lines if tool is None or line["tool"] == tool]


def run_main(*args, env, module="param_compute.cli.run_benchmark"):
    """``main(argv)`` of a tool in this process with ``env`` as its environment (the profilers
    and the batch children it starts are real processes)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        return run_cli(*args, module=module)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def lines_of(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def ranged_add(count: int, name: str = "torch.add"):
    """``count`` configs of ``name`` on 1-D tensors: ids 0|0|0_0 .. 0|0|0_{count-1}."""
    sized = tensor([1, count], __range__=["shape"])
    return {name: {"input_iterator": "RangeConfigIterator",
                   "input_data_generator": "PyTorch:DefaultDataGenerator",
                   "config": [{"input": [{"args": [sized, tensor(1)]}]}]}}


def kinds(lines):
    """A compact view of a results file: 'run 0|0|0_0', 'ncu 0|0|0_0-0|0|0_2', 'finish'..."""
    out = []
    for line in lines[1:]:
        if "op_name" in line and "id" in line:
            out.append(f"run {line['id']}")
        elif "ncu_file" in line or "nsys_file" in line:
            kind = "ncu" if "ncu_file" in line else "nsys"
            out.append(f"{kind} {line['start_run_id']}-{line['end_run_id']}")
        elif "finish_time" in line:
            out.append("finish")
    return out


# -- the acceptance case ---------------------------------------------------------------------


def test_seven_configs_batch_size_three(tmp_path, fakes):
    out = tmp_path / "r.json"
    result = run_main("-c", write_spec(tmp_path, ranged_add(7)), "-i", "2", "--ncu",
                      "--run-batch-size", "3", "--output", out, env=fakes.batching)
    assert result.returncode == 0, result.stderr
    lines = lines_of(out)
    ids = [f"0|0|0_{i}" for i in range(7)]
    assert kinds(lines) == [
        "run 0|0|0_0", "run 0|0|0_1", "run 0|0|0_2", "ncu 0|0|0_0-0|0|0_2",
        "run 0|0|0_3", "run 0|0|0_4", "run 0|0|0_5", "ncu 0|0|0_3-0|0|0_5",
        "run 0|0|0_6", "ncu 0|0|0_6-0|0|0_6", "finish"]
    # 7 normally measured runs (the main run's own -i 2)
    runs = [line for line in lines if "op_name" in line]
    assert [r["id"] for r in runs] == ids
    assert all(r["status"] == "ok" and len(r["metric"]["forward"]["measure.time"]) == 2
               for r in runs)
    # 3 profiler launches, each with the NVTX filter and the defaults, then the child
    launches = calls(fakes, "ncu")
    assert len(launches) == 3
    batches = [line for line in lines if "ncu_file" in line]
    for launch, batch, expected in zip(launches, batches, (ids[0:3], ids[3:6], ids[6:7])):
        argv = launch["argv"]
        assert argv[:8] == ["--csv", "--log-file", batch["ncu_file"], "--target-processes",
                            "all", "--nvtx", "--nvtx-include", NCU_ITERATION_FILTER]
        assert argv[8:12] == [sys.executable, "-m", "param_compute.profiling.batch_child", "--batch-file"]
        assert not Path(argv[12]).parent.exists()  # the private batch directory is gone
        assert shlex.split(batch["ncu_cmd_str"]) == [str(fakes.bin / "ncu"), *argv]
        document = launch["batch"]
        assert [r["id"] for r in document["runs"]] == expected
        assert document["op_name"] == "torch.add" and document["build"] is None
        options = document["options"]
        assert options["nvtx_iterations"] is True and options["seed"] == 0
        assert (options["warmup"], options["iteration"]) == (5, 1)  # PARAM's ncu defaults
        assert options["min_time"] == 0 and options["throughput"] is False
        assert batch["status"] == "ok" and batch["exit_status"] == 0
        assert batch["start_run_id"] == expected[0] and batch["end_run_id"] == expected[-1]
        config = batch["config"]  # PARAM's batch config
        assert config["op_name"] == "torch.add" and config["config_build_id"] == "0|0"
        assert [i["id"] for i in config["op_info"]["config"][0]["input"]] == \
            [RunKey.from_id("torch.add", e).input for e in expected]
        assert config["run_options"]["iteration"] == 1
        assert Path(batch["ncu_file"]).is_file()
        assert Path(batch["ncu_file"]).parent == tmp_path
    assert lines[-1]["profiled_batches"] == {"ncu": {"ok": 3, "failed": 0}}
    # the profiler's output reaches the log, prefixed (the child's: test_args_file_...)
    assert "[ncu batch 3] ==PROF== (fake ncu) profiling: " in result.stderr

    # the report joins the kernels of the three logs back to the seven run ids
    table = tmp_path / "kernels.csv"
    report = run_main(out, "--metric", "DRAM Throughput", "--csv", table, env=fakes.env,
                      module="param_compute.profiling.ncu_report")
    assert report.returncode == 0, report.stdout + report.stderr
    with open(table, newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert [r["id"] for r in rows] == ids
    assert {r["launches"] for r in rows} == {"1"} and {r["pass"] for r in rows} == {"forward"}
    assert float(rows[0]["DRAM Throughput"]) == pytest.approx(12.34)
    assert float(rows[0]["duration_ns_mean"]) == pytest.approx(2500)  # 2.50 usecond
    assert "7 kernel launches joined to 7 run passes" in report.stdout


# -- batch boundaries -------------------------------------------------------------------------


def test_batches_never_mix_builds_or_operators_and_follow_resume_stop(tmp_path, fakes):
    linear = {"torch.nn.Linear": {
        "build_iterator": "RangeConfigIterator",
        "input_data_generator": "PyTorch:DefaultDataGenerator",
        "config": [{"build": [{"args": [{"type": "int", "value": 4},
                                        {"type": "int", "value": [3, 4], "__range__": ["value"]}]}],
                    "input": [{"args": [tensor(2, 4)]}, {"args": [tensor(3, 4)]}]}]}}
    spec = write_spec(tmp_path, {**ranged_add(5), **linear})
    out = tmp_path / "r.json"
    result = run_main("-c", spec, "--ncu", "--run-batch-size", "3", "--output", out,
                      env=fakes.batching)
    assert result.returncode == 0, result.stderr
    assert kinds(lines_of(out)) == [
        "run 0|0|0_0", "run 0|0|0_1", "run 0|0|0_2", "ncu 0|0|0_0-0|0|0_2",
        "run 0|0|0_3", "run 0|0|0_4",
        "ncu 0|0|0_3-0|0|0_4", "run 0|0_0|0", "run 0|0_0|1",  # operator changed
        "ncu 0|0_0|0-0|0_0|1", "run 0|0_1|0", "run 0|0_1|1",  # build changed
        "ncu 0|0_1|0-0|0_1|1", "finish"]
    linear_batches = [c["batch"] for c in calls(fakes, "ncu")][2:]
    assert [b["build"]["args"][1]["value"] for b in linear_batches] == [3, 4]

    # --resume-id / --stop-id: only runs the main run ran are queued
    fakes.record.unlink()
    out2 = tmp_path / "r2.json"
    result = run_main("-c", spec, "--ncu", "--run-batch-size", "3", "--output", out2,
                      "-r", "torch.add|0|0|0_1", "-s", "torch.add|0|0|0_4",
                      env=fakes.batching)
    assert result.returncode == 0, result.stderr
    assert kinds(lines_of(out2)) == ["run 0|0|0_1", "run 0|0|0_2", "run 0|0|0_3",
                                     "ncu 0|0|0_1-0|0|0_3", "finish"]
    assert len(calls(fakes, "ncu")) == 1


def _done(sink, run, record):
    """What the engine does for one run: the before_run hook, then run_done."""
    sink.before_run(run)
    sink.run_done(run, record)


def _end(sink, summary):
    """What the engine does at the end: end_runs, then the declared finish fields."""
    sink.end_runs(summary)
    fields = sink.finish_fields(summary)
    sink.finish(summary)
    return fields


def _run(op_index, config_index, build_id, input_id, op_name="torch.add"):
    return PlannedRun(op_name, op_index, config_index, build_id, None, input_id, {"args": []})


def _record(run, status=STATUS_OK):
    error = RunError("RuntimeError", "boom", "forward") if status == STATUS_ERROR else None
    return RunRecord(run.op_name, run.id, run.config(), status, error=error)


def test_batch_queue_in_process(monkeypatch):
    """Skipped and failed runs are not queued; a full batch is launched at the next event; the
    rest at the end, unless the run was interrupted."""
    launched = []
    monkeypatch.setattr(BatchProfiler, "_profile",
                        lambda self, profiler, runs, number: launched.append(
                            [r.id for r in runs]))
    settings = BatchSettings((Profiler("ncu", "ncu"),), batch_size=2)
    sink = BatchProfiler(settings, spec=None, options=RunOptions(), results=Path("r.json"))
    a, b, c, d, e = (_run(0, 0, "0", str(i)) for i in range(5))
    _done(sink, a, _record(a))
    _done(sink, b, _record(b, STATUS_ERROR))  # failed: not profiled
    _done(sink, c, None)  # skipped
    _done(sink, d, _record(d))
    assert launched == []  # full, launched before the next run
    sink.before_run(e)
    assert launched == [["0|0|0", "0|0|3"]]
    sink.run_done(e, _record(e))
    other_build = _run(0, 0, "1", "0")
    _done(sink, other_build, _record(other_build))
    assert launched[-1] == ["0|0|4"]
    fields = _end(sink, RunSummary())
    assert launched[-1] == ["0|1|0"]
    assert fields == {"profiled_batches": {"ncu": {"ok": 0, "failed": 0}}}
    assert sink.summary_lines(RunSummary()) == ["ncu: 0 batches profiled"]

    launched.clear()
    _done(sink, a, _record(a))
    _end(sink, RunSummary(interrupted=2))
    assert launched == [] and sink.queue == []


def test_interrupted_batch_is_recorded_and_the_summary_still_written(tmp_path, monkeypatch):
    from param_compute.process.signals import Interrupted

    def interrupted(self, command, prefix):
        raise Interrupted(2)

    monkeypatch.setattr(BatchProfiler, "_launch", interrupted)
    op = SimpleNamespace(build_iterator="DefaultConfigIterator",
                         input_iterator="DefaultConfigIterator",
                         build_data_generator="PyTorch:DefaultDataGenerator",
                         input_data_generator="PyTorch:DefaultDataGenerator", configs=[{}])
    spec = SimpleNamespace(operators=[op], source="spec.json")
    sink = BatchProfiler(BatchSettings((Profiler("ncu", "ncu"),)), spec, RunOptions(),
                         tmp_path / "r.json")
    run = _run(0, 0, "0", "0")
    _done(sink, run, _record(run))
    summary = RunSummary()
    with pytest.raises(Interrupted):  # the last flush is interrupted: recorded, then raised
        sink.end_runs(summary)
    (line,) = sink.pending_lines()  # what the engine hands the results sink even so
    assert sink.pending_lines() == []
    assert line["status"] == "error" and line["error"] == "interrupted by SIGINT"
    assert line["exit_status"] is None and line["start_run_id"] == "0|0|0"
    assert sink.finish_fields(summary) == {"profiled_batches": {"ncu": {"ok": 0, "failed": 1}}}
    assert sink.summary_lines(summary) == ["ncu: 1 batches profiled, 1 failed"]
    summary.interrupted = 2  # what the engine records for a signal in end_runs
    assert sink.final_status(summary.exit_status) == 130


# -- options, environment, args files, nsys ---------------------------------------------------


def test_args_file_device_iterations_and_nsys(tmp_path, fakes):
    args_file = tmp_path / "ncu_args"
    args_file.write_text("--metrics dram__bytes.sum  # what we want\n--section 'SpeedOfLight'\n")
    spec = write_spec(tmp_path, ranged_add(2, "torch.mul"))
    out = tmp_path / "r.json"
    result = run_main("-c", spec, "-b", "--ncu", "--nsys", "--ncu-bin", fakes.bin / "ncu",
                      "--nsys-bin", fakes.bin / "nsys", "--ncu-args-file", args_file,
                      "--ncu-warmup", "2", "--ncu-iteration", "3", "--nsys-warmup", "0",
                      "--nsys-iteration", "2", "--batch-cuda-device", "5", "--output", out,
                      env=fakes.env)
    assert result.returncode == 0, result.stderr
    lines = lines_of(out)
    assert kinds(lines) == ["run 0|0|0_0", "run 0|0|0_1", "ncu 0|0|0_0-0|0|0_1",
                            "nsys 0|0|0_0-0|0|0_1", "finish"]
    ncu_call, nsys_call = calls(fakes)
    assert (ncu_call["tool"], nsys_call["tool"]) == ("ncu", "nsys")
    # the child's output reaches the log, prefixed with its batch
    for tool in ("ncu", "nsys"):
        assert f"[{tool} batch 1] torch.mul|0|0|0_1: ok" in result.stderr
    ncu_record, nsys_record = lines[3], lines[4]
    assert ncu_call["argv"][8:12] == ["--metrics", "dram__bytes.sum", "--section",
                                      "SpeedOfLight"]  # the args file, after the defaults
    assert ncu_call["argv"][12:15] == [sys.executable, "-m", "param_compute.profiling.batch_child"]
    assert nsys_call["argv"][:5] == ["profile", "-t", "cuda,nvtx", "-o",
                                     nsys_record["nsys_file"]]
    assert nsys_call["argv"][5:8] == [sys.executable, "-m", "param_compute.profiling.batch_child"]
    assert nsys_record["nsys_file"].endswith(".nsys-rep")
    assert ncu_call["CUDA_VISIBLE_DEVICES"] == nsys_call["CUDA_VISIBLE_DEVICES"] == "5"
    assert ncu_record["batch_cuda_device"] == "5"
    ncu_options, nsys_options = ncu_call["batch"]["options"], nsys_call["batch"]["options"]
    assert (ncu_options["warmup"], ncu_options["iteration"]) == (2, 3)
    assert (nsys_options["warmup"], nsys_options["iteration"]) == (0, 2)
    assert ncu_options["backward"] is True and ncu_options["device"] == "cpu"
    assert lines[-1]["profiled_batches"] == {"ncu": {"ok": 1, "failed": 0},
                                             "nsys": {"ok": 1, "failed": 0}}

    table = tmp_path / "ncu.csv"
    report = run_main(out, "-m", "dram throughput", "-m", "Registers Per Thread", "--csv",
                      table, env=fakes.env, module="param_compute.profiling.ncu_report")
    assert report.returncode == 0, report.stdout + report.stderr
    with open(table, newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert [(r["id"], r["pass"], r["launches"]) for r in rows] == [
        ("0|0|0_0", "forward", "3"), ("0|0|0_0", "backward", "3"),
        ("0|0|0_1", "forward", "3"), ("0|0|0_1", "backward", "3")]
    assert rows[1]["kernel"].startswith("void gemm_grad_kernel<float, 64>")
    assert float(rows[0]["Registers Per Thread"]) == 32

    table = tmp_path / "nsys.csv"
    report = run_main(out, "--csv", table, env=fakes.env, module="param_compute.profiling.nsys_report")
    assert report.returncode == 0, report.stdout + report.stderr
    with open(table, newline="") as stream:
        rows = list(csv.DictReader(stream))
    # backward kernels are launched from another thread: still inside the start/end range
    assert [(r["id"], r["pass"], r["launches"], r["duration_ns_mean"]) for r in rows] == [
        ("0|0|0_0", "forward", "2", "3000"), ("0|0|0_0", "backward", "2", "3000"),
        ("0|0|0_1", "forward", "2", "3000"), ("0|0|0_1", "backward", "2", "3000")]
    assert "4 launches outside any iteration range" in report.stdout
    assert Path(nsys_record["nsys_file"]).with_suffix(".sqlite").exists()  # nsys export ran


# -- failures ----------------------------------------------------------------------------------


def test_profiler_failing_or_killed_is_recorded_and_the_run_goes_on(tmp_path, fakes):
    out = tmp_path / "r.json"
    env = dict(fakes.batching, FAKE_PROFILER_FAIL="exit:3@1,kill@2")
    result = run_main("-c", write_spec(tmp_path, ranged_add(7)), "--ncu", "--run-batch-size",
                      "3", "--output", out, env=env)
    assert result.returncode == 1, result.stderr  # every run measured, two batches lost
    lines = lines_of(out)
    assert [line["status"] for line in lines if "op_name" in line] == ["ok"] * 7
    first, second, third = (line for line in lines if "ncu_file" in line)
    assert (first["status"], first["exit_status"]) == ("error", 3)
    assert first["error"] == "ncu exited with status 3"
    assert (second["status"], second["exit_status"]) == ("error", -9)
    assert second["error"] == "ncu was killed by signal 9 (SIGKILL)"
    assert (third["status"], third["exit_status"]) == ("ok", 0)
    assert lines[-1]["profiled_batches"] == {"ncu": {"ok": 1, "failed": 2}}
    assert lines[-1]["runs_ok"] == 7 and lines[-1]["runs_failed"] == 0
    assert "ncu batch 0|0|0_0 .. 0|0|0_2 failed: ncu exited with status 3" in result.stderr

    report = run_main(out, env=fakes.env, module="param_compute.profiling.ncu_report")
    assert report.returncode == 1
    assert "failed (ncu was killed by signal 9 (SIGKILL))" in report.stdout
    assert "1 kernel launches joined to 1 run passes" in report.stdout


CHILD_CRASH = textwrap.dedent("""
    import os
    from param_compute import OperatorInterface, register_operator

    class CrashInChild(OperatorInterface):
        def forward(self, *args):
            if os.environ.get("CUDA_VISIBLE_DEVICES") == "7":  # only the profiled child
                os.abort()
            return args[0]

    register_operator("test.crash_in_child", CrashInChild)
""")


def test_child_crash_is_recorded_and_later_batches_run(tmp_path, fakes):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "crash.py").write_text(CHILD_CRASH)
    spec = {**simple_op("test.crash_in_child", tensor(2)), **simple_op("torch.add", tensor(2),
                                                                       tensor(2))}
    out = tmp_path / "r.json"
    result = run_main("-c", write_spec(tmp_path, spec), "--workloads-dir", plugins, "--ncu",
                      "--batch-cuda-device", "7", "--output", out, env=fakes.env)
    assert result.returncode == 1, result.stderr
    lines = lines_of(out)
    assert kinds(lines) == ["run 0|0|0", "ncu 0|0|0-0|0|0", "run 0|0|0", "ncu 0|0|0-0|0|0",
                            "finish"]
    crashed, fine = (line for line in lines if "ncu_file" in line)
    assert crashed["status"] == "error" and crashed["exit_status"] == 128 + 6  # SIGABRT
    assert fine["status"] == "ok"
    assert all(line["status"] == "ok" for line in lines if "op_name" in line)


CHECKSUM = textwrap.dedent("""
    import os
    from param_compute import OperatorInterface, register_operator

    class Checksum(OperatorInterface):
        def forward(self, a, b):
            with open(os.environ["CHECKSUM_FILE"], "a") as stream:
                stream.write(f"{os.getpid()} {float((a * 3 + b).sum().detach()):.9g}\\n")
            return a

    register_operator("test.checksum", Checksum)
""")


def test_child_replays_the_same_data(tmp_path, fakes):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "checksum.py").write_text(CHECKSUM)
    sums = tmp_path / "sums.txt"
    spec = write_spec(tmp_path, ranged_add(4, "test.checksum"))
    result = run_main("-c", spec, "--workloads-dir", plugins, "--ncu", "--no-throughput",
                      "--seed", "7", "--output", tmp_path / "r.json",
                      env=dict(fakes.env, CHECKSUM_FILE=str(sums)))
    assert result.returncode == 0, result.stderr
    by_process = {}
    for line in sums.read_text().splitlines():
        pid, value = line.split()
        values = by_process.setdefault(pid, [])
        if not values or values[-1] != value:
            values.append(value)  # one value per run (its calls all see the same data)
    main, child = by_process.values()
    assert len(main) == 4 and len(set(main)) == 4
    assert child == main


# -- command-line checks ----------------------------------------------------------------------


def test_missing_binary_and_bad_options_exit_2_before_running(tmp_path, fakes):
    spec = write_spec(tmp_path, ranged_add(2))
    out = tmp_path / "r.json"
    for args, message in (
            (["--ncu", "--ncu-bin", tmp_path / "nowhere" / "ncu"], "no such executable"),
            (["--nsys", "--nsys-bin", "not-a-profiler-anywhere"], "no such executable"),
            (["--ncu", "--dry-run"], "a --dry-run measures none"),
            (["--ncu", "--run-batch-size", "0"], "--run-batch-size must be >= 1"),
            (["--ncu", "--ncu-args-file", tmp_path / "missing"], "cannot read"),
            (["--nsys", "--nsys-iteration", "0"], "--nsys-iteration must be >= 1")):
        result = run_main("-c", spec, "--output", out, *args, env=fakes.env)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr
        assert not out.exists()
    assert calls(fakes) == []


def test_find_binary_path_then_newest_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    versions = tmp_path / "nsight-compute"
    for version in ("2023.1.0", "2024.10.1", "2024.3.2"):
        install_fake(versions / version, "ncu")
    (versions / "2025.1.0").mkdir()
    (versions / "2025.1.0" / "ncu").write_text("not executable")
    monkeypatch.setitem(param_compute.profiling.nsight.INSTALL_LOCATIONS, "ncu",
                        (str(tmp_path / "cuda" / "bin" / "ncu"), str(versions / "*" / "ncu")))
    assert find_binary("ncu") == str(versions / "2024.10.1" / "ncu")
    on_path = install_fake(tmp_path / "bin", "ncu")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert find_binary("ncu") == str(on_path)
    assert find_binary("ncu", "ncu") == str(on_path)
    with pytest.raises(OptionsError, match="Nsight Systems .nsys. not found"):
        monkeypatch.setitem(param_compute.profiling.nsight.INSTALL_LOCATIONS, "nsys", ())
        find_binary("nsys")


# -- NVTX iteration ranges ---------------------------------------------------------------------


def test_iteration_ranges_only_with_the_child_option(monkeypatch):
    opened = []

    def recording(fn, name):
        def call():
            opened.append(name)
            return fn()
        return call

    monkeypatch.setattr("param_compute.measure.measurer.iteration_ranges", recording)
    spec = simple_op("torch.mm", tensor(4, 3), tensor(3, 2))
    param_compute.run(spec, warmup=2, iteration=3, backward=True)
    assert opened == []  # the main run's timed loop is untouched
    param_compute.run(spec, warmup=2, iteration=3, backward=True, nvtx_iterations=True)
    assert opened == [iteration_range_name("torch.mm", "0|0|0", "forward")] * 3 + \
        [iteration_range_name("torch.mm", "0|0|0", "backward")] * 3


def test_iteration_range_names_and_filter():
    name = iteration_range_name("aten::add.Tensor", "0|0_1|2_3", "backward")
    assert name == "param_compute|aten::add.Tensor|0|0_1|2_3|iteration|backward"
    assert parse_iteration_range(f"0:param_compute:{name}:none") == \
        ("aten::add.Tensor", "0|0_1|2_3", "backward")
    assert parse_iteration_range("param_compute|torch.mm|0|0|0|measure|forward") is None
    assert NCU_ITERATION_FILTER.startswith(f"regex:{annotations.NVTX_DOMAIN}@")
    wrapped = annotations.iteration_ranges(lambda: 42, name)
    assert wrapped() == 42  # no profiler attached: the ranges are no-ops


# -- the ncu report on a fixture log -----------------------------------------------------------


def _results_with_batch(tmp_path, log_name, run_ids, status="ok"):
    results = tmp_path / "results.json"
    header = {"run_options": {"device": "cuda"}, "sys_info": {}, "start_time": "x"}
    batch = {"ncu_file": log_name, "ncu_cmd_str": "ncu ...", "start_run_id": run_ids[0],
             "end_run_id": run_ids[-1], "status": status, "exit_status": 0,
             "config": {"op_name": "torch.mm", "config_build_id": "0|0",
                        "op_info": {"config": [{"build": None, "input": [
                            {"id": RunKey.from_id("op", r).input} for r in run_ids]}]},
                        "run_options": {"iteration": 2}}}
    results.write_text("".join(json.dumps(v) + "\n" for v in (
        header, {"op_name": "torch.mm", "id": run_ids[0], "status": "ok"}, batch,
        {"finish_time": "y"})))
    return results


def test_ncu_report_on_fixture_log(tmp_path):
    """A real ncu 2025.3 log (H100, ``--csv --nvtx``; two runs of torch.mm, two kernels each,
    trimmed to the Speed Of Light rows): launches join to runs through the start/end range."""
    log = tmp_path / "fixture_ncu.csv"
    log.write_text((FIXTURES / "ncu_details.csv").read_text())
    results = _results_with_batch(tmp_path, "elsewhere/fixture_ncu.csv",  # found beside RESULTS
                                  ["0|0|0_0", "0|0|0_1", "0|0|0_2"])
    table = tmp_path / "out.csv"
    assert ncu_report.main([str(results), "-m", "Memory Throughput", "--csv", str(table)]) == 0
    with open(table, newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert [(r["id"], r["pass"], r["launches"]) for r in rows] == [
        ("0|0|0_0", "forward", "1"), ("0|0|0_0", "forward", "1"),
        ("0|0|0_1", "forward", "1"), ("0|0|0_1", "forward", "1")]
    assert rows[0]["kernel"] == \
        "void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nn_align1>(T1::Params)"
    assert rows[1]["kernel"].startswith("void cublasLt::splitKreduce_kernel<32, 16, int,")
    assert float(rows[0]["duration_ns_mean"]) == 6048  # "Duration","ns","6,048"
    assert float(rows[0]["Memory Throughput"]) > 0

    launches = ncu_report.parse_ncu_csv(log.read_text())
    assert [launch.id for launch in launches] == ["0", "1", "7", "8"]
    joined = ncu_report.KernelTable()
    ncu_report.join(launches, joined, [])
    assert joined.unattributed == 0
    # the phase range (push/pop, same thread) is in the log too, but never taken for the run's
    assert all(parse_iteration_range(launch.nvtx)[2] == "forward" for launch in launches)


def test_ncu_report_raw_page_and_errors(tmp_path, capsys):
    raw = textwrap.dedent('''\
        ==PROF== Connected to process 42
        "ID","Process ID","Process Name","Host Name","Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg","Kernel Name","gpu__time_duration.sum","dram__bytes.sum"
        "","","","","","","msecond","Mbyte"
        "0","42","python","h","0:param_compute:param_compute|torch.mm|0|0|0_0|iteration|forward:none","void k<1, 2>(int)","0.0015","1,024.5"
        "1","42","python","h","","void stray(int)","0.002","3"
        ''')
    launches = ncu_report.parse_ncu_csv(raw)
    assert [l.kernel for l in launches] == ["void k<1, 2>(int)", "void stray(int)"]
    assert launches[0].duration_ns() == pytest.approx(1500)
    table = ncu_report.KernelTable()
    ncu_report.join(launches, table, ["dram__bytes.sum"])
    (stats,) = table.rows.values()
    assert stats.mean("dram__bytes.sum") == pytest.approx(1024.5)
    assert table.unattributed == 1
    assert ncu_report.parse_ncu_csv("==WARNING== No kernels were profiled.\n") == []

    not_results = tmp_path / "x.json"
    not_results.write_text("hello\n")
    assert ncu_report.main([str(not_results)]) == 2
    assert nsys_report.main([str(tmp_path / "missing.json")]) == 2
    results = _results_with_batch(tmp_path, str(tmp_path / "gone.csv"), ["0|0|0_0"])
    assert ncu_report.main([str(results)]) == 1
    assert "cannot read" in capsys.readouterr().out
    assert nsys_report.main([str(results)]) == 2  # no nsys batch in it


def test_a_kernel_table_shows_names_from_a_report_as_they_are():
    import io

    from rich.console import Console

    from param_compute.profiling.profiles import KernelTable, render

    table = KernelTable()
    table.add(("torch.mm", "0|0|0", "forward"), "void k<[/bold]>\x1b[2J", 1000.0)
    out = io.StringIO()
    render(table, Console(file=out, width=200), "kernels")
    assert "void k<[/bold]>\\x1b[2J" in out.getvalue() and "\x1b" not in out.getvalue()
