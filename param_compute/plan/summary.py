"""What a run's config is, in a few words and numbers: pure Python, no torch.

From the expanded config of a run (``{"build": ..., "input": {"args": [...], "kwargs": {...}}}``,
as in the results file) this module derives

* the labels people read: tensor shapes (``128x256``), dtypes and scalar parameters, for CSV
  rows, OSS records and report legends, and the one-cell label of every table
  (``config_label``: ``64×4096·4096×512 bf16``);
* flat features (``arg0.shape[1]`` -> 256) whose variation across a sweep is the x axis of a plot;
* a rough cost estimate (seconds of a notional device) that balances shards.

Arguments are labelled by position (``arg0``), keyword (``alpha``) and, for build arguments, with
a ``build.`` prefix; items of a list argument add ``[i]``. Configs of custom iterators may have
another layout: whatever is not a data spec is ignored.
"""

from __future__ import annotations

import itertools
from typing import Any, Dict, Iterator, List, Optional, Tuple

from param_compute.dtypes import DTYPE_NAMES, short_dtype
from param_compute.plan.tensor_bytes import tensor_spec_bytes
from param_compute.spec.walker import CONTAINER_TYPES, asl_data_specs, nested_data_specs

_SCALAR_TYPES = ("int", "long", "float", "double", "bool", "str", "device", "dtype", "layout",
                 "memory_format")


def _label(prefix: str, path: tuple) -> str:
    """``("args", 0, "value", 2)`` -> ``arg0[2]``; ``("kwargs", "dim")`` -> ``dim``."""
    section, key = path[0], path[1]
    text = f"{prefix}arg{key}" if section == "args" else f"{prefix}{key}"
    return text + "".join(f"[{index}]" for index in path[3::2])


def data_specs(config: Any) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """(label, data spec) for every leaf data spec of a config: build first, then input (the
    items of a genericlist/tuple in its place, not the list itself)."""
    if not isinstance(config, dict):
        return
    build = config.get("build")
    if isinstance(build, list):  # a few layouts keep the build as a list of arg-spec-lists
        build = build[0] if len(build) == 1 else None
    for prefix, asl in (("build.", build), ("", config.get("input"))):
        if not isinstance(asl, dict):
            continue
        for spec, path in asl_data_specs(asl):
            for item, where in itertools.chain([(spec, path)], nested_data_specs(spec, path)):
                if isinstance(item, dict) and not (item.get("type") in CONTAINER_TYPES
                                                   and isinstance(item.get("value"), list)):
                    yield _label(prefix, where), item


def _is_shape(shape: Any) -> bool:
    return isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool)
                                           for d in shape)


def shape_text(shape: List[int]) -> str:
    return "x".join(str(d) for d in shape) if shape else "scalar"


def dtype_name(spec_dtype: Any) -> str:
    return DTYPE_NAMES.get(spec_dtype, str(spec_dtype))


def tensors(config: Any) -> List[Tuple[str, List[int], str]]:
    """(label, shape, dtype) of every tensor the config describes."""
    return [(label, spec["shape"], dtype_name(spec.get("dtype", "float")))
            for label, spec in data_specs(config)
            if spec.get("type") == "tensor" and _is_shape(spec.get("shape"))]


def _labelled(label: str, text: str) -> str:
    # Positional input args read best bare; keywords and build args carry their name.
    return text if label.startswith("arg") and "[" not in label and "." not in label \
        else f"{label}={text}"


def shapes_summary(config: Any) -> str:
    """``128x256;256x256`` (positional inputs bare; ``name=...`` for the others)."""
    return ";".join(_labelled(label, shape_text(shape)) for label, shape, _ in tensors(config))


def dtypes_summary(config: Any) -> str:
    """The distinct tensor dtypes, in order of appearance: ``float32`` or ``float32;int64``."""
    seen: List[str] = []
    for _, _, dtype in tensors(config):
        if dtype not in seen:
            seen.append(dtype)
    return ";".join(seen)


def params_summary(config: Any) -> str:
    """Scalar arguments: ``arg1=3;alpha=1``."""
    parts = []
    for label, spec in data_specs(config):
        if spec.get("type") in _SCALAR_TYPES and "value" in spec:
            parts.append(f"{label}={spec['value']}")
    return ";".join(parts)


