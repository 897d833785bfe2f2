"""One run pipeline behind every door: the command line, ``param_compute.run`` and the children.

* custom namespaces (``--allow-namespace fbgemm``) reach the isolated worker and the profiled
  (``--ncu``) child through the run options; their configs are isolated by default, so a
  crashing custom kernel is an error record;
* ``param_compute.run(spec, output=..., resume=True)`` completes a file a killed command-line
  run left, with the command line's header;
* the shape that keeps it so: small ``cli`` functions, run keys formatted by ``RunKey`` only,
  sink hooks called without ``hasattr``.
"""

from __future__ import annotations

import ast
import json
import signal
import textwrap
from pathlib import Path

import pytest

import param_compute
from conftest import REPO, read_results, run_cli, simple_op, start_cli, tensor, write_spec
from test_nsight import fakes, kinds, lines_of, run_main  # noqa: F401  (fakes: a fixture)

PACKAGE = REPO / "param_compute"

#: A plugin defining ``pcrash::segv``, an operator of a custom namespace whose kernel crashes
#: the process (as an out-of-bounds fbgemm kernel does on generated data, but every time).
CRASHING_NAMESPACE = textwrap.dedent("""
    import os
    import signal

    import torch

    LIBRARY = torch.library.Library("pcrash", "DEF")
    LIBRARY.define("segv(Tensor x) -> Tensor")

    def segv(x):
        os.kill(os.getpid(), signal.SIGSEGV)
        return x

    LIBRARY.impl("segv", segv, "CompositeExplicitAutograd")
""")

CUMSUM = "fbgemm::asynchronous_complete_cumsum(Tensor t_in) -> Tensor"
OFFSETS_RANGE = "fbgemm::offsets_range(Tensor offsets, SymInt range_size) -> Tensor"


def _schema_op(schema: str, *args) -> dict:
    name = schema.split("(", 1)[0]
    return simple_op(name, *args, builds=[{"args": [{"type": "str", "value": schema}]}])


def _custom_spec(tmp_path: Path) -> tuple:
    """torch.add, an fbgemm op that runs on the CPU, one that fails (a negative size) and the
    crashing custom op; the plugin folder defining the latter."""
    pytest.importorskip("fbgemm_gpu")
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "pcrash.py").write_text(CRASHING_NAMESPACE)
    spec = {**simple_op("torch.add", tensor(8), tensor(8)),
            **_schema_op(CUMSUM, tensor(16, dtype="long", value_range=[0, 5])),
            **_schema_op(OFFSETS_RANGE, tensor(8, dtype="long", value_range=[0, 3]),
                         {"type": "int", "value": -5}),
            **simple_op("pcrash::segv", tensor(4))}
    return write_spec(tmp_path, spec), plugins


def _statuses(path: Path) -> dict:
    _, lines, _ = read_results(path)
    return {run["op_name"]: (run["status"], (run.get("error") or {}).get("type"))
            for run in lines if "op_name" in run}


EXPECTED = {"torch.add": ("ok", None), "fbgemm::asynchronous_complete_cumsum": ("ok", None),
            "fbgemm::offsets_range": ("error", "RuntimeError"),
            "pcrash::segv": ("error", "WorkerLost")}


@pytest.mark.parametrize("isolate", [["--isolate"], []], ids=["isolate", "isolated-by-default"])
def test_custom_namespaces_reach_the_worker_and_a_crash_is_an_error_record(tmp_path, isolate):
    spec, plugins = _custom_spec(tmp_path)
    out = tmp_path / "r.json"
    result = run_cli("-c", spec, *isolate, "--allow-namespace", "fbgemm", "--allow-namespace",
                     "pcrash", "--workloads-dir", plugins, "--output", out)
    assert result.returncode == 1, result.stderr
    assert _statuses(out) == EXPECTED
    _, runs, finish = read_results(out)
    crashed = next(run for run in runs if run["op_name"] == "pcrash::segv")
    assert crashed["error"]["message"] == "crashed: signal 11 (SIGSEGV)"
    assert "could not start" not in result.stderr and "aborted" not in finish
    assert (finish["runs_ok"], finish["runs_failed"]) == (2, 2)


