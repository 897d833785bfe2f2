"""Captured configs in the form PARAM's own replay runs (``capture --param-form``).

PARAM replays an ``aten::`` spec by building a TorchScript graph from the schema string whose
inputs are *every* declared argument, positionally, with the schema's types (``ScalarType``,
``Layout`` and ``MemoryFormat`` are ``int`` there), and by calling it with what its data
generator makes of the config. The default capture form is shorter (keyword-only arguments only
where they differ from the default, enum values by name) and only param_compute replays it.
This module rewrites a config so that PARAM can run it:

- every declared argument positional, defaults written out (read from the parsed schema);
- dtype / layout / memory_format values as their c10 integer codes;
- a Python number passed where the schema declares ``Tensor`` (``add_(t, 1)``) as a 0-dim tensor.

What PARAM still cannot reproduce is reported per config (``ParamFormNote``), never hidden:
integer tensors used as indices (PARAM fills integer tensors with values in [-10, 10)),
dtypes and non-finite floats its generator lacks, non-contiguous layouts (PARAM makes contiguous
tensors), uint8 tensors (its integer fill, [-10, 10), does not fit them), schema defaults
containing a comma (PARAM splits the argument list at every comma), ``Tensor[]``/``Tensor?[]``
arguments (its graph declares every tensor-typed argument a single ``Tensor``), schemas with an
``(a -> *)`` alias annotation (PARAM splits a schema at its first ``->``), output masks asking
for undefined tensors (its graph cannot return them), and the ops PARAM never builds (``to``,
``select``, ``item``, ``cat``, ``split_with_sizes``, ``record_stream``).
param_compute replays both forms alike: the aten binding drops keyword arguments that are None
where the schema's default is None, so the longer form costs no call time.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Dict, Iterator, List, Set, Tuple

from param_compute.spec.graphs import GRAPH_PREFIX
from param_compute.capture.index_rules import index_rules
from param_compute.spec.index_data import STRUCTURE_KEYS
from param_compute.capture.schema_args import schema_arguments, split_name
from param_compute.capture.values import LAYOUTS, MEMORY_FORMATS, SCALAR_TYPES

#: The tensor dtypes PARAM's default data generator makes.
PARAM_TENSOR_DTYPES = frozenset({"uint8", "int8", "int16", "int", "long", "float", "double",
                                 "float16", "bfloat16", "bool"})
#: The arg types PARAM's default data generator makes.
PARAM_ARG_TYPES = frozenset({"tensor", "float", "double", "int", "long", "none", "bool", "device",
                             "str", "genericlist", "tuple"})
#: PARAM fills integer tensors with ``randint(-10, 10)``.
PARAM_INTEGER_FILL = (-10, 9)
#: Ops PARAM's benchmark never builds (its list of unsupported ops).
PARAM_UNSUPPORTED_OPS = frozenset({"aten::record_stream", "aten::to", "aten::select",
                                   "aten::item", "aten::cat", "aten::split_with_sizes"})

ENUM_CODES = {
    "dtype": {name: code for code, name in SCALAR_TYPES.items()},
    "layout": {name: code for code, name in LAYOUTS.items()},
    "memory_format": {name: code for code, name in MEMORY_FORMATS.items()},
}


@dataclass(frozen=True)
class ParamFormNote:
    """Something in one captured config that PARAM's replay does not reproduce."""

    op: str
    schema: str
    input_index: int  # the config's place in the op's ``input`` list for this schema
    reason: str
    fails: bool  # PARAM's replay of the config fails (else it runs, but not as captured)

    def to_json(self) -> Dict[str, Any]:
        return {"op": self.op, "schema": self.schema, "input": self.input_index,
                "reason": self.reason, "fails": self.fails}


@dataclass(frozen=True)
class _Declared:
    name: str
    type_text: str
    has_default: bool
    default: Any


@lru_cache(maxsize=4096)
def _declared(schema: str) -> Tuple[_Declared, ...]:
    """Declared arguments with their defaults as Python values (enum defaults as codes)."""
    import torch

    parsed = torch._C.parse_schema(schema)
    texts = schema_arguments(schema)
    return tuple(_Declared(arg.name, text.type_text, arg.has_default_value(), arg.default_value)
                 for arg, text in zip(parsed.arguments, texts))


