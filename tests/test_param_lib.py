"""``param_compute.lib``: PARAM's library API at PARAM's module paths, over the engine."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest
import torch

from conftest import REPO, EXAMPLES, ZYGOTE, tensor
from param_compute.lib import __version__
from param_compute.lib import pytorch as lib_pytorch
from param_compute.lib.config import BenchmarkConfig, OperatorConfig, make_op_config
from param_compute.lib.data import DataGenerator, data_generator_map
from param_compute.lib.init_helper import get_logger, init_logging, load_modules
from param_compute.lib.iterator import (ConfigIterator, DefaultConfigIterator,
                                        RangeConfigIterator, config_iterator_map)
from param_compute.lib.operator import OperatorInterface, op_map, register_operators
from param_compute.lib.pytorch.benchmark import make_default_benchmark
from param_compute.lib.pytorch.config_util import (ExecutionPass, OpExecutionMode,
                                                   create_bench_config, create_op_args,
                                                   create_op_info, create_type,
                                                   get_benchmark_options, get_sys_info)
from param_compute.lib.pytorch.op_executor import OpExecutor
from param_compute.lib.pytorch.operator_impl import (BuildableOp, CallableOp, TorchScriptOp,
                                                     UnaryOp)

RUN_OP = REPO.parent / "shared" / "param-compat" / "run_op.py"


def _relative_imports_to_param_compute(source: str) -> str:
    """Only the imports change: ``from ...lib.x import`` -> ``from param_compute.lib.x import``."""
    return re.sub(r"^from \.\.\.(\w)", r"from param_compute.\1", source, flags=re.M)


def test_param_s_run_op_runs_with_only_its_imports_rewritten(tmp_path):
    if not RUN_OP.is_file():
        pytest.skip("../shared/param-compat is not beside this checkout")
    original = RUN_OP.read_text()
    script = tmp_path / "run_op.py"
    script.write_text(_relative_imports_to_param_compute(original))
    changed = [(a, b) for a, b in zip(original.splitlines(), script.read_text().splitlines())
               if a != b]
    assert changed and all(a.startswith("from ...") and b.startswith("from param_compute.")
                           for a, b in changed)
    done = ZYGOTE.start([], script=script, cwd=tmp_path)  # ``python run_op.py``, pre-imported
    stdout, stderr = done.communicate(timeout=300)
    assert done.returncode == 0, stderr
    out = stdout.split("### Benchmark Results ###")[1]
    assert re.findall(r"^pass: (\w+)$", out, flags=re.M) == ["forward", "backward"]
    times = [float(t) for t in re.findall(r"^measure\.time \[([0-9.e-]+)\]$", out, flags=re.M)]
    assert len(times) == 2 and all(t > 0 for t in times)
    assert re.findall(r"^measure\.gpu\.memory \[(\S+)\]$", out, flags=re.M) == ["0", "0"]


def test_config_util_builders():
    info = create_op_info()
    assert info["build_iterator"] is None and info["input_data_generator"] == \
        "PyTorch:DefaultDataGenerator"
    assert info["config"] == [{"build": [], "input": []}]
    assert create_bench_config("torch.mm") == {"torch.mm": create_op_info()}
    first, second = create_type("tensor"), create_type("tensor")
    first["shape"] = [2]
    assert second == {"type": "tensor", "dtype": "float", "shape": None}
    assert create_type("int_range") == {"type": "int", "value_range": None}
    assert create_op_args([first], {"k": 1}) == {"args": [first], "kwargs": {"k": 1}}
    options = get_benchmark_options()
    assert (options["device"], options["warmup"], options["iteration"]) == ("cpu", 1, 1)
    assert options["pass_type"] is ExecutionPass.FORWARD
    assert options["op_exec_mode"] is OpExecutionMode.DISCRETE
    assert str(ExecutionPass.BACKWARD) == "ExecutionPass.BACKWARD"
    assert get_sys_info()["param_train_compute_version"] == __version__


def test_interfaces_and_maps_are_the_engine_s():
    import param_compute

    assert OperatorInterface is param_compute.OperatorInterface
    assert DataGenerator is param_compute.DataGenerator
    assert ConfigIterator is param_compute.ConfigIterator
    assert config_iterator_map["RangeConfigIterator"] is RangeConfigIterator
    assert "PyTorch:DefaultDataGenerator" in data_generator_map
    assert isinstance(op_map["torch.nn.ReLU"], OperatorInterface)  # a built-in workload
    with pytest.raises(TypeError):
        op_map["torch.mm"] = None  # read-only


def test_make_op_config_resolves_like_the_engine(caplog):
    info = create_op_info()
    config = make_op_config("torch.mm", info, "cpu")
    assert isinstance(config, OperatorConfig) and config.info is info
    assert config.op.device == "cpu" and config.op.forward(torch.eye(2), torch.eye(2)).shape == (2, 2)
    assert config.build_iterator is DefaultConfigIterator
    assert config.input_iterator is DefaultConfigIterator and config.build_data_generator is None
    args, kwargs = config.input_data_generator().get_data(
        {"args": [tensor(3, 4)], "kwargs": {}}, "cpu")
    assert args[0].shape == (3, 4) and kwargs == {}
    assert make_op_config("aten::relu", info, "cpu").op is not None
    assert make_op_config("no.such_op", info, "cpu").op is None
    info = dict(info, input_data_generator="NoSuchGenerator", input_iterator="RangeConfigIterator")
    with caplog.at_level(logging.WARNING, logger="param_compute"):
        get_logger().propagate = True
        try:
            assert make_op_config("torch.mm", info, "cpu") is None
        finally:
            get_logger().propagate = False
    assert "invalid input_data_generator" in caplog.text


def _executor(op, **changes):
    options = get_benchmark_options()
    options.update(changes)
    return OpExecutor("op", op, options)


def test_op_executor_returns_param_s_metric_dict():
    a, b = torch.rand(16, 16, requires_grad=True), torch.rand(16, 16, requires_grad=True)
    result = _executor(CallableOp(torch.mm), warmup=2, iteration=3,
                       pass_type=ExecutionPass.BACKWARD).run([a, b], {}, "0:0:0")
    assert set(result) == {"forward", "backward"}
    for metric in result.values():
        assert set(metric) == {"warmup.time", "measure.time", "warmup.gpu.memory",
                               "measure.gpu.memory"}
        assert len(metric["warmup.time"]) == 2 and len(metric["measure.time"]) == 3
        assert all(t > 0 for t in metric["measure.time"]) and metric["measure.gpu.memory"] == [0] * 3
    assert a.grad is not None  # the backward pass ran
    continuous = _executor(CallableOp(torch.add), iteration=4,
                           op_exec_mode=OpExecutionMode.CONTINUOUS).run([a, b], {}, "0")
    assert len(continuous["forward"]["measure.time"]) == 4  # blocks of one call
    assert _executor(CallableOp(torch.add), iteration=0).run([a, b], {}, "0")["forward"][
        "measure.time"] == []


def test_operator_impl_classes():
    x = torch.zeros(3)
    _executor(UnaryOp("add_"), warmup=0, iteration=2).run([x, torch.ones(3)], {}, "0")
    assert x.tolist() == [2.0, 2.0, 2.0]  # in place, on the first argument
    with pytest.raises(RuntimeError, match="no backward pass"):
        _executor(UnaryOp("add_"), pass_type=ExecutionPass.BACKWARD).run([x, x], {}, "0")
    linear = BuildableOp(torch.nn.Linear)
    linear.device = "cpu"
    linear.build(4, 2)
    assert isinstance(linear.func, torch.nn.Linear) and linear.constructor is torch.nn.Linear
    assert linear.forward(torch.rand(5, 4)).shape == (5, 2) and linear.fwd_out.shape == (5, 2)
    aten = TorchScriptOp("aten::add")
    aten.build("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")
    assert aten.forward(torch.ones(2), torch.ones(2), 3).tolist() == [4.0, 4.0]
    assert aten.func_name == "aten::add"


def test_register_operators_and_benchmark_run_through_the_engine(tmp_path):
    class Twice(OperatorInterface):
        def forward(self, x):
            return x * 2

    register_operators({"test_lib.twice": Twice()})
    with pytest.raises(ValueError, match="duplicate"):
        register_operators({"test_lib.twice": Twice()})
    options = get_benchmark_options()
    options.update(iteration=2, out_stream=io.StringIO())
    bench_config = BenchmarkConfig(options)
    config = create_bench_config("test_lib.twice")
    config["test_lib.twice"]["config"][0]["input"].append(create_op_args([tensor(4)], {}))
    config["torch.mm"] = json.loads((EXAMPLES / "matmul_sweep.json").read_text())["torch.mm"]
    bench_config.load(config)
    assert [c.name for c in bench_config.op_configs] == ["test_lib.twice", "torch.mm"]
    benchmark = make_default_benchmark(bench_config)
    benchmark.run()
    lines = [json.loads(line) for line in options["out_stream"].getvalue().splitlines()]
    assert lines[0]["op_name"] == "test_lib.twice" and lines[0]["id"] == "0|0|0"
    assert len(lines) == len(benchmark.records) > 2
    assert all(line["status"] == "ok" and len(line["metric"]["forward"]["measure.time"]) == 2
               for line in lines)


def test_load_modules_imports_every_module_of_a_package(tmp_path, monkeypatch):
    package = tmp_path / "my_param_plugins"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "ops.py").write_text(
        "import torch\n"
        "from param_compute.lib.operator import register_operator\n"
        "from param_compute.lib.pytorch.operator_impl import CallableOp\n"
        "register_operator('test_lib.neg', CallableOp(torch.neg))\n")
    (package / "needs_missing.py").write_text("import no_such_module_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_param_plugins

    load_modules(my_param_plugins)  # the module that can't import is skipped with a warning
    load_modules(lib_pytorch)
    config = make_op_config("test_lib.neg", create_op_info(), "cpu")
    assert config.op.forward(torch.ones(2)).tolist() == [-1.0, -1.0]


def test_init_logging_configures_the_engine_s_logger():
    logger = init_logging(logging.DEBUG)
    assert logger is get_logger() and logger.level == logging.DEBUG
    assert len(logger.handlers) == 1
    init_logging(logging.INFO)
    assert len(logger.handlers) == 1 and logger.level == logging.INFO