def test_no_isolate_custom_measures_in_process_so_the_crash_ends_the_run(tmp_path):
    spec, plugins = _custom_spec(tmp_path)
    out = tmp_path / "r.json"
    process = start_cli("-c", spec, "--no-isolate-custom", "--allow-namespace", "fbgemm",
                        "--allow-namespace", "pcrash", "--workloads-dir", plugins,
                        "--output", out)
    process.communicate(timeout=300)
    assert process.returncode == -signal.SIGSEGV
    _, runs, _ = read_results(out)[0], lines_of(out)[1:], None
    assert [run["op_name"] for run in runs] == ["torch.add", "fbgemm::asynchronous_complete_cumsum",
                                                "fbgemm::offsets_range"]


def test_ncu_child_replays_custom_namespaces_with_the_run_s_options(tmp_path, fakes):  # noqa: F811
    spec, plugins = _custom_spec(tmp_path)
    out = tmp_path / "r.json"
    result = run_main("-c", spec, "--ncu", "--allow-namespace", "fbgemm", "--allow-namespace",
                      "pcrash", "--workloads-dir", plugins, "--output", out, env=fakes.env)
    assert result.returncode == 1, result.stderr  # the two failed runs; every batch is fine
    assert _statuses(out) == EXPECTED
    lines = lines_of(out)
    assert kinds(lines) == ["run 0|0|0", "ncu 0|0|0-0|0|0", "run 0|0|0", "ncu 0|0|0-0|0|0",
                            "run 0|0|0", "run 0|0|0", "finish"]
    batches = [line for line in lines if "ncu_file" in line]
    assert [batch["status"] for batch in batches] == ["ok", "ok"]
    assert batches[1]["config"]["op_name"] == "fbgemm::asynchronous_complete_cumsum"
    assert lines[-1]["profiled_batches"] == {"ncu": {"ok": 2, "failed": 0}}
    assert "pass --allow-namespace" not in result.stderr


def test_a_worker_that_cannot_start_ends_the_run_once(tmp_path, monkeypatch, caplog):
    """A setup the worker refuses is the same for every run: one message, the run ends."""
    from param_compute.runtime import child

    spec = {**simple_op("torch.add", tensor(2), tensor(2)),
            **simple_op("torch.mul", tensor(2), tensor(2))}
    real = child.setup

    def broken(spec_entries, source, options):
        given = real(spec_entries, source, options)
        given["options"]["warmup"] = -1  # the worker's check refuses it
        return given

    monkeypatch.setattr("param_compute.runtime.isolation.setup", broken)
    out = tmp_path / "r.json"
    result = param_compute.run(spec, isolate=True, output=out)
    assert result.exit_status == 1 and result.records == []
    assert result.summary.aborted.startswith("the isolated worker could not start: ")
    assert "--warmup must be >= 0, got -1" in result.summary.aborted
    messages = [r.getMessage() for r in caplog.records if "could not start" in r.getMessage()]
    assert len(messages) == 1
    _, runs, finish = read_results(out)
    assert runs == [] and finish["aborted"] == result.summary.aborted


# -- param_compute.run completes what the command line started -------------------------------

KILLER = textwrap.dedent("""
    import os
    import signal
    from param_compute import OperatorInterface, register_operator

    class KillOnce(OperatorInterface):
        \"\"\"Kills its process the first time it runs (the marker file says it did).\"\"\"

        def forward(self, x):
            marker = os.environ["KILL_MARKER"]
            if not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            return x

    register_operator("test.kill_once", KillOnce)
""")


def test_library_resume_completes_a_killed_command_line_run(tmp_path, monkeypatch):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "killer.py").write_text(KILLER)
    monkeypatch.setenv("KILL_MARKER", str(tmp_path / "killed"))
    spec = write_spec(tmp_path, {**simple_op("torch.add", tensor(4), tensor(4)),
                                 **simple_op("test.kill_once", tensor(4)),
                                 **simple_op("torch.mul", tensor(4), tensor(4))})
    out, csv = tmp_path / "r.json", tmp_path / "r.csv"
    process = start_cli("-c", spec, "--workloads-dir", plugins, "--output", out, "--csv", csv)
    process.communicate(timeout=300)
    assert process.returncode == -signal.SIGKILL
    cli_header = lines_of(out)[0]
    assert [line["op_name"] for line in lines_of(out)[1:]] == ["torch.add"]

    result = param_compute.run(spec, workloads_dirs=[plugins], output=out, resume=True,
                               csv=csv)
    assert result.exit_status == 0, result.summary.failed
    assert [r["op_name"] for r in result.records] == ["test.kill_once", "torch.mul"]
    lines = lines_of(out)
    runs = [(line["op_name"], line["id"]) for line in lines if "op_name" in line]
    assert runs == [("torch.add", "0|0|0"), ("test.kill_once", "0|0|0"), ("torch.mul", "0|0|0")]
    assert lines[0] == cli_header  # the file is the command line's, continued
    marker = next(line for line in lines if "resume_time" in line)
    library_options = marker["resume_options"]
    assert set(library_options) == set(cli_header["run_options"])
    for key, value in library_options.items():  # the same run, however it was started
        if key not in ("cmd_args", "start_time"):
            assert value == cli_header["run_options"][key], key
    assert set(library_options["cmd_args"]) <= set(cli_header["run_options"]["cmd_args"])
    assert len(csv.read_text().splitlines()) == 1 + 3  # the export rebuilt with all three