def value_spec(value: Any) -> Dict[str, Any]:
    """A data spec for a schema default (None, bool, int, float, str or a list of them)."""
    if value is None:
        return {"type": "none"}
    if isinstance(value, bool):
        return {"type": "bool", "value": value}
    if isinstance(value, int):
        return {"type": "int", "value": value}
    if isinstance(value, float):
        if math.isfinite(value):
            return {"type": "float", "value": value}
        return {"type": "float", "value": "nan" if math.isnan(value) else
                ("inf" if value > 0 else "-inf")}
    if isinstance(value, str):
        return {"type": "str", "value": value}
    if isinstance(value, (list, tuple)):
        return {"type": "genericlist", "value": [value_spec(item) for item in value]}
    raise ValueError(f"a schema default of type {type(value).__name__}")


def _number_as_tensor(spec: Dict[str, Any]) -> Dict[str, Any]:
    """A Python number given for a ``Tensor`` parameter -> a 0-dim tensor of its kind."""
    dtype = {"bool": "bool", "int": "long", "long": "long"}.get(spec["type"], "double")
    return {"type": "tensor", "dtype": dtype, "shape": [], "requires_grad": False}


def _walk(spec: Any) -> Iterator[Dict[str, Any]]:
    if isinstance(spec, dict):
        yield spec
        if spec.get("type") in ("genericlist", "tuple") and isinstance(spec.get("value"), list):
            for item in spec["value"]:
                yield from _walk(item)


def _with_enum_codes(spec: Dict[str, Any]) -> Dict[str, Any]:
    codes = ENUM_CODES.get(spec.get("type"))
    if codes is not None:
        return {"type": "int", "value": codes[spec["value"]]}
    if spec.get("type") in ("genericlist", "tuple"):
        return {**spec, "value": [_with_enum_codes(item) for item in spec["value"]]}
    return spec


def _index_arguments(schema: str, args: List[Dict[str, Any]]) -> Set[str]:
    """Names of the arguments the op reads as indices: those its index rule gives a range to.

    (A live capture records the value range of every integer tensor; only these need it.)"""
    named = {}
    for arg, spec in zip(_declared(schema), args):
        spec = copy.deepcopy(spec)
        for item in _walk(spec):
            for key in ("value_range",) + STRUCTURE_KEYS:
                item.pop(key, None)
        named[arg.name] = spec
    try:
        index_rules(split_name(schema)[1], named)
    except Exception:  # an odd shape: no rule applies
        return set()
    return {name for name, spec in named.items()
            if any(key in item for item in _walk(spec) for key in ("value_range",)
                   + STRUCTURE_KEYS)}


def _problems(schema: str, args: List[Dict[str, Any]]) -> List[Tuple[str, bool]]:
    """(what PARAM will not reproduce in these rewritten positional args, whether PARAM's
    replay fails on it)."""
    reasons: List[Tuple[str, bool]] = []
    indices = _index_arguments(schema, args)
    for arg, spec in zip(_declared(schema), args):
        for item in _walk(spec):
            kind = item.get("type")
            if kind not in PARAM_ARG_TYPES:
                reasons.append((f"{arg.name}: PARAM's data generator has no {kind!r} values",
                                True))
            elif kind == "tensor":
                if item.get("dtype") == "uint8" and item.get("shape"):
                    reasons.append((f"{arg.name}: PARAM fills integer tensors with values in "
                                    "[-10, 10), which a uint8 tensor cannot hold", True))
                elif item.get("dtype") not in PARAM_TENSOR_DTYPES:
                    reasons.append((f"{arg.name}: PARAM makes no {item.get('dtype')} tensors",
                                    True))
                value_range = item.get("value_range")
                if arg.name in indices and value_range is not None and not (
                        value_range[0] <= PARAM_INTEGER_FILL[0]
                        and PARAM_INTEGER_FILL[1] <= value_range[1]):
                    reasons.append((
                        f"{arg.name}: indices in [{value_range[0]}, {value_range[1]}], but "
                        "PARAM fills integer tensors with values in [-10, 10)", True))
                structure = [key for key in STRUCTURE_KEYS if key in item]
                if structure:
                    reasons.append((f"{arg.name}: {structure[0]} values (sorted offsets, "
                                    "positions in pooling windows), but PARAM fills integer "
                                    "tensors with values in [-10, 10)", True))
                if "stride" in item or "storage_offset" in item:
                    reasons.append((f"{arg.name}: PARAM makes a contiguous tensor, not the "
                                    "captured strided view", False))
                if "value_profile" in item:
                    reasons.append((f"{arg.name}: PARAM fills floating tensors with ordinary "
                                    "values in [0, 1), not the captured share of zeros, "
                                    "subnormals and negatives (value_profile)", False))
            elif kind in ("float", "double") and isinstance(item.get("value"), str):
                reasons.append((f"{arg.name}: PARAM cannot make the float {item['value']}",
                                True))
        if arg.name == "output_mask" and any(
                item.get("type") == "bool" and item.get("value") is False
                for item in _walk(spec)):
            reasons.append(("output_mask: an unrequested gradient is an undefined tensor, "
                            "which PARAM's TorchScript graph cannot return", True))
    if re.search(r"\(\w+ -> \*\)", schema):
        reasons.append(("the schema has an alias annotation (a -> *): PARAM splits a schema "
                        "at its first '->', inside that annotation", True))
    for text in schema_arguments(schema):
        if text.type_text.startswith(("Tensor[]", "Tensor?[]")):
            reasons.append((f"{text.name}: PARAM's graph declares a {text.type_text} argument "
                            "as a single Tensor", True))
        if text.default is not None and "," in text.default:
            reasons.append((f"{text.name}: PARAM splits the schema's argument list at every "
                            f"comma, which breaks the default {text.default}", True))
    return reasons


