"""PARAM plugin files load unchanged: PARAM's package layout, shared helpers, replaced built-ins,
entry points, and the extra spec keys a custom iterator or data generator declares."""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import sys
import textwrap

import pytest
import torch

import param_compute
import param_compute.lib.operator
from conftest import REPO, read_results, run_cli, simple_op, tensor, write_spec
from param_compute.errors import SpecError
from param_compute.plugins import registry
from param_compute.lib.pytorch.operator_impl import BuildableOp, CallableOp, UnaryOp
from param_compute.runtime.toolchain import Toolchain

PARAM_COMPAT = REPO.parent / "shared" / "param-compat"

# A plugin written PARAM's way: relative imports of PARAM's library, a custom input iterator
# reading its own "repeat" key (declared in spec_keys), a data generator reading a "fill" key.
PARAM_STYLE_PLUGIN = '''
import torch

from ...lib.data import DataGenerator, register_data_generator
from ...lib.iterator import ConfigIterator, register_config_iterator
from ...lib.operator import OperatorInterface, register_operators
from ...lib.pytorch.operator_impl import CallableOp

SEEN = []


class RepeatIterator(ConfigIterator):
    spec_keys = {"repeat": "int: how many runs each arg-spec-list gives (default 1)"}

    def __init__(self, configs, key, device):
        super().__init__(configs, key, device)
        self._pairs = iter([
            (f"{index}r{turn}", {"args": asl.get("args", []), "kwargs": asl.get("kwargs", {})})
            for index, asl in enumerate(configs[key]) for turn in range(asl.get("repeat", 1))])

    def __next__(self):
        return next(self._pairs)


class FillGenerator(DataGenerator):
    spec_keys = {"fill": "float: the value every element of the tensor holds"}

    def get_data(self, config, device):
        return [torch.full(spec["shape"], float(spec.get("fill", 0.0)), device=device)
                for spec in config["args"]], {}


class Record(OperatorInterface):
    def forward(self, x):
        SEEN.append(float(x.sum()))
        return x


register_config_iterator("RepeatIterator", RepeatIterator)
register_data_generator("FillGenerator", FillGenerator)
register_operators({"param_style.twice": CallableOp(lambda x: x * 2),
                    "param_style.record": Record()})
'''


def _plugin_dir(tmp_path, files, name="plugins"):
    folder = tmp_path / name
    folder.mkdir()
    for file_name, text in files.items():
        (folder / file_name).write_text(textwrap.dedent(text))
    return folder


def _loaded(folder, file_name):
    """The module Python made of a plugin file (found by its path)."""
    path = str((folder / file_name).resolve())
    found = {id(m): m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == path}
    [module] = found.values()
    return module


def test_params_own_native_basic_ops_runs_its_test_config_unchanged(tmp_path, shared_configs):
    source = PARAM_COMPAT / "native_basic_ops.py"
    if not source.is_file():
        pytest.skip("../shared/param-compat is not beside this checkout")
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    shutil.copyfile(source, plugins / "native_basic_ops.py")
    config = shared_configs / "test_native_basic_ops.json"
    out = tmp_path / "r.json"
    result = run_cli("-c", config, "--workloads-dir", plugins, "--output", out, "-w", "0",
                     "-i", "1")
    assert result.returncode == 0, result.stderr
    assert (plugins / "native_basic_ops.py").read_bytes() == source.read_bytes()
    assert "skipped" not in result.stderr
    # its 18 names are all built-in ones: replaced, said in one warning
    [warning] = [line for line in result.stderr.splitlines() if "replaces built-in" in line]
    assert "native_basic_ops.py replaces built-in entries (18): torch.add_, torch.clamp_" in warning
    _, runs, _ = read_results(out)
    assert {run["op_name"] for run in runs} == set(json.loads(config.read_text()))
    assert all(run["status"] == "ok" and "error" not in run for run in runs)
    # the operators that ran are the plugin's: PARAM's classes, in PARAM's module layout
    module = _loaded(plugins, "native_basic_ops.py")
    assert module.__name__.endswith(".workloads.pytorch.native_basic_ops")
    assert module.__package__.startswith("param_compute_user_workloads.d")
    operators = Toolchain.start([plugins]).registries.operators
    assert type(operators["torch.mm"]()) is CallableOp
    assert type(operators["torch.add_"]()) is UnaryOp
    assert type(operators["torch.nn.Linear"]()) is BuildableOp
    assert type(Toolchain.start().registries.operators["torch.mm"]()) is not CallableOp


