"""Hostile specs: a spec file is data people pass around; opening one runs nothing but torch ops.

``tests/hostile_specs/`` holds one small spec per attack or malformation beyond the core corpus
(``tests/bad_specs/``): numbers JSON can't hold or int64 can't, invalid Unicode, terminal escapes in
names, encodings, syntax, duplicate keys, and operator names that try to reach files, processes or
code loading by another path (submodules, re-exports, lazy modules, deprecated attributes, aten
namespace attributes, chains, dunders, look-alike characters). Each one is refused cleanly: a
``SpecError`` naming the file, the JSON path and what is wrong. The very large and very deep cases
are generated at run time (``tmp_path``); a few files also go through the real command line.

Also: every public callable of the allowed namespaces is enumerated, and each one defined in an area
that touches files, the network, processes or code loading (or outside torch) must be refused,
under whatever name or alias it is reached.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import os
import subprocess
import time
import types
from pathlib import Path
from typing import Dict, NamedTuple

import pytest
import torch

from conftest import ZYGOTE, run_cli
from param_compute.spec import limits as spec_loader_limits
from param_compute.spec import loader as spec_loader
from param_compute.errors import EXIT_INVALID, SpecError, format_json_path
from param_compute.operators.resolution import FUNCTION_NAMESPACES, OperatorResolver
from param_compute.runtime.toolchain import Toolchain
from param_compute.spec.limits import MAX_OPERATORS, MAX_PROBLEMS

HOSTILE = Path(__file__).resolve().parent / "hostile_specs"
CORE = Path(__file__).resolve().parent / "bad_specs"
TOP = "(top level)"
GEN = "PyTorch:DefaultDataGenerator"
REFUSED = "is refused"
NO_NAMESPACE = "is not an operator namespace"


class Case(NamedTuple):
    path: str  # a substring of the problem's JSON path (as rendered)
    message: str  # a substring of its message or hint
    count: int = 1  # how many problems the file has in all


CASES: Dict[str, Case] = {
    # numbers: JSON allows any size, torch takes int64 and finite doubles
    "giant_int_literal.json": Case("torch.relu.config[0].input[0].args[0].shape[0]",
                                   "(401 digits) is out of range"),
    "int_literal_over_python_limit.json": Case("args[1].value", "(5000 digits) is out of range"),
    "int_above_int64.json": Case("kwargs.alpha.value",
                                 "integer 9223372036854775808 is out of range"),
    "int_below_int64.json": Case("args[0].shape[1]",
                                 "integer -9223372036854775809 is out of range"),
    "float_overflow.json": Case("torch.mul.config[0].input[0].args[1].value",
                                "number inf is not finite"),
    "float_overflow_in_value_range.json": Case("args[0].value_range[0]",
                                               "number -inf is not finite"),
    "infinity_constant.json": Case(TOP, "Infinity is not valid JSON"),
    "negative_infinity_constant.json": Case(TOP, "-Infinity is not valid JSON"),
    # strings and keys: valid Unicode, printable names (no terminal escapes, no bidi tricks)
    "lone_surrogate_value.json": Case("kwargs.reduction.value", "contains a lone surrogate"),
    "lone_surrogate_key.json": Case("kwargs.\\udc00", "contains a lone surrogate"),
    "reversed_surrogate_pair.json": Case("args[0].name", "contains a lone surrogate"),
    "escape_sequence_in_op_name.json": Case("torch.add\\x1b]0;pwned\\x07",
                                            "non-printable character U+001B"),
    "bidi_override_in_op_name.json": Case("\\u202edaol.hcrot", "non-printable character U+202E"),
    "newline_in_kwarg_name.json": Case("kwargs.alpha\\nbeta", "non-printable character U+000A"),
    "nul_in_op_name.json": Case("torch.add\\x00", "non-printable character U+0000"),
    # encodings
    "utf16_file.json": Case(TOP, "it looks like UTF-16: save it as UTF-8"),
    "overlong_utf8.json": Case(TOP, "not UTF-8 text (invalid start byte"),
    "utf8_encoded_surrogate.json": Case(TOP, "not UTF-8 text"),
    "double_byte_order_mark.json": Case(TOP, "malformed JSON at line 1 column 1"),
    "raw_control_char_in_string.json": Case(TOP, "Invalid control character"),
    # syntax and top level
    "trailing_data.json": Case(TOP, "malformed JSON at line 2 column 1: Extra data"),
    "trailing_comma.json": Case(TOP, "malformed JSON at line 2"),
    "comment.json": Case(TOP, "malformed JSON at line 1 column 1"),
    "single_quotes.json": Case(TOP, "enclosed in double quotes"),
    "top_level_string.json": Case(TOP, "expected object, got string 'torch.load'"),
    "top_level_number.json": Case(TOP, "expected object, got integer 42"),
    "top_level_null.json": Case(TOP, "expected object, got null"),
    "bom_then_array.json": Case(TOP, "expected object, got array"),
    "nested_too_deep.json": Case("torch.cat.config[0]", "nested more than 64 levels deep"),
    "duplicate_kwarg.json": Case("torch.add.config[0].input[0].kwargs.alpha",
                                 "duplicate key 'alpha'"),
    "duplicate_operator.json": Case("torch.add", "duplicate key 'torch.add'"),
    "duplicate_range_name.json": Case("args[0].__range__", "items must be unique: 'shape'"),
    # operator names: only registered workloads and torch's operator namespaces
    "refused_hub_load.json": Case("torch.hub.load", f"'torch.hub' {NO_NAMESPACE}"),
    "refused_jit_load.json": Case("torch.jit.load", f"'torch.jit' {NO_NAMESPACE}"),
    "refused_cpp_extension_load_inline.json": Case("torch.utils.cpp_extension.load_inline",
                                                   f"'torch.utils.cpp_extension' {NO_NAMESPACE}"),
    "refused_serialization_load.json": Case("torch.serialization.load",
                                            f"'torch.serialization' {NO_NAMESPACE}"),
    "refused_from_file.json": Case("torch.from_file", f"'torch.from_file' {REFUSED}"),
    "refused_aten_save.json": Case("aten::save", f"'aten::save' {REFUSED}"),
    "refused_aten_from_file.json": Case("aten::from_file", f"'aten::from_file' {REFUSED}"),
    "refused_aten_manual_seed.json": Case("aten::manual_seed", f"'aten::manual_seed' {REFUSED}"),
    "refused_aten_namespace_attribute.json": Case("aten::name",
                                                  "unknown aten operator 'aten::name'"),
    "refused_aten_private_attribute.json": Case("aten::_dir",
                                                "unknown aten operator 'aten::_dir'"),
    "refused_lazy_module.json": Case("torch.onnx", "is not an operator function"),
    "refused_deprecated_attribute.json": Case("torch.has_cuda", "torch has no 'has_cuda'"),
    "refused_get_device_module.json": Case("torch.get_device_module", REFUSED),
    "refused_typing_reexport.json": Case("torch.nn.functional.Optional",
                                         "defined outside torch (in typing)"),
    "refused_jit_internal_reexport.json": Case("torch.nn.functional.boolean_dispatch",
                                               "it is torch._jit_internal.boolean_dispatch"),
    "refused_utils_internal.json": Case("torch.profiler_allow_cudagraph_cupti_lazy_reinit_cuda12",
                                        "it is torch._utils_internal."),
    "refused_random_module.json": Case("torch.thread_safe_generator",
                                       "it is torch.random.thread_safe_generator"),
    "refused_share_memory.json": Case("torch.share_memory_", "moves memory between processes"),
    "refused_chain_through_functional.json": Case("torch.nn.functional.torch.load",
                                                  f"'torch.nn.functional.torch' {NO_NAMESPACE}"),
    "refused_importlib_chain.json": Case("torch.nn.functional.importlib.import_module",
                                         NO_NAMESPACE),
    "refused_ops_namespace.json": Case("torch.ops.aten.save", f"'torch.ops.aten' {NO_NAMESPACE}"),
    "refused_dunder_reduce.json": Case("torch.Tensor.__reduce_ex__",
                                       "private and dunder attributes"),
    "refused_namespace_alone.json": Case("torch", "'torch' is a namespace, not an operator"),
    "refused_empty_segment.json": Case("torch..add", "is not a dotted name"),
    "refused_fullwidth_name.json": Case("torch.\uff41dd", "is not a dotted name"),
    "refused_python_expression.json": Case("__import__('os').system('id')", "unknown operator"),
    "refused_module_as_operator.json": Case("torch.linalg", "is not an operator function"),
    "aten_name_with_space.json": Case("aten::add ", "malformed aten operator name"),
    "aten_schema_of_refused_operator.json": Case("aten::add.config[0].build[0].args[0].value",
                                                 "schema is for aten::save, not aten::add"),
    # ranges and expansion
    "int_range_int64_span.json": Case("args[1].value", "this range has 18446744073709551616 "
                                                       "values, over the", 2),
    "shape_range_int64_span.json": Case("args[0].shape[0]", "this range has 9223372036854775807 "
                                                            "values, over the", 2),
    "variant_too_many_runs.json": Case("torch.add.config[0].input[0]",
                                       "this variant expands to 1000000000000000 runs, over the"),
    "copy_from_listed_shape_out_of_range.json": Case(
        "args[1].__copy__[0].shape[1][1]", "source element index 1 is out of range: arg 0's "
                                           "'shape' has 1 elements"),
    "copy_into_ranged_int_value.json": Case("args[2].__copy__[0].value",
                                            "does not have as a list in every combination"),
    "copy_index_is_float.json": Case("args[1].__copy__[0].shape[1][1]",
                                     "expected integer, got number 1.0"),
    "custom_iterator_rejects_config.json": Case(
        "SplitTableBatchedEmbeddingBagsCodegen.config[0]",
        "SplitTableBatchedEmbeddingBagsCodegenInputIterator cannot expand this config: "
        "ValueError"),
    # memory: a view's storage is sized by its strides; a lazy range must not be listed
    "stride_longer_than_ranged_shape.json": Case("args[0].stride",
                                                 "stride has 3 entries but the shape has 2 dims"),
    "tbe_batch_range_step_zero.json": Case("SplitTableBatchedEmbeddingBagsCodegen.config[0]",
                                           "__range__ step must be positive, got 0"),
}

#: Through the command line's ``main(argv)`` as well.
CLI_CASES = ["giant_int_literal.json", "lone_surrogate_value.json",
             "escape_sequence_in_op_name.json", "refused_jit_internal_reexport.json"]


@pytest.fixture(scope="module")
def toolchain() -> Toolchain:
    return Toolchain.start()


def _text(problem) -> str:
    return problem.message + (f" ({problem.hint})" if problem.hint else "")


def _load_error(toolchain: Toolchain, spec) -> SpecError:
    with pytest.raises(SpecError) as info:
        toolchain.load(spec)
    return info.value


def _assert_clean(error: SpecError) -> None:
    """Every problem has a path tuple and a message; the report is printable UTF-8."""
    for problem in error.problems:
        assert isinstance(problem.path, tuple) and problem.message, problem
    rendered = error.render()
    rendered.encode("utf-8")
    assert all(ch.isprintable() or ch == "\n" for ch in rendered), ascii(rendered[:300])


def _assert_reported(error: SpecError, case: Case) -> None:
    _assert_clean(error)
    found = [(format_json_path(p.path), _text(p)) for p in error.problems]
    assert any(case.path in where and case.message in what for where, what in found), (
        f"no problem at {case.path!r} saying {case.message!r}; got:\n{error.render()}")


def _op(*args, kwargs=None, name="torch.add", iterator=None) -> dict:
    arg_spec_list = {"args": list(args)}
    if kwargs is not None:
        arg_spec_list["kwargs"] = kwargs
    op = {"input_data_generator": GEN, "config": [{"input": [arg_spec_list]}]}
    if iterator:
        op["input_iterator"] = iterator
    return {name: op}


def _tensor(*shape) -> dict:
    return {"type": "tensor", "dtype": "float", "shape": list(shape)}


# --- the committed corpus -------------------------------------------------------------------

def test_corpus_matches_table():
    files = {p.name for p in HOSTILE.iterdir()}
    assert files == set(CASES)
    assert len(files) >= 45
    assert not files & {p.name for p in CORE.iterdir()}, "no case repeats the core corpus"


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_spec_refused_in_process(toolchain, name):
    case = CASES[name]
    path = HOSTILE / name
    error = _load_error(toolchain, path)
    assert error.source == str(path)
    _assert_reported(error, case)
    assert len(error.problems) == case.count, error.render()
    assert name in error.render()


# --- generated at run time: too large or too deep to commit -----------------------------------

def _genericlist(depth: int) -> dict:
    spec = {"type": "int", "value": 1}
    for _ in range(depth):
        spec = {"type": "genericlist", "value": [spec]}
    return spec


def test_genericlist_nested_5000_deep_file(toolchain, tmp_path):
    # json.dumps itself recurses: write the text by hand.
    inner = '{"type": "int", "value": 1}'
    text = '{"type": "genericlist", "value": [' * 5000 + inner + "]}" * 5000
    path = tmp_path / "deep.json"
    path.write_text('{"torch.cat": {"config": [{"input": [{"args": [' + text + ']}]}]}}')
    error = _load_error(toolchain, path)
    _assert_reported(error, Case(TOP, "nested more than 64 levels deep"))


def test_kwargs_nested_5000_deep_dict(toolchain):
    spec = _op(_tensor(2), kwargs={"x": _genericlist(5000)})
    error = _load_error(toolchain, spec)
    _assert_reported(error, Case("torch.add.config", "nested more than 64 levels deep"))


def test_dict_with_a_reference_cycle(toolchain):
    spec = _op(_tensor(2))
    spec["torch.add"]["config"][0]["input"][0]["kwargs"] = {"loop": spec}
    error = _load_error(toolchain, spec)
    _assert_reported(error, Case("torch.add", "nested more than 64 levels deep"))
    # validate() itself (no session pre-check) is protected the same way
    with pytest.raises(SpecError):
        toolchain.validate(spec, "<cycle>")


def test_one_megabyte_operator_name(toolchain, tmp_path):
    path = tmp_path / "long_name.json"
    path.write_text(json.dumps(_op(_tensor(2), name="torch." + "a" * 1_000_000)))
    error = _load_error(toolchain, path)
    _assert_reported(error, Case("torch.aaaa", "key of 1000006 characters, over the 256-character"))
    assert len(error.render()) < 2_000


def test_huge_string_value(toolchain, tmp_path):
    path = tmp_path / "long_string.json"
    path.write_text(json.dumps(_op(_tensor(2), {"type": "str", "value": "x" * 20_000})))
    error = _load_error(toolchain, path)
    _assert_reported(error, Case("args[1].value", "string of 20000 characters, over the 10000"))
    assert len(error.render()) < 2_000


def test_a_million_operators(toolchain, tmp_path):
    """A 40 MB spec of 10^6 operators (7 million values, within the value limit): refused by the
    operator limit, in seconds."""
    op = json.dumps({"config": [{"input": [{}]}]})
    path = tmp_path / "million.json"
    with path.open("w") as stream:
        stream.write("{" + ",".join(f'"op{i}": {op}' for i in range(1_000_000)) + "}")
    start = time.perf_counter()
    error = _load_error(toolchain, path)
    _assert_reported(error, Case(TOP, f"spec has 1000000 operators, over the {MAX_OPERATORS} "
                                      "limit"))
    assert time.perf_counter() - start < 60


def test_too_many_operators(toolchain):
    spec = {f"op{i}": {} for i in range(MAX_OPERATORS + 1)}
    error = _load_error(toolchain, spec)
    _assert_reported(error, Case(TOP, f"spec has {MAX_OPERATORS + 1} operators, over the"))


def test_many_unknown_operators_stop_after_the_problem_limit(toolchain):
    spec = {f"torch.no_such_op_{i}": {"config": [{"input": [{}]}]} for i in range(5000)}
    start = time.perf_counter()
    error = _load_error(toolchain, spec)
    assert time.perf_counter() - start < 30
    _assert_reported(error, Case(TOP, f"validation stopped after {MAX_PROBLEMS} problems"))
    assert len(error.problems) == MAX_PROBLEMS + 1


def test_unique_items_over_many_objects_is_linear(toolchain):
    """jsonschema's uniqueItems compares every pair of unhashable items: 20,000 objects in a
    __range__ took minutes. Now it is one pass (and the report stops at the problem limit)."""
    spec = _op({**_tensor(2), "__range__": [{"a": i} for i in range(20_000)]},
               iterator="RangeConfigIterator")
    start = time.perf_counter()
    error = _load_error(toolchain, spec)
    assert time.perf_counter() - start < 20
    _assert_reported(error, Case("args[0].__range__[0]", "expected string, got object"))


def test_spec_over_the_byte_limit(toolchain, tmp_path, monkeypatch):
    monkeypatch.setattr(spec_loader, "MAX_SPEC_BYTES", 1000)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(_op(*[_tensor(2)] * 30)))
    error = _load_error(toolchain, path)
    _assert_reported(error, Case(TOP, "over the 1000-byte limit"))


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_endless_device_file(toolchain):
    """A spec path that never ends (size 0 to stat) is read only up to the limit."""
    error = _load_error(toolchain, Path("/dev/zero"))
    _assert_reported(error, Case(TOP, f"over the {spec_loader.MAX_SPEC_BYTES}-byte limit"))


@pytest.mark.parametrize("value, message", [
    ((2, 3), "a tuple is not a JSON value"),
    ({1, 2}, "a set is not a JSON value"),
    (b"torch.load", "a bytes is not a JSON value"),
    (math.nan, "number nan is not finite"),
    (-math.inf, "number -inf is not finite"),
    (10 ** 400, "(401 digits) is out of range"),
    (object(), "an object is not a JSON value"),
])
def test_python_values_that_are_not_json(toolchain, value, message):
    error = _load_error(toolchain, _op(_tensor(2), {"type": "int", "value": value}))
    _assert_reported(error, Case("args[1].value", message))


def test_non_string_keys(toolchain):
    error = _load_error(toolchain, {1: {"config": []}, b"torch.save": {}})
    _assert_reported(error, Case("1", "key 1 is an int, not a string"))
    error = _load_error(toolchain, _op(_tensor(2), kwargs={("a",): {"type": "int", "value": 1}}))
    _assert_reported(error, Case("kwargs", "is a tuple, not a string"))


# --- what operator names can reach ------------------------------------------------------------

#: Areas whose functions touch files, the network or processes, or load code.
DANGEROUS = ("torch.serialization", "torch.hub", "torch.jit", "torch._jit_internal",
             "torch.package", "torch.utils.cpp_extension", "torch.multiprocessing",
             "torch.distributed", "torch._utils_internal", "torch.onnx", "torch._dynamo",
             "torch._inductor", "torch.export", "torch.compiler", "torch.library")
#: Functions refused under any name (explicit list; the resolver keeps its own).
REFUSED_FUNCTIONS = {"torch.load": torch.load, "torch.save": torch.save,
                     "torch.from_file": torch.from_file, "torch.hub.load": torch.hub.load,
                     "torch.hub.download_url_to_file": torch.hub.download_url_to_file,
                     "torch.jit.load": torch.jit.load, "torch.jit.save": torch.jit.save,
                     "torch.serialization.load": torch.serialization.load,
                     "torch.manual_seed": torch.manual_seed, "os.system": os.system,
                     "subprocess.run": subprocess.run, "builtins.eval": eval,
                     "builtins.exec": exec, "builtins.open": open,
                     "builtins.__import__": __import__}


def _in(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _public_callables():
    """(dotted name, object) of every public callable a spec may name: functions of the allowed
    namespaces and torch.nn Module classes (found by enumeration, not from a list)."""
    for namespace_name, namespace in FUNCTION_NAMESPACES.items():
        for attr, obj in sorted(vars(namespace).items()):
            if attr.startswith("_") or isinstance(obj, types.ModuleType):
                continue
            if callable(obj) and not inspect.isclass(obj):
                yield f"{namespace_name}.{attr}", obj
    for attr, obj in sorted(vars(torch.nn).items()):
        if not attr.startswith("_") and inspect.isclass(obj) and issubclass(obj, torch.nn.Module):
            yield f"torch.nn.{attr}", obj


def _ok(toolchain, name: str) -> bool:
    return toolchain.resolver(name).ok


def test_enumerated_callables_from_dangerous_areas_are_refused(toolchain):
    callables = list(_public_callables())
    assert len(callables) > 900, "the enumeration finds torch's operators"
    resolved, refused_dangerous = 0, []
    for name, obj in callables:
        module = getattr(obj, "__module__", None)
        dangerous = (not isinstance(module, str) or not _in(module, ("torch",))
                     or _in(module, DANGEROUS)
                     or any(obj is f for f in REFUSED_FUNCTIONS.values()))
        if dangerous:
            assert not _ok(toolchain, name), f"{name} (defined in {module}) resolves"
            refused_dangerous.append(name)
        elif _ok(toolchain, name):
            resolved += 1
    assert {"torch.load", "torch.save", "torch.nn.functional.Optional",
            "torch.nn.functional.boolean_dispatch"} <= set(refused_dangerous)
    assert resolved > 800, "the refusals do not reach ordinary operators"


def test_refusals_by_name_do_not_reach_operators_of_other_namespaces(toolchain):
    """torch.cond is control flow (refused); torch.linalg.cond is a matrix's condition number."""
    assert not _ok(toolchain, "torch.cond")
    assert _ok(toolchain, "torch.linalg.cond")
    for name, obj in _public_callables():
        if name.startswith("torch.") and name.count(".") > 1 and not _ok(toolchain, name):
            # outside torch's own namespace a refusal is by what the object is, not its name
            assert "is refused: it is" in toolchain.resolver(name).reason, name