def features(config: Any) -> Dict[str, Any]:
    """Flat view of a config: ``arg0.shape[1]`` -> 256, ``arg0.dtype`` -> ``float32``,
    ``alpha`` -> 1. Sweeps vary some of these; the report plots against them."""
    out: Dict[str, Any] = {}
    for label, spec in data_specs(config):
        kind = spec.get("type")
        if kind == "tensor":
            shape = spec.get("shape")
            if _is_shape(shape):
                for dim, size in enumerate(shape):
                    out[f"{label}.shape[{dim}]"] = size
            out[f"{label}.dtype"] = dtype_name(spec.get("dtype", "float"))
        elif kind in _SCALAR_TYPES and "value" in spec:
            value = spec["value"]
            if isinstance(value, (int, float, str, bool)) or value is None:
                out[label] = value
    return out


# --- the table label ---------------------------------------------------------------------
# A config in a few characters, for every table a person reads: ``64×4096·4096×512 bf16``.
# Tensors print as their shape (``×`` between dimensions, ``[]`` for a 0-d tensor), arguments
# are joined by ``·``, keyword arguments as ``name=value``, lists and tuples in brackets; the
# dtype is said once at the end when every tensor has the same one, else after each tensor
# (``8×8:i64``). Build arguments (a module's constructor) come first, in parentheses (an aten
# op's schema string, which only names the op, is left out). Scalars are shortened.

#: A string value longer than this is cut (an aten schema string, a file path).
MAX_STRING = 16
#: Nested lists deeper than this print as ``…``.
MAX_DEPTH = 4


def config_label(config: Any, width: Optional[int] = None) -> str:
    """The compact label of a record's ``config`` (``{"build": ..., "input": ...}``), cut to
    ``width`` characters with ``…`` when given."""
    if not isinstance(config, dict):
        return ""
    dtypes: List[str] = []
    inputs = _asl(config.get("input"), dtypes)
    build = config.get("build")
    built = _asl(build[0] if isinstance(build, list) and build else build, dtypes)
    mixed = len(set(dtypes)) > 1
    if mixed:  # each tensor says its own dtype
        dtypes = []
        inputs = _asl(config.get("input"), dtypes, each=True)
        built = _asl(build[0] if isinstance(build, list) and build else build, dtypes,
                     each=True)
    label = f"({built}) {inputs}" if built else inputs
    if dtypes and not mixed:
        label += f" {dtypes[0]}"
    return cut(label.strip(), width)


def cut(text: str, width: Optional[int]) -> str:
    if width is None or len(text) <= width:
        return text
    return text[:max(width - 1, 0)] + "…"


def _is_schema(spec: Any) -> bool:
    """An aten op's schema string given as its build argument: it names the op, no config."""
    return isinstance(spec, dict) and isinstance(spec.get("value"), str) and "->" in spec["value"]


def _asl(asl: Any, dtypes: List[str], each: bool = False) -> str:
    if not isinstance(asl, dict):
        return ""
    parts = []
    args = asl.get("args")
    if isinstance(args, list):
        parts += [_value(spec, dtypes, each, 0) for spec in args if not _is_schema(spec)]
    kwargs = asl.get("kwargs")
    if isinstance(kwargs, dict):
        for key, spec in kwargs.items():
            if isinstance(spec, dict) and spec.get("value", "") is None:
                continue  # an explicit None keyword says nothing about the config
            parts.append(f"{key}={_value(spec, dtypes, each, 0)}")
    return "·".join(parts)


def _value(spec: Any, dtypes: List[str], each: bool, depth: int) -> str:
    if not isinstance(spec, dict):
        return _scalar(spec)
    kind = spec.get("type")
    if kind == "tensor":
        shape = spec.get("shape")
        text = "×".join(str(d) for d in shape) if isinstance(shape, list) and shape else "[]"
        dtype = short_dtype(spec.get("dtype", "float32"))
        dtypes.append(dtype)
        return f"{text}:{dtype}" if each else text
    if kind in CONTAINER_TYPES:
        items = spec.get("value")
        if depth >= MAX_DEPTH or not isinstance(items, list):
            return "…"
        inner = ",".join(_value(item, dtypes, each, depth + 1) for item in items)
        return f"[{inner}]" if kind == "genericlist" else f"({inner})"
    if kind == "dtype":
        return short_dtype(spec.get("value"))
    return _scalar(spec.get("value"))