def test_a_param_style_plugin_with_its_own_iterator_key_runs_unchanged(tmp_path):
    plugins = _plugin_dir(tmp_path, {"param_style.py": PARAM_STYLE_PLUGIN})
    spec = simple_op("param_style.twice", tensor(4), iterator="RepeatIterator")
    spec["param_style.twice"]["config"][0]["input"][0]["repeat"] = 3
    spec["param_style.twice"]["config"][0]["input"].append({"args": [tensor(2)]})
    out = tmp_path / "r.json"
    result = run_cli("-c", write_spec(tmp_path, spec), "--workloads-dir", plugins, "--output",
                     out, "-w", "0", "-i", "2")
    assert result.returncode == 0, result.stderr
    _, runs, _ = read_results(out)
    assert [run["id"] for run in runs] == ["0|0|0r0", "0|0|0r1", "0|0|0r2", "0|0|1r0"]
    assert all(run["status"] == "ok" for run in runs)
    # the plugin's "...lib" is param_compute.lib itself, not a copy of it
    module = _loaded(plugins, "param_style.py")
    root = module.__name__.rsplit(".workloads.", 1)[0]
    assert sys.modules[f"{root}.lib.operator"] is param_compute.lib.operator
    assert module.CallableOp is CallableOp
    assert param_compute.lib.operator.__spec__.name == "param_compute.lib.operator"

    # --list-ops names the keys each plugin reads
    listed = run_cli("--list-ops", "--workloads-dir", plugins)
    assert listed.returncode == 0
    assert "RepeatIterator (reads repeat: int: how many runs each arg-spec-list gives" \
        in " ".join(listed.stdout.split())


def test_declared_keys_are_accepted_only_where_their_plugin_reads_them(tmp_path):
    plugins = _plugin_dir(tmp_path, {"param_style.py": PARAM_STYLE_PLUGIN})
    toolchain = Toolchain.start([plugins])

    def problems(spec):
        with pytest.raises(SpecError) as raised:
            toolchain.load(spec)
        return [(p.render("s"), p.hint) for p in raised.value.problems]

    repeat = simple_op("param_style.twice", tensor(4), iterator="RepeatIterator")
    repeat["param_style.twice"]["config"][0]["input"][0]["repeat"] = 2
    assert len(toolchain.load(repeat).operators) == 1
    # also where the build iterator reads it: the config entry
    repeat["param_style.twice"]["config"][0]["repeat"] = 2
    toolchain.load(repeat)

    # a misspelled key is still unknown; the hint names the declared one
    typo = simple_op("param_style.twice", tensor(4), iterator="RepeatIterator")
    typo["param_style.twice"]["config"][0]["input"][0]["repaet"] = 2
    [(message, hint)] = problems(typo)
    assert message == ("s: param_style.twice.config[0].input[0].repaet: unknown key 'repaet' "
                       "(did you mean 'repeat'?)")

    # an operator whose plugins do not read "repeat" may not use it
    default = simple_op("param_style.twice", tensor(4))
    default["param_style.twice"]["config"][0]["input"][0]["repeat"] = 2
    [(message, _)] = problems(default)
    assert "input[0].repeat: unknown key 'repeat'" in message
    # nor in a data spec: the iterator does not read data specs
    nested = simple_op("param_style.twice", tensor(4, repeat=2), iterator="RepeatIterator")
    [(message, _)] = problems(nested)
    assert "input[0].args[0].repeat: unknown key 'repeat'" in message

    # a data generator's key, in the data specs it generates
    filled = simple_op("param_style.record", tensor(2, 2, fill=1.5))
    filled["param_style.record"]["input_data_generator"] = "FillGenerator"
    result = param_compute.run(filled, workloads_dirs=[plugins], warmup=0, iteration=1)
    assert [r["status"] for r in result.records] == ["ok"]
    assert _loaded(plugins, "param_style.py").SEEN[-1] == 6.0
    filled["param_style.record"]["input_data_generator"] = "PyTorch:DefaultDataGenerator"
    [(message, hint)] = problems(filled)
    assert "args[0].fill: unknown key 'fill'" in message and "allowed keys" in hint


