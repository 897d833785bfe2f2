"""Property-based tests: whatever a spec holds, validation ends in a clear SpecError or a spec.

A spec file is data that people pass around. Fed random JSON values, random spec-shaped values and
random mutations of every valid spec we have (``examples/configs`` and, when it is beside this
checkout, ``../shared/param-configs``), validation may only

* raise ``SpecError`` whose every problem has a message and a JSON path (a tuple of keys and
  indices) and renders as printable, valid UTF-8 text (no terminal escapes, no lone surrogates), or
* return a ``BenchmarkSpec``, which then expands in a dry run (``param_compute.run(...,
  dry_run=True)``) without any exception (when it has at most 10,000 runs).

No other exception type, ever. One toolchain serves the whole module (starting one costs seconds).
"""

from __future__ import annotations

import copy
import functools
import json
import math
import os
from pathlib import Path
from typing import Any, Dict, List
from unittest import mock

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import param_compute  # noqa: E402
from param_compute.errors import SpecError  # noqa: E402
from param_compute.plan.runplan import count_runs  # noqa: E402
from param_compute.runtime.toolchain import Toolchain  # noqa: E402
from param_compute.spec.loader import parse_spec_text  # noqa: E402
from param_compute.spec import fastpath  # noqa: E402
from param_compute.spec.model import BenchmarkSpec  # noqa: E402

from conftest import EXAMPLES  # noqa: E402

#: Dry runs of valid specs above this many runs are skipped (validation itself still ran).
MAX_DRY_RUNS = 10_000