def test_ordinary_operators_still_resolve(toolchain):
    for name in ["torch.add", "torch.mm", "torch.einsum", "torch.nn.functional.gelu",
                 "torch.nn.functional.conv2d", "torch.special.expit", "torch.linalg.inv",
                 "torch.fft.fft", "torch.nn.Linear", "torch.nn.Conv2d", "torch.add_",
                 "torch.set_", "aten::add.Tensor", "aten::mm", "aten::_softmax"]:
        assert _ok(toolchain, name), (name, toolchain.resolver(name))


def _wrapped(function, module="torch"):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)

    wrapper.__module__ = module  # as torch does for the functions it re-exports
    return wrapper


@pytest.mark.parametrize("label", sorted(REFUSED_FUNCTIONS))
@pytest.mark.parametrize("namespace_name", ["torch", "torch.nn.functional", "torch.special",
                                            "torch.linalg", "torch.fft"])
def test_refused_functions_are_refused_under_any_name(toolchain, monkeypatch, namespace_name,
                                                      label):
    """An alias, a re-export, a functools.wraps wrapper or a partial of a refused function, put
    in any allowed namespace under an innocent name, is refused (by identity)."""
    namespace = FUNCTION_NAMESPACES[namespace_name]
    function = REFUSED_FUNCTIONS[label]
    monkeypatch.setattr(namespace, "innocent_alias", function, raising=False)
    monkeypatch.setattr(namespace, "innocent_wrapper", _wrapped(function), raising=False)
    monkeypatch.setattr(namespace, "innocent_partial", functools.partial(function),
                        raising=False)
    resolver = OperatorResolver(toolchain.registries)  # resolutions are cached per resolver
    for attr in ("innocent_alias", "innocent_wrapper", "innocent_partial"):
        resolution = resolver(f"{namespace_name}.{attr}")
        assert not resolution.ok, (label, namespace_name, attr)
        assert "is refused" in resolution.reason, resolution