@pytest.mark.parametrize("helper", ["aa_shared", "zz_shared"])
def test_a_helper_shared_by_two_plugin_files_imports_whichever_sorts_first(tmp_path, helper):
    plugins = _plugin_dir(tmp_path, {
        f"{helper}.py": """
            from param_compute import OperatorInterface, register_operator

            IMPORTS = []
            IMPORTS.append(__name__)

            def scaled(factor):
                class Scaled(OperatorInterface):
                    def forward(self, x):
                        return x * factor
                return Scaled

            register_operator("shared.helper_op", scaled(1))
        """,
        "m_relative.py": f"""
            from ...lib.operator import register_operator
            from .{helper} import scaled

            register_operator("shared.relative", scaled(2))
        """,
        "n_plain.py": f"""
            import {helper}
            from ...lib.operator import register_operator

            register_operator("shared.plain", {helper}.scaled(3))
        """,
    })
    spec = {**simple_op("shared.relative", tensor(4)), **simple_op("shared.plain", tensor(4)),
            **simple_op("shared.helper_op", tensor(4))}
    for _ in range(2):  # the second toolchain replays what the first import registered
        result = param_compute.run(spec, workloads_dirs=[plugins], warmup=0, iteration=1)
        assert [r["status"] for r in result.records] == ["ok", "ok", "ok"]
    helper_module = _loaded(plugins, f"{helper}.py")
    assert len(helper_module.IMPORTS) == 1  # one module, run once, under every name
    assert helper_module.__name__.endswith(f".workloads.pytorch.{helper}")
    assert sys.modules[helper] is helper_module


def test_a_folders_init_runs_first_as_its_package(tmp_path):
    plugins = _plugin_dir(tmp_path, {
        "__init__.py": """
            from ...lib.operator import OperatorInterface, register_operator
            FACTOR = 7

            class Times(OperatorInterface):
                def forward(self, x):
                    return x * FACTOR

            register_operator("package.times", Times)
        """,
        "a_ops.py": """
            from . import FACTOR, Times
            from ...lib.operator import register_operator
            assert FACTOR == 7
            register_operator("package.times_again", Times)
        """,
    })
    for _ in range(2):
        registries = Toolchain.start([plugins]).registries
        assert not registries.failed_workloads
        assert {"package.times", "package.times_again"} <= set(registries.operators)
    assert _loaded(plugins, "__init__.py").__name__.endswith(".workloads.pytorch")


def test_a_plugin_replacing_a_built_in_name_warns_once_and_is_used(tmp_path):
    replacing = _plugin_dir(tmp_path, {"my_add.py": """
        import torch
        from ...lib.operator import OperatorInterface, register_operators

        CALLS = []

        class MyAdd(OperatorInterface):
            def forward(self, a, b):
                CALLS.append(a.shape)
                return torch.add(a, b)

        register_operators({"torch.add": MyAdd()})
    """})
    spec = write_spec(tmp_path, simple_op("torch.add", tensor(3), tensor(3)))
    result = run_cli("-c", spec, "--workloads-dir", replacing, "--output", tmp_path / "r.json",
                     "-w", "0", "-i", "2")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "replaces built-in" in line]
    assert warnings == [f"WARNING: workload {(replacing / 'my_add.py').resolve()} replaces "
                        "built-in entry: torch.add"]
    assert len(_loaded(replacing, "my_add.py").CALLS) >= 2  # the timed calls, at least
    # a later toolchain gets the plugin's operator again, without a second warning
    again = run_cli("-c", spec, "--workloads-dir", replacing, "--output", tmp_path / "r2.json")
    assert again.returncode == 0 and "replaces built-in" not in again.stderr
    # two plugins registering one name is still a duplicate: the second one is skipped
    other = _plugin_dir(tmp_path, {"other_add.py": """
        from param_compute import OperatorInterface, register_operator
        register_operator("torch.add", OperatorInterface)
    """}, name="other")
    failed = Toolchain.start([replacing, other]).registries.failed_workloads
    assert failed == {str((other / "other_add.py").resolve()):
                      "ValueError: duplicate operator registration: 'torch.add' is already "
                      "registered"}