#: Examples per property (kept small for CI); PARAM_COMPUTE_HYPOTHESIS_EXAMPLES=5000 for a deeper
#: search.
EXAMPLES_PER_PROPERTY = int(os.environ.get("PARAM_COMPUTE_HYPOTHESIS_EXAMPLES", "60"))
SETTINGS = settings(max_examples=EXAMPLES_PER_PROPERTY, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def toolchain() -> Toolchain:
    return Toolchain.start()


# --- the property ---------------------------------------------------------------------------

def _check_error(error: SpecError) -> None:
    assert error.problems, "a SpecError lists at least one problem"
    for problem in error.problems:
        assert isinstance(problem.path, tuple), problem
        assert all(isinstance(part, (str, int)) and not isinstance(part, bool)
                   for part in problem.path), problem
        assert isinstance(problem.message, str) and problem.message.strip(), problem
        assert problem.hint is None or isinstance(problem.hint, str), problem
    rendered = error.render()
    rendered.encode("utf-8")  # no lone surrogate reaches the terminal or a log file
    assert all(ch.isprintable() or ch == "\n" for ch in rendered), ascii(rendered[:500])
    assert len(rendered) < 200_000, "a report stays readable whatever the spec"


def _dry_run(toolchain: Toolchain, spec: BenchmarkSpec, raw: Any) -> None:
    runs = count_runs(spec, toolchain.registries.config_iterators)
    if runs is None or runs > MAX_DRY_RUNS:
        return
    result = param_compute.run(raw, dry_run=True)
    assert all(record.get("status") == "dry-run" for record in result.records), result.records[:3]
    assert len(result.records) == runs


def check_outcome(toolchain: Toolchain, raw: Any, dry_run: bool = True) -> Any:
    """Validate ``raw``; only a well-formed SpecError or a spec (that dry-runs) may come out."""
    try:
        spec = toolchain.validate(raw, "<hypothesis>")
    except SpecError as error:
        _check_error(error)
        return error
    assert isinstance(spec, BenchmarkSpec)
    if dry_run:
        _dry_run(toolchain, spec, raw)
    return spec


# --- strategies: JSON values ------------------------------------------------------------------

HOSTILE_INTS = st.sampled_from([0, 1, -1, 2 ** 31, 2 ** 63 - 1, 2 ** 63, -(2 ** 63), -(2 ** 63) - 1,
                                10 ** 400, -(10 ** 400), 10 ** 6, 10 ** 12, 3])
HOSTILE_FLOATS = st.sampled_from([0.0, -0.0, 0.5, 1e308, -1e308, 5e-324, 1.0, 2.5])
#: Text including control characters, direction overrides and lone surrogates (plain text most).
ANY_TEXT = (st.text(max_size=20)
            | st.text(alphabet=st.characters(categories=["L", "N", "P", "S", "Z", "C"]),
                      max_size=20)
            | st.sampled_from(["\ud800", "a\udfffb", "\udc80\ud800", "torch.add\x1b[2J",
                               "\u202etorch.load"]))
NAMES = st.sampled_from([
    "torch.add", "torch.mm", "torch.nn.Linear", "torch.relu", "torch.add_", "aten::add.Tensor",
    "aten::mul", "torch.nn.functional.gelu", "torch.load", "torch.save", "torch.hub.load",
    "torch.os.system", "torch.__builtins__", "torch", "torch.", "aten::save", "aten::name",
    "torch.onnx", "torch.nn.functional.Optional", "torch.special.expit", "torch.linalg.inv",
    "torch.fft.fft", "torch.nn", "torch.nn.Parameter", "aten::_dir", "", "torch.set_",
    "pytorch.model.alex_net", "torch.ａdd", "torch.share_memory_", "__import__('os')",
])


#: Printable text: spec-shaped values get past the value checks and reach the semantic ones.
PRINTABLE = st.text(alphabet=st.characters(categories=["L", "N", "P", "S"]), max_size=12)


def json_scalars(text=PRINTABLE):
    return (st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | HOSTILE_INTS
            | st.floats(allow_nan=False, allow_infinity=False) | HOSTILE_FLOATS | text)


def json_values(text=PRINTABLE, keys=PRINTABLE):
    return st.recursive(json_scalars(text),
                        lambda children: st.lists(children, max_size=5)
                        | st.dictionaries(keys, children, max_size=5),
                        max_leaves=30)


# --- strategies: spec-shaped values -----------------------------------------------------------

TYPES = ["tensor", "int", "long", "float", "double", "bool", "str", "device", "dtype", "none",
         "genericlist", "tuple", "Tensor", "layout", "memory_format"]
ATTRS = ["type", "shape", "dtype", "value", "value_range", "requires_grad", "name", "__range__",
         "__list__", "__copy__", "stride", "storage_offset", "device", "valeu"]
ITERATORS = ["DefaultConfigIterator", "RangeConfigIterator", "DummyConfigIterator",
             "RangeIterator"]
DTYPES = ["float", "double", "half", "bfloat16", "int", "long", "bool", "int8", "uint8",
          "complex64", "flaot"]


# Strategies are built once, here, not inside the composite strategies: hypothesis then spends
# its time drawing examples rather than constructing (and cache-looking-up) strategies per draw.
_SMALL = st.one_of([st.integers(0, 8)] * 8 + [st.integers(-2, -1), HOSTILE_INTS])
_DIMS = st.lists(_SMALL | st.lists(_SMALL, min_size=2, max_size=3), max_size=4)
_JSON_VALUES = json_values()
_ANY_JSON_VALUES = json_values(text=ANY_TEXT, keys=ANY_TEXT)
_ATTR_VALUES = {
        "type": st.sampled_from(TYPES),
        "shape": _DIMS | st.lists(_DIMS, min_size=1, max_size=3),
        "dtype": st.sampled_from(DTYPES) | st.lists(st.sampled_from(DTYPES), max_size=3),
        "value": _JSON_VALUES,
        "value_range": st.lists(st.integers(-5, 5) | HOSTILE_FLOATS | HOSTILE_INTS, min_size=0,
                                max_size=3),
        "requires_grad": st.booleans() | st.lists(st.booleans(), max_size=2),
        "__range__": st.lists(st.sampled_from(ATTRS), max_size=3),
        "__list__": st.lists(st.sampled_from(ATTRS), max_size=3),
        "__copy__": st.lists(st.dictionaries(st.sampled_from(["shape", "value", "dtype"]),
                                             st.tuples(_SMALL, st.tuples(_SMALL, _SMALL))
                                             .map(lambda t: [t[0], list(t[1])]),
                                             max_size=2), max_size=2),
}


def _attr_value(attr: str):
    return _ATTR_VALUES.get(attr, _JSON_VALUES)


#: The keys each type needs, so that most generated data specs get past the schema and reach the
#: semantic checks; extra random attributes and macros then make them wrong in subtler ways.
REQUIRED = {"tensor": ("shape", "dtype"), "int": ("value",), "long": ("value",),
            "float": ("value",), "double": ("value",), "bool": ("value",), "str": ("value",),
            "device": ("value",), "dtype": ("value",), "genericlist": ("value",),
            "tuple": ("value",), "layout": ("value",), "memory_format": ("value",)}
PLAUSIBLE_VALUES = {
    "int": st.integers(-3, 10) | st.lists(st.integers(-3, 10), min_size=2, max_size=3),
    "float": st.floats(-2, 2) | st.lists(st.floats(-2, 2), min_size=1, max_size=3),
    "bool": st.booleans() | st.lists(st.booleans(), min_size=1, max_size=2),
    "str": st.sampled_from(["mean", "sum", "none", "tanh"]),
    "device": st.sampled_from(["cpu", "cuda", "meta", "gpu", ["cpu", "meta"]]),
    "dtype": st.sampled_from(DTYPES) | st.lists(st.sampled_from(DTYPES), min_size=1, max_size=2),
    "layout": st.sampled_from(["strided", "sparse_coo", "jagged"]),
    "memory_format": st.sampled_from(["contiguous_format", "channels_last", "nchw"]),
}
PLAUSIBLE_VALUES["long"] = PLAUSIBLE_VALUES["int"]
PLAUSIBLE_VALUES["double"] = PLAUSIBLE_VALUES["float"]


#: ``ONE_IN[n]`` draws 0 with chance 1/n.
ONE_IN = {n: st.integers(0, n - 1) for n in (4, 10, 20)}
_TYPE = st.sampled_from(TYPES)
_SHAPE = st.lists(st.integers(0, 6) | st.lists(st.integers(-1, 8), min_size=2, max_size=3)
                  | st.just(-1), max_size=3)
_DTYPE = st.sampled_from(DTYPES)
_ITERATOR = st.sampled_from(ITERATORS)
_EXTRA_KEYS = st.lists(st.sampled_from(ATTRS), max_size=2, unique=True) | st.just([])
_MACRO_NAMES = st.lists(st.sampled_from(["value", "shape", "dtype", "requires_grad"]),
                        min_size=1, max_size=2, unique=True)
#: ``_NESTED[depth]``: the items of a list-typed data spec at that depth (filled below).
_NESTED: Dict[int, Any] = {}


@st.composite
def data_specs(draw, depth: int = 0):
    arg_type = draw(_TYPE)
    spec = {"type": arg_type}
    for key in REQUIRED.get(arg_type, ()):
        if arg_type in ("genericlist", "tuple"):
            spec[key] = draw(_NESTED[depth + 1]) if depth < 3 else []
        elif arg_type == "tensor" and key == "shape":
            spec[key] = draw(_SHAPE)
        elif arg_type == "tensor":
            spec[key] = draw(_DTYPE)
        else:
            spec[key] = draw(PLAUSIBLE_VALUES[arg_type])
    for key in draw(_EXTRA_KEYS):
        spec[key] = draw(_MACRO_NAMES if key in ("__range__", "__list__") else _attr_value(key))
    if draw(ONE_IN[20]) == 0:
        del spec["type"]
    return spec


_NESTED.update({depth: st.lists(data_specs(depth), max_size=3) for depth in (1, 2, 3)})
_ARGS = st.lists(data_specs(), max_size=3)
_KWARGS = st.dictionaries(st.sampled_from(["alpha", "dim", "out", "x", ""]), data_specs(),
                          max_size=2)
_ODD_KEY = st.sampled_from(["count", "count", "type", "Args"])
_ODD_VALUE = st.integers(1, 3) | json_scalars()


@st.composite
def arg_spec_lists(draw):
    asl = {}
    if draw(ONE_IN[4]):
        asl["args"] = draw(_ARGS)
    if draw(st.booleans()):
        asl["kwargs"] = draw(_KWARGS)
    if draw(ONE_IN[10]) == 0:
        asl[draw(_ODD_KEY)] = draw(_ODD_VALUE)
    return asl


_OP_NAMES = st.lists(NAMES, min_size=1, max_size=3, unique=True)
_ENTRIES = st.sampled_from([1, 1, 1, 2, 0])
_INPUTS = st.lists(arg_spec_lists(), min_size=1, max_size=3)
_BUILDS = st.none() | st.lists(arg_spec_lists(), max_size=2)


@st.composite
def spec_shaped(draw):
    spec = {}
    for name in draw(_OP_NAMES):
        op = {}
        for key in ("input_iterator", "build_iterator"):
            if draw(st.booleans()):
                op[key] = draw(_ITERATOR)
        if draw(st.booleans()):
            op["input_data_generator"] = "PyTorch:DefaultDataGenerator"
        entries = []
        for _ in range(draw(_ENTRIES)):
            entry = {"input": draw(_INPUTS)}
            if draw(ONE_IN[4]) == 0:
                entry["build"] = draw(_BUILDS)
            entries.append(entry)
        op["config"] = entries
        spec[name] = op
    return spec


# --- strategies: mutations of valid specs -----------------------------------------------------

def _valid_spec_files(shared: Path = None) -> List[Path]:
    files = sorted(EXAMPLES.glob("*.json"))
    if shared is not None:
        files += sorted(shared.glob("*.json"))
    return files


def _locations(value: Any, path=()):
    """Every (path, value) in a JSON value, the root included (iterative)."""
    out, stack = [], [(path, value)]
    while stack:
        where, node = stack.pop()
        out.append((where, node))
        if isinstance(node, dict):
            stack.extend((where + (k,), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((where + (i,), v) for i, v in enumerate(node))
    return out


def _get(value: Any, path: tuple) -> Any:
    for part in path:
        value = value[part]
    return value


def _replacements(node: Any):
    """What a value may be turned into: other types, hostile numbers, wrong nesting, macros."""
    options = [_ANY_JSON_VALUES, HOSTILE_INTS, HOSTILE_FLOATS,
               st.just([node]), st.just({"value": node}), st.just(str(node)[:50]),
               st.just(None), st.just([]), st.just({})]
    if isinstance(node, bool):
        options.append(st.just(int(node)))
    elif isinstance(node, (int, float)):
        options += [st.just(-node), st.just(node * 10 ** 20), st.just(bool(node)),
                    st.just([node, node]), st.just([node, node + 1, 0])]
        if abs(node) < 1e300:
            options.append(st.just(float(node) + 0.5))
    elif isinstance(node, list) and node:
        options += [st.just(node[0]), st.just(node * 2), st.just(node[::-1]), st.just(node[1:])]
    elif isinstance(node, dict) and node:
        options += [st.just(list(node.values())), st.just(next(iter(node.values())))]
    return st.one_of(options)


def _with_name(names: Any, attr: str) -> List[str]:
    """A macro's attribute names (whatever earlier mutations made of them) plus ``attr``."""
    names = [n for n in names if isinstance(n, str)] if isinstance(names, list) else []
    return names if attr in names else names + [attr]


@st.composite
def mutated(draw, bases: List[Any]):
    spec = copy.deepcopy(draw(st.sampled_from(bases)))
    for _ in range(draw(st.integers(1, 4))):
        places = _locations(spec)
        data_specs_here = [(p, n) for p, n in places if isinstance(n, dict) and "type" in n]
        if data_specs_here and draw(st.integers(0, 2)) == 0:
            # macros on data specs: what the semantic checks and expansion must agree on
            path, node = draw(st.sampled_from(data_specs_here))
            action = draw(st.sampled_from(["copy", "listify", "rangify", "iterator"]))
        else:
            path, node = draw(st.sampled_from(places))
            action = draw(st.sampled_from(["replace", "delete", "rename", "add_key", "macro",
                                           "number", "duplicate_item"]))
        parent = _get(spec, path[:-1]) if path else None
        if action == "copy":
            small = st.integers(0, 3)
            copies = node.get("__copy__") if isinstance(node.get("__copy__"), list) else []
            node["__copy__"] = copies + [{draw(st.sampled_from(["shape", "shape", "value",
                                                                "dtype"])):
                                          [draw(small), [draw(small), draw(small)]]}]
        elif action in ("listify", "rangify"):
            attrs = [key for key in node if not key.startswith("__")]
            attr = draw(st.sampled_from(attrs))
            value = node[attr]
            if action == "listify":
                shorter = value[:-1] if isinstance(value, list) else value
                node[attr] = [value, shorter] if draw(st.booleans()) else [shorter]
                node["__list__"] = _with_name(node.get("__list__"), attr)
            else:
                if isinstance(value, int) and not isinstance(value, bool):
                    node[attr] = [value, value + draw(st.integers(-1, 3))]
                node["__range__"] = _with_name(node.get("__range__"), attr)
        elif action == "iterator":
            op = spec[path[0]] if isinstance(spec, dict) and path else None
            if isinstance(op, dict):
                op[draw(st.sampled_from(["input_iterator", "build_iterator"]))] = draw(
                    st.sampled_from(ITERATORS))
        elif action == "replace" or (action in ("delete", "rename") and not path):
            new = draw(_replacements(node))
            if path:
                parent[path[-1]] = new
            else:
                spec = new
        elif action == "delete":
            del parent[path[-1]]
        elif action == "rename" and isinstance(path[-1], str):
            new_key = draw(st.sampled_from(ATTRS + ["", "Type", "config ", "torch.load"])
                           | ANY_TEXT)
            parent[new_key] = parent.pop(path[-1])
        elif action == "add_key" and isinstance(node, dict):
            key = draw(st.sampled_from(ATTRS + ["config", "input", "build", "args", "kwargs",
                                                "input_iterator"]))
            node[key] = draw(_attr_value(key))
        elif action == "macro" and isinstance(node, dict):
            macro = draw(st.sampled_from(["__range__", "__list__", "__copy__"]))
            node[macro] = draw(_attr_value(macro))
        elif action == "number" and isinstance(node, (int, float)) and path:
            parent[path[-1]] = draw(HOSTILE_INTS | HOSTILE_FLOATS | st.integers(-10, -1))
        elif action == "duplicate_item" and isinstance(node, list) and node:
            node.append(copy.deepcopy(draw(st.sampled_from(node))))
        if not isinstance(spec, (dict, list)):
            break
    return spec


@functools.lru_cache(maxsize=None)
def _load_bases_cached(files: tuple) -> List[Any]:
    return [json.loads(path.read_text(encoding="utf-8")) for path in files]


def _load_bases(files: List[Path]) -> List[Any]:
    return _load_bases_cached(tuple(files))


# --- the tests ------------------------------------------------------------------------------

def test_valid_bases_are_valid(toolchain, shared_configs):
    """The mutation bases themselves validate and dry-run (else mutating them proves little)."""
    for path, raw in zip(_valid_spec_files(shared_configs),
                         _load_bases(_valid_spec_files(shared_configs))):
        assert isinstance(check_outcome(toolchain, raw), BenchmarkSpec), path


@SETTINGS
@given(value=json_values(text=ANY_TEXT, keys=ANY_TEXT)
       | st.floats(allow_nan=True, allow_infinity=True)
       | st.dictionaries(st.text(max_size=10), json_values(), max_size=4))
def test_random_json_values(toolchain, value):
    check_outcome(toolchain, value)


@SETTINGS
@given(value=json_values(text=ANY_TEXT, keys=ANY_TEXT))
def test_random_json_text(toolchain, value):
    """The same through the file reader's parser (json.dumps escapes surrogates as \\udXXX)."""
    try:
        parsed = parse_spec_text(json.dumps(value), "<hypothesis>")
    except SpecError as error:
        _check_error(error)
        return
    check_outcome(toolchain, parsed)


@SETTINGS
@given(value=spec_shaped())
def test_random_spec_shaped_values(toolchain, value):
    check_outcome(toolchain, value)


@SETTINGS
@given(data=st.data())
def test_mutated_examples(toolchain, data):
    bases = _load_bases(_valid_spec_files())
    check_outcome(toolchain, data.draw(mutated(bases)))


@SETTINGS
@given(data=st.data())
def test_mutated_shared_configs(toolchain, shared_configs, data):
    bases = _load_bases(sorted(shared_configs.glob("*.json")))
    check_outcome(toolchain, data.draw(mutated(bases)))


@SETTINGS
@given(value=json_values(text=ANY_TEXT, keys=ANY_TEXT))
def test_nan_and_infinity_never_pass(toolchain, value):
    """Non-finite numbers anywhere in a dict spec are refused (JSON has none)."""
    spec = {"torch.add": {"config": [{"input": [{"args": [{"type": "float",
                                                            "value": math.inf}]}]}]},
            "extra": value}
    error = check_outcome(toolchain, spec, dry_run=False)
    assert isinstance(error, SpecError)


# --- the fast path decides nothing -------------------------------------------------------------

def _outcome(toolchain: Toolchain, raw: Any) -> Any:
    """What validation says about ``raw``, in a comparable form."""
    try:
        spec = toolchain.validate(raw, "<x>")
    except SpecError as error:
        return ("invalid", [(p.path, p.message, p.hint) for p in error.problems])
    return ("valid", spec.operators, spec.warnings)


def check_fast_path_agrees(toolchain: Toolchain, raw: Any) -> None:
    """``spec.fastpath`` only skips checks that would find nothing: validating with it and with
    every check in full gives the same problems, or the same spec and warnings."""
    fast = _outcome(toolchain, raw)
    with mock.patch.object(fastpath, "scan", return_value=None):
        full = _outcome(toolchain, copy.deepcopy(raw))
    assert fast == full


#: Values near the edges of what a plain data spec may hold.
EDGE_SCALARS = (st.sampled_from([0, 1, -1, 7, 2 ** 63 - 1, 2 ** 63, -(2 ** 63) - 1, 2.5, -0.5,
                                 1e308, True, False, None, "", "inf", "-inf", "nan", "cpu",
                                 "cuda", "cuda:0", "cuda:", "cuda:x", "gpu", "float", "half",
                                 "int", "bool", "flaot", "strided", "jagged", "channels_last",
                                 "x" * 10_001, "caf\u00e9", "\ud800", "a\nb"])
                | st.integers(-3, 9))


@st.composite
def near_plain_data_specs(draw, depth: int = 0):
    """Data specs of every type that are plain or one small step away from plain."""
    arg_type = draw(st.sampled_from(TYPES))
    spec: dict = {"type": arg_type}
    if arg_type == "tensor":
        spec["dtype"] = draw(st.sampled_from(DTYPES) | EDGE_SCALARS)
        spec["shape"] = draw(st.lists(EDGE_SCALARS, max_size=3) | EDGE_SCALARS)
    elif arg_type in ("genericlist", "tuple"):
        spec["value"] = (draw(st.lists(near_plain_data_specs(depth + 1), max_size=3))
                         if depth < 2 else [])
    elif draw(st.integers(0, 5)):
        spec["value"] = draw(EDGE_SCALARS)
    optional = ["name", "requires_grad", "stride", "storage_offset", "device", "value_range",
                "run_device", "value", "dtype"]
    for key in draw(st.lists(st.sampled_from(optional), max_size=2, unique=True)):
        spec[key] = draw(EDGE_SCALARS | st.lists(EDGE_SCALARS, max_size=3))
    return spec


@st.composite
def near_plain_specs(draw):
    inputs = [{"args": draw(st.lists(near_plain_data_specs(), max_size=3))}
              for _ in range(draw(st.integers(1, 2)))]
    if draw(st.booleans()):
        inputs[0]["kwargs"] = {"k": draw(near_plain_data_specs())}
    if draw(st.integers(0, 3)) == 0:
        inputs[0]["count"] = draw(EDGE_SCALARS)
    entry = {"input": inputs}
    if draw(st.integers(0, 3)) == 0:
        entry["build"] = [{"args": [draw(near_plain_data_specs())]}]
    op = {"input_data_generator": "PyTorch:DefaultDataGenerator", "config": [entry]}
    if draw(st.integers(0, 3)) == 0:
        op["input_iterator"] = draw(st.sampled_from(ITERATORS))
    return {draw(st.sampled_from(["torch.add", "torch.mm", "aten::mul"])): op}


@SETTINGS
@given(value=near_plain_specs())
def test_fast_path_agrees_on_near_plain_specs(toolchain, value):
    check_fast_path_agrees(toolchain, value)


@SETTINGS
@given(value=spec_shaped())
def test_fast_path_agrees_on_random_spec_shaped_values(toolchain, value):
    check_fast_path_agrees(toolchain, value)


@SETTINGS
@given(data=st.data())
def test_fast_path_agrees_on_mutated_examples(toolchain, data):
    bases = _load_bases(_valid_spec_files())
    check_fast_path_agrees(toolchain, data.draw(mutated(bases)))


# --- the schema's quick verdict ---------------------------------------------------------------

def _ranged(spec: Any) -> Any:
    """A data spec with ranges where a sweep writes them (what the fast path leaves to the
    schema): shape dims and int values as [min, max(, step)], dtypes listed."""
    if not isinstance(spec, dict):
        return spec
    spec = dict(spec)
    if isinstance(spec.get("shape"), list) and spec["shape"]:
        spec["shape"] = [[1, 4] if i % 2 == 0 else dim for i, dim in enumerate(spec["shape"])]
        spec["__range__"] = ["shape"]
    elif spec.get("type") in ("int", "long"):
        spec["value"], spec["__range__"] = [1, 9, 2], ["value"]
    elif isinstance(spec.get("dtype"), str):
        spec["dtype"], spec["__list__"] = [spec["dtype"], "double"], ["dtype"]
    return spec


@SETTINGS
@given(spec=data_specs() | near_plain_data_specs() | data_specs().map(_ranged)
       | near_plain_data_specs().map(_ranged))
def test_quick_schema_verdict_is_jsonschemas(spec):
    """Where ``quick_schema`` gives a verdict on a data spec, jsonschema's validator agrees."""
    from param_compute.spec import quick_schema, schema

    kind = spec.get("type") if isinstance(spec.get("type"), str) else None
    verdict = quick_schema.accepts(schema._data_spec_schema(kind), spec)
    if verdict is not None:
        errors = list(schema._data_spec_validator(kind).iter_errors(spec))
        assert verdict == (not errors), (spec, [e.message for e in errors])


@SETTINGS
@given(data=st.data())
def test_quick_schema_verdict_on_whole_specs_is_jsonschemas(data):
    from param_compute.spec import quick_schema, schema

    value = data.draw(spec_shaped() | mutated(_load_bases(_valid_spec_files())))
    verdict = quick_schema.accepts(schema.load_schema(), value)
    if verdict is not None:
        errors = list(schema._whole_validator().iter_errors(value))
        assert verdict == (not errors), (value, [e.message for e in errors])


def test_a_sweeps_ranged_data_specs_are_judged_without_jsonschema():
    """The ranged data specs of the example sweep are valid without importing jsonschema (its
    import and a validator cost about a twentieth of a dry run)."""
    import subprocess
    import sys

    code = ("import json, sys\n"
            "from param_compute.spec.schema import data_spec_schema_problems\n"
            "from param_compute.spec.walker import asl_data_specs\n"
            f"raw = json.load(open({str(EXAMPLES / 'matmul_sweep.json')!r}))\n"
            "located = [pair for op in raw.values() for entry in op['config']\n"
            "           for asl in entry['input'] for pair in asl_data_specs(asl, ())]\n"
            "assert located and not list(data_spec_schema_problems(located))\n"
            "print('jsonschema' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
