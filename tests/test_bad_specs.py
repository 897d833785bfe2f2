"""Bad specs get clear messages: file, JSON path, what is wrong, what would be right; exit 2.

``tests/bad_specs/`` holds one small spec per problem (and ``multiple_problems.json`` with several,
which must all be reported together). Every file is checked in-process through the same
``Toolchain.load`` the command line uses; a handful also go through the command line's
``main(argv)`` (exit status, stderr, no results file). A few valid specs pin down how macros
expand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, NamedTuple

import pytest

from conftest import run_cli
from param_compute.errors import EXIT_INVALID, SpecError, format_json_path
from param_compute.plan.runplan import plan_runs
from param_compute.runtime.toolchain import Toolchain

BAD_SPECS = Path(__file__).resolve().parent / "bad_specs"
SHARED_CONFIGS = Path(__file__).resolve().parents[2] / "shared" / "param-configs"
TOP = "(top level)"


class Case(NamedTuple):
    path: str  # a substring of the problem's JSON path
    message: str  # a substring of its message or hint
    count: int = 1  # how many problems the file has in all


CASES: Dict[str, Case] = {
    # JSON itself
    "malformed_json.json": Case(TOP, "malformed JSON at line 5 column 31"),
    "empty_file.json": Case(TOP, "malformed JSON at line 1 column 1"),
    "not_utf8.json": Case(TOP, "not UTF-8 text"),
    "duplicate_key.json": Case("torch.mm.input_iterator", "duplicate key 'input_iterator'"),
    "float_value_ranged.json": Case("torch.mul.config[0].input[0].args[1].__range__[0]",
                                    "'value' of a float arg cannot be ranged"),
    "nan_constant.json": Case(TOP, "NaN is not valid JSON"),
    "top_level_array.json": Case(TOP, "expected object, got array"),
    "empty_object.json": Case(TOP, "must not be empty"),
    # nesting and value types
    "config_not_a_list.json": Case("torch.mm.config", "expected array, got object"),
    "args_not_a_list.json": Case("torch.mm.config[0].input[0].args", "expected array, got object"),
    "data_spec_in_input_list.json": Case("torch.relu.config[0].input[0].type",
                                         "unknown key 'type' (allowed keys: args, kwargs, count", 3),
    "missing_type.json": Case("torch.add.config[0].input[0].args[1]",
                              "missing required key 'type'"),
    "unknown_arg_type.json": Case("args[1].type", "unknown type 'Tensor' (did you mean 'tensor'?)"),
    "unknown_key_typo.json": Case("args[0].requires_gard", "did you mean 'requires_grad'?"),
    "bool_value_is_string.json": Case("torch.nn.functional.relu.config[0].input[0].kwargs.inplace"
                                      ".value", "expected true or false, got string 'false'"),
    "int_value_is_string.json": Case("args[1].value", "expected an integer, got string '1'"),
    "shape_dim_is_string.json": Case("args[0].shape[1]", "a shape dim is an integer, or a range"),
    "bad_device.json": Case("kwargs.device.value", "not a device: 'gpu'"),
    "negative_storage_offset.json": Case("args[0].storage_offset", "must be >= 0, got -5"),
    "run_device_on_tensor.json": Case("torch.relu.config[0].input[0].args[0].run_device",
                                      "run_device applies to device args, not to 'tensor'"),
    # dtypes and gradients
    "unknown_dtype.json": Case("torch.mm.config[0].input[0].args[1].dtype",
                               "unknown dtype 'flaot' (did you mean 'float'?)"),
    "unknown_dtype_in_list.json": Case("args[0].dtype[1]", "did you mean 'bfloat16'?"),
    "dtype_list_without_macro.json": Case("args[0].dtype", "is not named in __range__ or __list__"),
    "requires_grad_on_int_tensor.json": Case("args[0].requires_grad",
                                             "a long tensor cannot require grad"),
    "requires_grad_ranged_not_list.json": Case("args[0].requires_grad",
                                               "'requires_grad' varies, so it must be a non-empty "
                                               "list"),
    # ranges and macros
    "range_step_zero.json": Case("torch.bmm.config[0].input[1].args[0].shape[2]",
                                 "range step must be > 0, got 0"),
    "range_min_greater_than_max.json": Case("args[0].shape[0]",
                                            "range min 512 is greater than max 256"),
    "range_too_many_items.json": Case("args[0].shape[0]", "a range is [min, max] or [min, max, "
                                                          "step] of integers, got [1, 8, 1, 2]"),
    "range_dim_without_macro.json": Case("args[0].shape[0]", 'add "__range__": ["shape"]'),
    "int_range_min_greater_than_max.json": Case("args[1].value", "range min 10 is greater than "
                                                                 "max 1"),
    "range_too_large.json": Case("args[0].shape[0]", "this range has 100000000 values, over the"),
    "value_range_reversed.json": Case("args[0].value_range", "min 1.0 is greater than max -1.0"),
    "range_names_missing_attribute.json": Case("args[1].__range__[0]",
                                               "names 'valeu', which this int arg does not have"),
    "range_names_unrangeable_attribute.json": Case("args[1].__range__[0]",
                                                   "'name' of a int arg cannot be ranged"),
    "macro_with_default_iterator.json": Case("args[0].__range__",
                                             "__range__ has no effect with DefaultConfigIterator"),
    "kwargs_range_step_negative.json": Case("torch.add.config[0].input[0].kwargs.alpha.value",
                                            "range step must be > 0, got -1"),
    "genericlist_item_macro_unranged.json": Case("args[0].value[0]",
                                                 "the genericlist is not ranged"),
    # copies and placeholders
    "copy_source_arg_out_of_range.json": Case("args[1].__copy__[0].shape[1][0]",
                                              "source arg index 3 is out of range: there are 2"),
    "copy_source_element_out_of_range.json": Case("args[1].__copy__[0].shape[1][1]",
                                                  "source element index 5 is out of range"),
    "copy_target_out_of_range.json": Case("args[1].__copy__[0].shape[0]",
                                          "target index 4 is out of range"),
    "copy_in_nested_item.json": Case("args[0].value[1].__copy__",
                                     "__copy__ works on args and kwargs"),
    "unfilled_placeholder.json": Case("args[1].shape[1]", "placeholder dim -1 is never filled"),
    "negative_dim.json": Case("args[0].shape[1]", "dims must be >= 0, got -4"),
    # structured integer data (spec.index_data)
    "index_distribution_unknown.json": Case("aten::embedding.config[0].input[0].args[1]"
                                            ".distribution", "unknown distribution 'zipff:1.1'"),
    "index_bags_wrong_shape.json": Case("args[2].bags", "a offsets_with_end tensor of 40 "
                                                        "indices in 8 bags has shape [9], not [8]"),
    "index_pool_window_outside.json": Case("args[7].pool_window", "the window of output "
                                           "position 2 along spatial dim 0 lies outside the "
                                           "input (8 wide)", 2),
    # registered names
    "unknown_iterator.json": Case("torch.mm.input_iterator", "unknown input iterator "
                                  "'RangeIterator' (did you mean 'RangeConfigIterator'?)"),
    "unknown_data_generator.json": Case("torch.mm.input_data_generator",
                                        "unknown input data generator"),
    # operator names
    "unknown_operator.json": Case("torch.matmull", "did you mean 'matmul'?"),
    "unknown_bare_operator.json": Case("my_custom_gemm", "unknown operator 'my_custom_gemm'"),
    "unknown_aten_overload.json": Case("aten::add.Tensr", "aten::add has no overload 'Tensr'"),
    "torch_nn_not_a_module.json": Case("torch.nn.init", "is not a torch.nn Module class"),
    "refused_torch_load.json": Case("torch.load", "operator 'torch.load' is refused"),
    "refused_torch_save.json": Case("torch.save", "operator 'torch.save' is refused"),
    "refused_dunder.json": Case("torch.__builtins__", "private and dunder attributes"),
    "refused_os_system.json": Case("torch.os.system", "'torch.os' is not an operator namespace"),
    "refused_process_setting.json": Case("torch.set_num_threads", "is refused"),
    "aten_schema_unparseable.json": Case("aten::mul.config[0].build[0].args[0].value",
                                         "aten schema does not parse"),
    "aten_schema_other_operator.json": Case("aten::add.config[0].build[0].args[0].value",
                                            "schema is for aten::sub, not aten::add"),
}

#: multiple_problems.json: every one of these, in one report.
MULTIPLE = [
    Case("torch.mm.config[0].input[0].args[0].shape[0]", "range min 64 is greater than max 32"),
    Case("torch.mm.config[0].input[0].args[1].dtype", "unknown dtype 'flaot'"),
    Case("torch.load", "is refused"),
    Case("torch.add.input_iterator", "unknown input iterator 'RangeIterator'"),
    Case("torch.relu.config[0].input[0].args[0].shape[1]", "placeholder dim -1 is never filled"),
    Case("torch.relu.config[0].input[0].args[0].value_range", "min 1 is greater than max 0"),
]

#: The files also run through the command line, with multiple_problems.json.
CLI_CASES = ["malformed_json.json", "duplicate_key.json", "range_step_zero.json",
             "unknown_operator.json"]


@pytest.fixture(scope="module")
def toolchain() -> Toolchain:
    return Toolchain.start()


def _text(problem) -> str:
    return problem.message + (f" ({problem.hint})" if problem.hint else "")


def _load_error(toolchain: Toolchain, path: Path) -> SpecError:
    with pytest.raises(SpecError) as info:
        toolchain.load(path)
    return info.value


def _assert_reported(error: SpecError, case: Case) -> None:
    found = [(format_json_path(p.path), _text(p)) for p in error.problems]
    assert any(case.path in where and case.message in what for where, what in found), (
        f"no problem at {case.path!r} saying {case.message!r}; got:\n{error.render()}")


def test_corpus_matches_table():
    files = {p.name for p in BAD_SPECS.iterdir()}
    assert files == set(CASES) | {"multiple_problems.json"}
    assert len(files) >= 30


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_spec_reported_in_process(toolchain, name):
    case = CASES[name]
    path = BAD_SPECS / name
    error = _load_error(toolchain, path)
    assert error.source == str(path)
    _assert_reported(error, case)
    assert len(error.problems) == case.count, error.render()
    rendered = error.render()
    assert name in rendered and case.path in rendered


def test_all_problems_in_a_file_are_reported_together(toolchain):
    error = _load_error(toolchain, BAD_SPECS / "multiple_problems.json")
    for case in MULTIPLE:
        _assert_reported(error, case)
    assert len(error.problems) == len(MULTIPLE), error.render()
    assert f"invalid spec, {len(MULTIPLE)} problems:" in error.render()


# --- the command line -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def cli_results(tmp_path_factory):
    """Every CLI case through ``main(argv)``; name -> (exit status, stdout, stderr, --output)."""
    tmp = tmp_path_factory.mktemp("cli")
    results = {}
    for name in CLI_CASES + ["multiple_problems.json"]:
        output = tmp / f"{name}.results.jsonl"
        done = run_cli("-c", BAD_SPECS / name, "--dry-run", "--output", output)
        results[name] = (done.returncode, done.stdout, done.stderr, output)
    return results


@pytest.mark.parametrize("name", CLI_CASES)
def test_bad_spec_on_the_command_line(cli_results, name):
    returncode, _stdout, stderr, output = cli_results[name]
    case = CASES[name]
    assert returncode == EXIT_INVALID, stderr
    assert "Traceback" not in stderr
    assert str(BAD_SPECS / name) in stderr
    assert case.path in stderr and case.message in stderr, stderr
    assert not output.exists()


def test_several_problems_on_the_command_line(cli_results):
    returncode, _stdout, stderr, output = cli_results["multiple_problems.json"]
    assert returncode == EXIT_INVALID
    assert "Traceback" not in stderr
    assert f"invalid spec, {len(MULTIPLE)} problems:" in stderr
    lines = [line for line in stderr.splitlines() if "multiple_problems.json: " in line]
    for case in MULTIPLE:
        assert any(case.path in line and case.message in line for line in lines), stderr
    assert not output.exists()


# --- valid specs expand as documented ---------------------------------------------------------

GEN = "PyTorch:DefaultDataGenerator"
RANGE = "RangeConfigIterator"


def _tensor(shape, dtype="float", **extra):
    return {"type": "tensor", "dtype": dtype, "shape": shape, **extra}


def _plan(toolchain, spec):
    validated = toolchain.validate(spec, "<test>")
    return [(run.id, run.config()) for run in plan_runs(validated,
                                                        toolchain.registries.config_iterators)]


def _inputs(plan):
    return [(run_id, config["input"]) for run_id, config in plan]


def test_default_iterators_plan_the_same_runs_on_the_lean_path(toolchain):
    """Operators whose build and input iterators are the default take a lean path through the
    plan; a subclass of the default iterator (same expansion) takes the general one: same runs."""
    from param_compute.plan.iterators import DefaultConfigIterator

    entries = [{"input": [{"args": [_tensor([2])]}, {"args": [_tensor([3])]}]},
               {"build": [{"args": [{"type": "int", "value": 4}]}, {"args": []}],
                "input": [{"args": [_tensor([2, 4])]}]},
               {"build": [], "input": [{"args": [_tensor([1])]}]}]
    spec = {"torch.nn.Linear": {"input_data_generator": GEN, "config": entries}}
    lean = _plan(toolchain, spec)
    assert [run_id for run_id, _ in lean] == ["0|0|0", "0|0|1", "1|0|0", "1|1|0", "2|0|0"]
    validated = toolchain.validate(spec, "<test>")
    copy = type("Copy", (DefaultConfigIterator,), {})
    general = {name: copy if iterator is DefaultConfigIterator else iterator
               for name, iterator in toolchain.registries.config_iterators.items()}
    assert [(run.id, run.config()) for run in plan_runs(validated, general)] == lean


def test_macros_in_kwargs_expand(toolchain):
    spec = {"torch.add": {"input_iterator": RANGE, "input_data_generator": GEN, "config": [{
        "input": [{"args": [_tensor([2, 3]), _tensor([2, 3])],
                   "kwargs": {"alpha": {"type": "int", "value": [1, 3], "__range__": ["value"]}}}],
    }]}}
    args = [_tensor([2, 3]), _tensor([2, 3])]
    assert _inputs(_plan(toolchain, spec)) == [
        (f"0|0|0_{i}", {"args": args, "kwargs": {"alpha": {"type": "int", "value": alpha}}})
        for i, alpha in enumerate((1, 2, 3))]


def test_list_of_shapes_and_range_of_dtypes(toolchain):
    # Inside one arg, attributes vary in key order, the last fastest: shape, then dtype.
    arg = {"type": "tensor", "shape": [[2, 3], [4]], "dtype": ["float", "double"],
           "__list__": ["shape"], "__range__": ["dtype"]}
    spec = {"torch.relu": {"input_iterator": RANGE, "input_data_generator": GEN,
                           "config": [{"input": [{"args": [arg]}]}]}}
    expected = [([2, 3], "float"), ([2, 3], "double"), ([4], "float"), ([4], "double")]
    assert _inputs(_plan(toolchain, spec)) == [
        (f"0|0|0_{i}", {"args": [{"type": "tensor", "shape": shape, "dtype": dtype}]})
        for i, (shape, dtype) in enumerate(expected)]


def test_genericlist_range_expands_its_items(toolchain):
    tensors = {"type": "genericlist", "__range__": ["value"],
               "value": [_tensor([[1, 2], 3], __range__=["shape"]), _tensor([2, 3])]}
    dim = {"type": "int", "value": [0, 1], "__list__": ["value"]}
    spec = {"torch.cat": {"input_iterator": RANGE, "input_data_generator": GEN,
                          "config": [{"input": [{"args": [tensors, dim]}]}]}}
    expected = [(1, 0), (1, 1), (2, 0), (2, 1)]  # args in order, the last fastest
    assert _inputs(_plan(toolchain, spec)) == [
        (f"0|0|0_{i}", {"args": [{"type": "genericlist",
                                  "value": [_tensor([rows, 3]), _tensor([2, 3])]},
                                 {"type": "int", "value": d}]})
        for i, (rows, d) in enumerate(expected)]


def test_copy_fills_placeholder_dims_and_range_steps(toolchain):
    spec = {"torch.mm": {"input_iterator": RANGE, "input_data_generator": GEN, "config": [{
        "input": [{"args": [_tensor([[2, 6, 2], 4], __range__=["shape"]),
                            _tensor([-1, 5], __copy__=[{"shape": [0, [0, 1]]}])]}],
    }]}}
    assert _inputs(_plan(toolchain, spec)) == [
        (f"0|0|0_{i}", {"args": [_tensor([rows, 4]), _tensor([4, 5])]})
        for i, rows in enumerate((2, 4, 6))]


def test_build_range_ids(toolchain):
    build = {"args": [{"type": "int", "value": [4, 8, 4], "__range__": ["value"]},
                      {"type": "int", "value": 2}],
             "kwargs": {"bias": {"type": "bool", "value": [True, False], "__range__": ["value"]}}}
    spec = {"torch.nn.Linear": {"build_iterator": RANGE, "build_data_generator": GEN,
                                "input_data_generator": GEN, "config": [{
                                    "build": [build],
                                    "input": [{"args": [_tensor([3, 4])]},
                                              {"args": [_tensor([3, 8])]}]}]}}
    plan = _plan(toolchain, spec)
    assert [run_id for run_id, _ in plan] == [f"0|0_{b}|{i}" for b in range(4) for i in range(2)]
    builds = [(c["build"]["args"][0]["value"], c["build"]["kwargs"]["bias"]["value"])
              for _, c in plan[::2]]
    assert builds == [(4, True), (4, False), (8, True), (8, False)]


def test_shared_param_configs_are_valid(toolchain):
    if not SHARED_CONFIGS.is_dir():
        pytest.skip("../shared/param-configs is not beside this checkout")
    for path in sorted(SHARED_CONFIGS.glob("*.json")):
        toolchain.load(path)


def test_utf8_byte_order_mark_is_accepted(toolchain, tmp_path):
    path = tmp_path / "bom.json"
    spec = {"torch.relu": {"input_data_generator": GEN,
                           "config": [{"input": [{"args": [_tensor([2, 2])]}]}]}}
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(spec).encode())
    assert [op.name for op in toolchain.load(path).operators] == ["torch.relu"]


def test_validator_counts_runs_as_expansion_does(toolchain):
    """The validator sizes each variant without expanding it; it must agree with expansion."""
    from param_compute.plan.iterators import compile_arg_spec_list
    from param_compute.spec.macros import variant_axes

    specs = [toolchain.load(path) for path in sorted(SHARED_CONFIGS.glob("*.json"))]
    variants = [asl for spec in specs for op in spec.operators for entry in op.configs
                for section in ("build", "input") for asl in entry.get(section) or []]
    variants.append({"args": [{"type": "genericlist", "__range__": ["value"], "value": [
        _tensor([[1, 3], [2, 8, 3]], dtype=["float", "half"], __range__=["shape", "dtype"])]}],
        "kwargs": {"k": {"type": "bool", "value": [True, False], "__list__": ["value"]}}})
    for asl in variants:
        count = 1
        for _where, length in variant_axes(asl, ()):
            count *= length
        assert count == compile_arg_spec_list(asl).count(), asl


# --- the data-spec walker ---------------------------------------------------------------------

def test_walker_yields_every_data_spec_with_its_path_in_document_order():
    from param_compute.spec.walker import arg_spec_lists, data_specs

    inner = {"type": "int", "value": 1}
    nested = {"type": "genericlist", "value": [{"type": "tuple", "value": [inner]}, inner]}
    raw = {"op": {"config": [{"build": [{"args": [nested]}],
                              "input": [{"args": [_tensor([2]), 5], "kwargs": {"k": inner}},
                                        "not an arg-spec-list"]}]},
           "bad": {"config": "not a list"}, "worse": 7}
    top = [(path, spec) for spec, path in data_specs(raw)]
    assert top == [(("op", "config", 0, "build", 0, "args", 0), nested),
                   (("op", "config", 0, "input", 0, "args", 0), _tensor([2])),
                   (("op", "config", 0, "input", 0, "args", 1), 5),
                   (("op", "config", 0, "input", 0, "kwargs", "k"), inner)]
    every = [path for _, path in data_specs(raw, nested=True)]
    assert every[:4] == [("op", "config", 0, "build", 0, "args", 0),
                         ("op", "config", 0, "build", 0, "args", 0, "value", 0),
                         ("op", "config", 0, "build", 0, "args", 0, "value", 0, "value", 0),
                         ("op", "config", 0, "build", 0, "args", 0, "value", 1)]
    assert len(every) == 7
    assert [path for _, path in arg_spec_lists(raw)] == [("op", "config", 0, "build", 0),
                                                         ("op", "config", 0, "input", 0)]
    assert list(data_specs([1, 2])) == [] and list(data_specs(None)) == []


def test_walker_ends_in_a_self_containing_list():
    from param_compute.spec.walker import MAX_NESTED, nested_data_specs

    loop = {"type": "genericlist", "value": []}
    loop["value"].append(loop)
    assert len(list(nested_data_specs(loop))) == MAX_NESTED


def test_macro_arithmetic_sizes_ranges_beyond_int64_spans():
    from param_compute.spec.macros import data_spec_axes, range_length, variant_count

    assert range_length([1, 10]) == 10 and range_length([1, 10, 4]) == 3
    assert range_length([5, 1]) == 0
    assert range_length([-(2 ** 63), 2 ** 63 - 1]) == 2 ** 64
    spec = _tensor([[1, 4], 3, [2, 8, 3]], dtype=["float", "half"], __list__=["dtype"],
                   __range__=["shape"])
    assert list(data_spec_axes(spec, ("a",))) == [(("a", "dtype"), 2), (("a", "shape", 0), 4),
                                                  (("a", "shape", 2), 3)]
    assert variant_count({"args": [spec], "kwargs": {"b": {"type": "bool", "value": [True, False],
                                                           "__list__": ["value"]}}}) == 48