def _scalar(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ",".join(_scalar(v) for v in value[:8]) + (",…" if len(value) > 8 else "") \
            + "]"
    if isinstance(value, str):
        return cut(value, MAX_STRING)
    return cut(str(value), MAX_STRING)


# --- cost estimate (shard balancing) ---------------------------------------------------------

#: A notional device: FLOP rate, memory bandwidth (machine balance 20 FLOP/byte) and a fixed cost
#: per run (launch, data generation set-up, bookkeeping). Only ratios matter.
FLOP_RATE = 2e12
BYTE_RATE = 1e11
RUN_OVERHEAD_S = 2e-5
#: FLOPs per input element of a whole-model workload (AlexNet ~5e3, ResNet-50 ~3e4 per element).
MODEL_FLOPS_PER_ELEMENT = 1e4

_MATMUL_NAMES = ("mm", "bmm", "matmul", "baddbmm", "addmm", "addbmm", "addmv", "mv", "dot",
                 "einsum", "linear", "bilinear", "scaled_dot_product_attention")


def _numel(shape: List[int]) -> int:
    total = 1
    for dim in shape:
        total *= max(dim, 0)
    return total


def _matmul_flops(a: List[int], b: List[int]) -> int:
    """2 * batch * m * k * n for ``a @ b`` (1-d operands promoted as matmul does)."""
    if not a or not b:
        return 0
    k = a[-1]
    n = b[-1] if len(b) > 1 else 1
    return 2 * _numel(a[:-1] or [1]) * k * n


def _int_values(config: Any, prefix: str) -> List[int]:
    return [spec["value"] for label, spec in data_specs(config)
            if label.startswith(prefix) and spec.get("type") in ("int", "long")
            and isinstance(spec.get("value"), int)]


def estimate_flops(op_name: str, config: Any) -> int:
    """A rough FLOP count of one call, from the op name and the config's shapes alone."""
    found = tensors(config)
    inputs = [shape for label, shape, _ in found if not label.startswith("build.")]
    if not inputs:
        return 0
    largest = max(_numel(s) for s in inputs)
    leaf = op_name.rsplit(".", 1)[-1].split("::")[-1].lower().rstrip("_")
    builds = _int_values(config, "build.")
    if "model" in op_name.lower():
        return int(largest * MODEL_FLOPS_PER_ELEMENT)
    if leaf == "linear" and builds:  # nn.Linear(in, out): 2 * rows * in * out
        return 2 * largest * builds[1 if len(builds) > 1 else 0]
    if leaf.startswith("conv"):
        if builds:  # nn.ConvNd(in, out, kernel, ...): output about the input's size
            out_channels = builds[1] if len(builds) > 1 else 1
            kernel = builds[2] if len(builds) > 2 else 1
            spatial = len(inputs[0]) - 2 if len(inputs[0]) > 2 else 1
            return 2 * largest * out_channels * kernel ** spatial
        if len(inputs) > 1 and len(inputs[0]) > 1:  # F.convNd(x, weight)
            return 2 * (largest // max(inputs[0][1], 1)) * _numel(inputs[1])
    if leaf in _MATMUL_NAMES and len(inputs) >= 2:
        a, b = inputs[-2], inputs[-1]
        if leaf == "linear":  # F.linear(x, weight[out, in])
            return 2 * _numel(a) * (b[0] if b else 1)
        return max(_matmul_flops(a, b), largest)
    return largest  # elementwise, reductions, copies: about one operation per element


def estimate_bytes(config: Any) -> int:
    """Bytes of the input tensors plus an output the size of the largest one."""
    sizes = [tensor_spec_bytes(spec) for label, spec in data_specs(config)
             if spec.get("type") == "tensor" and _is_shape(spec.get("shape"))
             and not label.startswith("build.")]
    return sum(sizes) + max(sizes, default=0)


def estimate_cost(op_name: str, config: Any) -> float:
    """Estimated seconds per call on a notional device (roofline plus a fixed overhead)."""
    return max(estimate_flops(op_name, config) / FLOP_RATE,
               estimate_bytes(config) / BYTE_RATE) + RUN_OVERHEAD_S


def varying_features(configs: List[Any]) -> Tuple[Dict[str, List[Any]], Dict[str, List[str]]]:
    """Features whose values differ across ``configs``, each with its column of values, and
    the aliases of each: features always equal to it (dims tied by ``__copy__``), dropped from
    the columns. A feature present in some configs only varies (its absence is ``None``)."""
    table = [features(c) for c in configs]
    names: List[str] = []
    for row in table:
        for name in row:
            if name not in names:
                names.append(name)
    columns: Dict[str, List[Any]] = {}
    aliases: Dict[str, List[str]] = {}
    for name in names:
        column = [row.get(name) for row in table]
        if len({repr(v) for v in column}) < 2:
            continue
        twin = next((other for other, values in columns.items() if values == column), None)
        if twin is None:
            columns[name] = column
            aliases[name] = []
        else:
            aliases[twin].append(name)
    return columns, aliases


def numeric_column(column: List[Any]) -> Optional[List[float]]:
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in column):
        return [float(v) for v in column]
    return None