def test_functions_defined_in_dangerous_modules_are_refused_under_any_name(toolchain,
                                                                           monkeypatch):
    """Whatever a refused module defines (imported or not when the resolver starts): its module
    of definition refuses it, in every allowed namespace."""
    import torch.utils.cpp_extension as cpp_extension  # noqa: F401 - defines load_inline

    resolver_probe = {"load_inline": cpp_extension.load_inline,
                      "get_dir": torch.hub.get_dir,
                      "script": torch.jit.script}
    for name, function in resolver_probe.items():
        for namespace_name, namespace in FUNCTION_NAMESPACES.items():
            monkeypatch.setattr(namespace, f"alias_{name}", function, raising=False)
            resolution = OperatorResolver(toolchain.registries)(f"{namespace_name}.alias_{name}")
            assert not resolution.ok and "is refused" in resolution.reason, (name, resolution)


def test_lookups_import_nothing_and_call_nothing(tmp_path):
    """torch's module __getattr__ imports lazy submodules (torch.onnx, torch._dynamo) and calls
    deprecated attributes' functions (torch.has_cuda): naming them in a spec must do neither."""
    spec = {name: {"input_data_generator": GEN, "config": [{"input": [{}]}]}
            for name in ("torch.onnx", "torch.has_cuda", "torch.has_mps", "torch._inductor",
                         "torch.get_device_module")}
    path = tmp_path / "lazy.json"
    path.write_text(json.dumps(spec))
    script = ("import sys, warnings\n"
              "warnings.simplefilter('error')\n"
              "from param_compute.runtime.toolchain import Toolchain\n"
              "from param_compute.errors import SpecError\n"
              "toolchain = Toolchain.start()\n"
              "before = set(sys.modules)\n"
              "try:\n"
              f"    toolchain.load({str(path)!r})\n"
              "except SpecError as error:\n"
              "    print(len(error.problems))\n"
              "new = {m for m in set(sys.modules) - before if m.startswith(('torch.onnx', "
              "'torch._dynamo', 'torch._inductor', 'torch._export'))}\n"
              "print(sorted(new))\n")
    (tmp_path / "lookups.py").write_text(script)
    # A process of its own (forked, torch imported), for its own sys.modules and warning filters.
    done = ZYGOTE.start([], script=tmp_path / "lookups.py")
    stdout, stderr = done.communicate(timeout=300)
    assert done.returncode == 0, stderr
    assert stdout.split() == ["5", "[]"], (stdout, stderr)