def test_library_output_file_has_the_command_line_s_header(tmp_path):
    spec = write_spec(tmp_path, simple_op("torch.add", tensor(4), tensor(4)))
    cli_out, lib_out = tmp_path / "cli.json", tmp_path / "lib.json"
    assert run_cli("-c", spec, "-i", "2", "--output", cli_out).returncode == 0
    result = param_compute.run(spec, iteration=2, output=lib_out)
    cli_header, cli_runs, cli_finish = read_results(cli_out)
    lib_header, lib_runs, lib_finish = read_results(lib_out)
    assert result.path == lib_out and result.header == lib_header
    assert set(lib_header) == set(cli_header)
    assert set(lib_header["run_options"]) == set(cli_header["run_options"])
    assert set(lib_header["sys_info"]) == set(cli_header["sys_info"])
    assert lib_header["run_options"]["spec_sha256"] == cli_header["run_options"]["spec_sha256"]
    assert set(lib_finish) == set(cli_finish)
    assert [(r["op_name"], r["id"], len(r["metric"]["forward"]["measure.time"]))
            for r in lib_runs] == [("torch.add", "0|0|0", 2)]


# -- the shape that keeps one pipeline --------------------------------------------------------

MAX_CLI_LINES = 60
MAX_CLI_COMPLEXITY = 15


def cyclomatic_complexity(function: ast.AST) -> int:
    """McCabe's number: 1 + decision points (branches, loops, handlers, boolean operands,
    comprehension clauses, conditional expressions, match cases). Nested functions count on
    their own."""
    count = 1
    for node in _own_nodes(function):
        if isinstance(node, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.IfExp,
                             ast.ExceptHandler, ast.Assert, ast.match_case)):
            count += 1
        elif isinstance(node, ast.comprehension):
            count += 1 + len(node.ifs)
        elif isinstance(node, ast.BoolOp):
            count += len(node.values) - 1
    return count


def _own_nodes(function: ast.AST):
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_complexity_measure_counts_decisions():
    [function] = _functions_of("""
        def f(a, b):
            if a and b or a:
                for x in a:
                    pass
            try:
                pass
            except ValueError:
                pass
            def inner():
                if a:
                    pass
            return [y for y in b if y] if a else None
    """)
    # 1 + if + 2 (and/or) + for + except + comprehension (1 + its if) + conditional expression
    assert cyclomatic_complexity(function) == 9


def _functions_of(source: str):
    return [node for node in ast.parse(textwrap.dedent(source)).body
            if isinstance(node, ast.FunctionDef)]


def test_command_line_functions_are_short_and_simple():
    too_big = []
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        for function in _functions(path):
            lines = function.end_lineno - function.lineno + 1
            complexity = cyclomatic_complexity(function)
            if lines > MAX_CLI_LINES or complexity > MAX_CLI_COMPLEXITY:
                too_big.append(f"{path.name}:{function.lineno} {function.name}: {lines} lines, "
                               f"complexity {complexity}")
    assert not too_big, (f"cli functions over {MAX_CLI_LINES} lines or complexity "
                         f"{MAX_CLI_COMPLEXITY}:\n  " + "\n  ".join(too_big))


def _formats_a_key(node: ast.AST) -> bool:
    """An f-string with a '|' between two formatted values, a ``"|".join(...)`` or ``"...|..."
    % ...``: text in the run key's form built by hand."""
    if isinstance(node, ast.JoinedStr):
        parts = node.values
        return any(isinstance(parts[i - 1], ast.FormattedValue)
                   and isinstance(parts[i], ast.Constant) and str(parts[i].value).startswith("|")
                   and i + 1 < len(parts) for i in range(1, len(parts)))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "join":
        target = node.func.value
        return (isinstance(target, ast.Constant) and target.value == "|") or (
            isinstance(target, ast.Name) and target.id == "SEPARATOR")
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return isinstance(node.left, ast.Constant) and "|%" in str(node.left.value)
    return False