def test_an_entry_point_module_written_params_way_loads(tmp_path, monkeypatch):
    site = tmp_path / "site"
    package = site / "my_param_ops"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text("FACTOR = 5\n")
    (package / "ops.py").write_text(textwrap.dedent("""
        from ...lib.operator import OperatorInterface, register_operators
        from .helpers import FACTOR

        class Times(OperatorInterface):
            def forward(self, x):
                return x * FACTOR

        register_operators({"entry_point.times": Times()})
    """))
    monkeypatch.syspath_prepend(str(site))
    group = importlib.metadata.EntryPoints([importlib.metadata.EntryPoint(
        "my_param_ops", "my_param_ops.ops", "param_compute.workloads")])
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda: group)
    registries = Toolchain.start().registries
    assert "entry_point.times" in registries.operators and not registries.failed_workloads
    module = _loaded(package, "ops.py")
    assert module.__name__.endswith(".workloads.pytorch.ops") and module.FACTOR == 5
    assert "my_param_ops.ops" not in sys.modules  # never imported the ordinary way


def test_built_in_workloads_a_script_imported_stay_replaceable(tmp_path, monkeypatch):
    """PARAM's scripts import the built-in workloads themselves (``load_modules``): their
    registrations, made outside any run, are still built-in ones; a script's own are not."""
    monkeypatch.setattr(registry, "_PROCESS_TABLES", registry.Registries())
    monkeypatch.setattr(registry, "_PROCESS_LOG", [])
    for module, name in (("param_compute.workloads.pytorch.fake", "test.builtin_like"),
                         ("a_script", "test.script_op")):
        exec(f"register_operator({name!r}, OperatorInterface)",
             {"__name__": module, "register_operator": param_compute.register_operator,
              "OperatorInterface": param_compute.OperatorInterface})
    plugins = _plugin_dir(tmp_path, {
        "a_replace.py": """
            from ...lib.operator import OperatorInterface, register_operator
            class Mine(OperatorInterface):
                pass
            register_operator("test.builtin_like", Mine)
        """,
        "b_duplicate.py": """
            from ...lib.operator import OperatorInterface, register_operator
            register_operator("test.script_op", OperatorInterface)
        """,
    })
    registries = Toolchain.start([plugins]).registries
    assert registries.operators["test.builtin_like"].__name__ == "Mine"
    assert list(registries.failed_workloads) == [str((plugins / "b_duplicate.py").resolve())]


HALF_REGISTERED = '''
import torch
from param_compute import register_operator
from param_compute.lib.pytorch.operator_impl import CallableOp

register_operator("half.first", CallableOp(torch.neg))
register_operator("torch.add", CallableOp(torch.sub))  # would replace a built-in
{failure}
'''


@pytest.mark.parametrize("failure, why", [
    ("raise SystemExit(0)", "raised SystemExit(0) at import"),
    ("raise SystemExit('bye')", "raised SystemExit(bye) at import"),
    ("raise GeneratorExit()", "raised GeneratorExit() at import"),
    ("raise ValueError('boom')", "ValueError: boom"),
])
def test_a_plugin_failing_at_import_is_reported_and_none_of_its_registrations_stay(
        tmp_path, failure, why):
    plugins = _plugin_dir(tmp_path, {
        "a_failing.py": HALF_REGISTERED.format(failure=failure),
        "b_good.py": "import torch\nfrom param_compute import register_operator\n"
                     "from param_compute.lib.pytorch.operator_impl import CallableOp\n"
                     "register_operator('good.abs', CallableOp(torch.abs))\n"})
    registries = Toolchain.start([plugins]).registries
    failing = str((plugins / "a_failing.py").resolve())
    assert registries.failed_workloads == {failing: why}
    assert "half.first" not in registries.operators and "good.abs" in registries.operators
    assert ("operator", "torch.add") in registries.builtin_names  # the built-in stays
    assert registries.operators["torch.add"]().forward(torch.ones(1), torch.ones(1)) == 2

    # a real process: the plugin does not end the run; it is named, the run goes on
    spec = write_spec(tmp_path, {**simple_op("good.abs", tensor(4)),
                                 **simple_op("torch.add", tensor(4), tensor(4))})
    out = tmp_path / "r.json"
    done = run_cli("-c", spec, "--workloads-dir", plugins, "--output", out, "-i", "1",
                   forked=True)
    assert done.returncode == 0, done.stderr
    assert f"workload module {failing} skipped: {why}" in done.stderr
    assert "replaces built-in" not in done.stderr
    assert [r["op_name"] for r in read_results(out)[1]] == ["good.abs", "torch.add"]
    # its operators are unknown, not half-there
    refused = run_cli("-c", write_spec(tmp_path, simple_op("half.first", tensor(4)), "h.json"),
                      "--workloads-dir", plugins, "--output", tmp_path / "h_r.json")
    assert refused.returncode == 2 and "unknown operator 'half.first'" in refused.stderr