# --- the command line -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def cli_results(tmp_path_factory):
    """Every CLI case run at once; name -> (exit status, stderr, spec path, --output path)."""
    tmp = tmp_path_factory.mktemp("hostile_cli")
    deep = tmp / "deep_5000.json"
    deep.write_text('{"torch.cat": {"config": [{"input": [{"args": ['
                    + '{"type": "genericlist", "value": [' * 5000 + '{"type": "int", "value": 1}'
                    + "]}" * 5000 + "]}]}]}}")
    specs = {name: HOSTILE / name for name in CLI_CASES}
    specs["deep_5000.json"] = deep
    results = {}
    for name, spec in specs.items():
        output = tmp / f"{name}.results.jsonl"
        done = run_cli("-c", spec, "--dry-run", "--output", output)
        results[name] = (done.returncode, done.stderr, spec, output)
    return results


@pytest.mark.parametrize("name", CLI_CASES + ["deep_5000.json"])
def test_hostile_spec_on_the_command_line(cli_results, name):
    returncode, stderr, spec, output = cli_results[name]
    case = CASES.get(name, Case(TOP, "nested more than 64 levels deep"))
    assert returncode == EXIT_INVALID, stderr
    assert "Traceback" not in stderr and "RecursionError" not in stderr
    assert str(spec) in stderr
    assert case.path in stderr and case.message in stderr, stderr
    assert "\x1b" not in stderr and "\x07" not in stderr, "no terminal escape reaches stderr"
    assert not output.exists()