def test_run_keys_are_formatted_by_runkey_only():
    assert _formats_a_key(ast.parse('f"{op}|{run_id}"').body[0].value)
    assert not _formats_a_key(ast.parse('f"{a} | b"').body[0].value)
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "plan" / "runkey.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if _formats_a_key(node):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, "run keys formatted outside plan/runkey.py:\n  " + "\n  ".join(found)


def test_the_engine_calls_declared_hooks_never_hasattr():
    source = (PACKAGE / "runtime" / "engine.py").read_text(encoding="utf-8")
    calls = [node.func.id for node in ast.walk(ast.parse(source))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)]
    assert "hasattr" not in calls


def test_a_sink_of_the_bare_interface_still_gets_its_hooks():
    seen = []

    class Bare:
        def start(self, total):
            seen.append(("start", total))

        def run_done(self, run, record):
            seen.append(("done", run.id))

        def end_runs(self, summary):
            seen.append(("end", summary.ok))

        def finish(self, summary):
            seen.append(("finish", summary.ok))

    param_compute.run(simple_op("torch.add", tensor(2), tensor(2)), dry_run=True, sinks=[Bare()])
    assert seen == [("start", 1), ("done", "0|0|0"), ("end", 0), ("finish", 0)]


def test_flags_are_declared_once_on_the_options():
    from param_compute.cli.run_benchmark import build_parser, options_from_args
    from param_compute.pipeline.outputs import OutputPlan
    from param_compute.runtime.flags import values_from_args
    from param_compute.runtime.options import RunOptions

    args = build_parser().parse_args([
        "-c", "s.json", "-w", "3", "--exec-mode", "continuous", "--cuda-l2-cache",
        "--no-throughput", "--max-memory", "1KiB", "--allow-namespace", "fbgemm",
        "--workloads-dir", "plug", "--no-isolate-custom", "--peaks", "p.json",
        "--output", "r.json", "--resume", "--no-progress", "--shard", "0/2"])
    options = options_from_args(args)
    assert options == RunOptions(warmup=3, exec_mode="continuous", cuda_l2_cache=True,
                                 throughput=False, max_memory=1024, allow_namespaces=("fbgemm",),
                                 workloads_dirs=("plug",), isolate_custom=False, peaks="p.json")
    assert OutputPlan(**values_from_args(OutputPlan, args)) == OutputPlan(
        output_prefix="benchmark_result", output=Path("r.json"), resume=True, progress=False,
        shard="0/2")
    defaults = build_parser().parse_args([])
    assert options_from_args(defaults) == RunOptions()
    assert json.loads(json.dumps(RunOptions().to_json()))  # plain JSON


def test_every_door_builds_one_session(tmp_path, monkeypatch):
    """The command line, ``param_compute.run`` and PARAM's ``Benchmark.run()`` each assemble
    their run through ``Session.build``, exactly once."""
    import io

    from param_compute.lib.config import BenchmarkConfig
    from param_compute.lib.pytorch.benchmark import make_default_benchmark
    from param_compute.lib.pytorch.config_util import get_benchmark_options
    from param_compute.pipeline.session import Session

    built = []
    real_build = Session.build.__func__

    def counted(cls, spec, options=None, outputs=None, **keywords):
        built.append(type(spec).__name__)
        return real_build(cls, spec, options, outputs, **keywords)

    monkeypatch.setattr(Session, "build", classmethod(counted))
    spec = simple_op("torch.neg", tensor(2))
    assert run_cli("-c", write_spec(tmp_path, spec), "--output", tmp_path / "r.json",
                   "--dry-run").returncode == 0
    assert param_compute.run(spec, dry_run=True).exit_status == 0
    options = get_benchmark_options()
    options.update(out_stream=io.StringIO())
    config = BenchmarkConfig(options)
    config.load(spec)
    make_default_benchmark(config).run()
    assert built == ["PosixPath", "dict", "dict"]
    assert json.loads(options["out_stream"].getvalue().splitlines()[0])["op_name"] == "torch.neg"