def test_a_real_interrupt_while_a_plugin_imports_still_stops(tmp_path):
    plugins = _plugin_dir(tmp_path, {"interrupt.py": HALF_REGISTERED.format(
        failure="raise KeyboardInterrupt")})
    with pytest.raises(KeyboardInterrupt):
        Toolchain.start([plugins])


# PARAM's plugins declare no keys: this iterator reads "repeat" unannounced, and builds its
# combinations with PARAM's lib.generator.
UNDECLARED_PLUGIN = '''
from ...lib.generator import ListProduct, full_range
from ...lib.iterator import ConfigIterator, register_config_iterator
from ...lib.operator import register_operators
from ...lib.pytorch.operator_impl import CallableOp
import torch


class RepeatIterator(ConfigIterator):
    def __init__(self, configs, key, device):
        super().__init__(configs, key, device)
        turns = [(index, turn) for index, asl in enumerate(configs[key])
                 for (turn,) in ListProduct([full_range(0, asl.get("repeat", 1) - 1)])]
        self._pairs = iter([(f"{index}r{turn}", {"args": configs[key][index]["args"]})
                            for index, turn in turns])

    def __next__(self):
        return next(self._pairs)


register_config_iterator("UndeclaredRepeat", RepeatIterator)
register_operators({"undeclared.neg": CallableOp(torch.neg)})
'''


def test_an_unchanged_param_plugin_reading_undeclared_keys_runs_with_one_warning(tmp_path):
    plugins = _plugin_dir(tmp_path, {"undeclared.py": UNDECLARED_PLUGIN})
    spec = simple_op("undeclared.neg", tensor(4), iterator="UndeclaredRepeat")
    entry = spec["undeclared.neg"]["config"][0]
    entry["input"][0]["repeat"] = 2
    entry["input"].append({"args": [tensor(2)], "repeat": 1, "note": "x"})
    out = tmp_path / "r.json"
    done = run_cli("-c", write_spec(tmp_path, spec), "--workloads-dir", plugins, "--output",
                   out, "-w", "0", "-i", "1")
    assert done.returncode == 0, done.stderr
    assert [run["id"] for run in read_results(out)[1]] == ["0|0|0r0", "0|0|0r1", "0|0|1r0"]
    [warning] = [line for line in done.stderr.splitlines() if "no plugin declares" in line]
    assert warning.endswith(
        "keys no plugin declares accepted, for plugins that declare none (spec_keys): "
        "undeclared.neg.config[0].input[0].repeat (and 1 more 'repeat'), read there by "
        "UndeclaredRepeat; undeclared.neg.config[0].input[1].note, read there by "
        "UndeclaredRepeat")

    toolchain = Toolchain.start([plugins])
    # built-in iterators and generators still refuse unknown keys ...
    builtin = simple_op("undeclared.neg", tensor(4))
    builtin["undeclared.neg"]["config"][0]["input"][0]["repeat"] = 2
    with pytest.raises(SpecError, match=r"input\[0\].repeat: unknown key 'repeat'"):
        toolchain.load(builtin)
    # ... and so do the places the plugin does not read (a data spec: the generator's)
    nested = simple_op("undeclared.neg", tensor(4, repeat=2), iterator="UndeclaredRepeat")
    with pytest.raises(SpecError, match=r"args\[0\].repeat: unknown key 'repeat'"):
        toolchain.load(nested)
    # a plugin that declares its keys (spec_keys) still has its undeclared ones refused
    declaring = _plugin_dir(tmp_path, {"param_style.py": PARAM_STYLE_PLUGIN}, "declaring")
    typo = simple_op("param_style.twice", tensor(4), iterator="RepeatIterator")
    typo["param_style.twice"]["config"][0]["input"][0]["repaet"] = 2
    with pytest.raises(SpecError, match="unknown key 'repaet'"):
        Toolchain.start([declaring]).load(typo)