# --- production-scale specs: large but legal is accepted, the other limits still hold ----------

def _big_list_spec(items: int, odd: dict = None, at: int = 0) -> dict:
    """torch.add of a tensor and a genericlist of ``items`` ints (3 values each): over the value
    limit of before (10^6); ``odd`` replaces item ``at``."""
    values = [{"type": "int", "value": i} for i in range(items)]
    if odd is not None:
        values[at] = odd
    return _op(_tensor(2), {"type": "genericlist", "value": values})


def test_a_large_legal_spec_is_accepted_in_seconds(toolchain, tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps(_big_list_spec(400_000)))
    start = time.perf_counter()
    spec = toolchain.load(path)
    assert time.perf_counter() - start < 30
    assert len(spec.operators[0].configs[0]["input"][0]["args"][1]["value"]) == 400_000


def test_a_captured_aten_spec_proved_plain_still_has_every_schema_checked(toolchain):
    """The fast path proves whole config lists of plain data specs; an aten operator's schema
    strings are still checked in every config entry, the odd one out reported where it is."""
    def entry(i, schema="aten::mul.Tensor(Tensor self, Tensor other) -> Tensor"):
        return {"build": [{"args": [{"type": "str", "value": schema}]}],
                "input": [{"args": [_tensor(i % 7 + 1), _tensor(i % 7 + 1)]}]}
    configs = [entry(i) for i in range(3000)]
    configs[2345] = entry(2345, "aten::sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1)"
                                " -> Tensor")
    spec = {"aten::mul": {"input_data_generator": GEN, "config": configs},
            "torch.add": {"input_data_generator": GEN,
                          "config": [{"input": entry(i)["input"]} for i in range(3000)]}}
    error = _load_error(toolchain, spec)
    assert len(error.problems) == 1
    _assert_reported(error, Case("aten::mul.config[2345].build[0].args[0].value",
                                 "schema is for aten::sub, not aten::mul"))
    configs[2345] = entry(2345)
    assert [op.name for op in toolchain.load(spec).operators] == ["aten::mul", "torch.add"]