def to_param_form(schema: str, args: List[Dict[str, Any]], kwargs: Dict[str, Dict[str, Any]]
                  ) -> Tuple[List[Dict[str, Any]], List[Tuple[str, bool]]]:
    """(every declared argument as a positional data spec, [(what PARAM won't reproduce,
    whether its replay fails on it)])."""
    declared = _declared(schema)
    if len(args) > len(declared):
        raise ValueError(f"{len(args)} args for a schema of {len(declared)} arguments")
    unknown = set(kwargs) - {arg.name for arg in declared}
    if unknown:
        raise ValueError(f"keyword arguments not in the schema: {sorted(unknown)}")
    positional: List[Dict[str, Any]] = []
    for index, arg in enumerate(declared):
        if index < len(args):
            spec = args[index]
        elif arg.name in kwargs:
            spec = kwargs[arg.name]
        elif arg.has_default:
            spec = value_spec(arg.default)
        else:
            raise ValueError(f"no value for {arg.name}, which has no default")
        spec = _with_enum_codes(spec)
        base_type = arg.type_text.rstrip("?")
        if base_type == "Tensor" and spec.get("type") in ("int", "long", "float", "double",
                                                          "bool"):
            spec = _number_as_tensor(spec)
        positional.append(spec)
    return positional, _problems(schema, positional)


def param_form_spec(spec: Dict[str, Any]) -> Tuple[Dict[str, Any], List[ParamFormNote]]:
    """A captured spec rewritten for PARAM (a new dict), with its notes."""
    notes: List[ParamFormNote] = []
    out: Dict[str, Any] = {}
    for op, entry in spec.items():
        if op.startswith(GRAPH_PREFIX):  # a compiled region's graph: PARAM has no such op
            notes.extend(ParamFormNote(op, "", index, "a compiled region's graph: PARAM "
                                       "skips it as an unknown operator", True)
                         for config in entry["config"] for index in range(len(config["input"])))
            out[op] = entry
            continue
        configs = []
        for config in entry["config"]:
            schema = config["build"][0]["args"][0]["value"]
            inputs = []
            for index, arg_spec_list in enumerate(config["input"]):
                try:
                    args, reasons = to_param_form(schema, arg_spec_list.get("args", []),
                                                  arg_spec_list.get("kwargs", {}))
                except (ValueError, KeyError, RuntimeError) as exc:  # kept as captured
                    inputs.append(arg_spec_list)
                    notes.append(ParamFormNote(op, schema, index, "not written in PARAM's "
                                               f"form: {exc}", True))
                    continue
                if op in PARAM_UNSUPPORTED_OPS:
                    reasons = [(f"PARAM skips {op}: it is on PARAM's list of unsupported ops",
                                True)] + reasons
                rewritten = {"args": args}
                for key in ("count", "original_us"):
                    if key in arg_spec_list:
                        rewritten[key] = arg_spec_list[key]
                inputs.append(rewritten)
                notes.extend(ParamFormNote(op, schema, index, reason, fails)
                             for reason, fails in reasons)
            configs.append({**config, "input": inputs})
        out[op] = {**entry, "config": configs}
    return out, notes


def noted_configs(notes: List[ParamFormNote], fails: bool) -> Set[Tuple[str, str, int]]:
    """(op, schema, input index) of the configs PARAM fails on (``fails``) or runs otherwise
    than captured (not ``fails``, and not failing)."""
    failing = {(n.op, n.schema, n.input_index) for n in notes if n.fails}
    if fails:
        return failing
    return {(n.op, n.schema, n.input_index) for n in notes} - failing


def note_summary(notes: List[ParamFormNote], configs: int) -> str:
    failing, differing = len(noted_configs(notes, True)), len(noted_configs(notes, False))
    return (f"PARAM form: PARAM runs {configs - failing} of {configs} configs "
            f"({differing} not exactly as captured), fails on {failing}")