def test_a_large_list_with_one_macro_is_checked_in_full_in_seconds(toolchain):
    """Not plain (a ranged item): the full checks see all 300,000 items, still in seconds."""
    spec = _big_list_spec(300_000, {"type": "int", "value": [1, 3], "__range__": ["value"]})
    asl = spec["torch.add"]["config"][0]["input"][0]
    asl["args"][1]["__range__"] = ["value"]
    spec["torch.add"]["input_iterator"] = "RangeConfigIterator"
    start = time.perf_counter()
    assert toolchain.load(spec).operators[0].name == "torch.add"
    assert time.perf_counter() - start < 60


@pytest.mark.parametrize("odd, where, message", [
    ({"type": "str", "value": "x" * 20_000}, "value[123456].value",
     "string of 20000 characters, over the 10000"),
    ({"type": "int", "value": 2 ** 63}, "value[123456].value",
     "integer 9223372036854775808 is out of range"),
    ({"type": "genericlist", "value": [{"type": "genericlist", "value": []}]}, "",
     "unknown key 'value'"),
])
def test_limits_still_hold_inside_a_large_spec(toolchain, odd, where, message):
    if not where:  # nest deeper than the depth limit at one item
        for _ in range(40):
            odd = {"type": "genericlist", "value": [odd]}
        where, message = "torch.add", "nested more than 64 levels deep"
    error = _load_error(toolchain, _big_list_spec(200_000, odd, at=123_456))
    _assert_reported(error, Case(where, message))


def test_value_limit_still_refuses():
    problems = spec_loader_limits.json_value_problems([[0] * 10] * 200, max_values=1000)
    assert [p.message for p in problems] == ["spec has more than 1000 values"]
    assert spec_loader_limits.MAX_JSON_VALUES >= 10 ** 8
