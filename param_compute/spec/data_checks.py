"""The checks of one data spec that its JSON Schema can't express, by data spec type.

Dtype names, shape dims and ranges, ``requires_grad`` against the dtype, strides, devices, what
``__range__``/``__list__`` may name, and whether every ``__copy__`` reads and writes list
elements that exist in every combination. ``SpecValidator`` mixes these in; each check reports
through its ``problem``/``warn``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Sequence

from param_compute.dtypes import (DTYPE_NAMES, LAYOUT_NAMES, MEMORY_FORMAT_NAMES, NON_FINITE_FLOATS,
                                  is_differentiable)
from param_compute.errors import did_you_mean
from param_compute.spec import fastpath, float_data
from param_compute.spec.index_data import structure_problems
from param_compute.spec.macros import (ATTR_COPY, ATTR_LIST, ATTR_RANGE, DEFAULT_ITERATOR,
                                       DUMMY_ITERATOR, MACRO_KEYS, RANGE_ITERATOR,
                                       expanded_lists, has_macros, is_whole_copy)
from param_compute.spec.wording import dtype_hint, json_type, short
from param_compute.spec.walker import misplaced_keys


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_device(value: Any) -> bool:
    kind = value.split(":", 1)[0] if isinstance(value, str) else None
    index = value.split(":", 1)[1] if isinstance(value, str) and ":" in value else "0"
    return kind in ("cpu", "cuda", "meta", "mps", "xpu") and index.isdigit()


def _range_problem(bounds: Any) -> Optional[str]:
    """What is wrong with a ``[min, max(, step)]`` integer range, or None."""
    if not isinstance(bounds, list) or len(bounds) not in (2, 3) or not all(map(_is_int, bounds)):
        return f"a range is [min, max] or [min, max, step] of integers, got {short(bounds)}"
    if len(bounds) == 3 and bounds[2] <= 0:
        return f"range step must be > 0, got {bounds[2]}"
    if bounds[0] > bounds[1]:
        return f"range min {bounds[0]} is greater than max {bounds[1]}"
    return None


@dataclass
class _Section:
    """Context for checking one arg-spec-list (an entry of ``build`` or ``input``)."""

    iterator: str  # the iterator name expanding this section
    iterator_key: str = "input_iterator"  # the operator key naming that iterator
    args: List[Any] = field(default_factory=list)

    @property
    def expands_macros(self) -> bool:
        return self.iterator == RANGE_ITERATOR

    @property
    def custom(self) -> bool:
        return self.iterator not in (RANGE_ITERATOR, DEFAULT_ITERATOR, DUMMY_ITERATOR)


#: The check of each data spec type (a method of ``DataSpecChecks``).
_CHECKERS = {"tensor": "_check_tensor", "int": "_check_integer", "long": "_check_integer",
             "float": "_check_float", "double": "_check_float", "bool": "_check_bool",
             "str": "_check_str", "device": "_check_device", "dtype": "_check_dtype_value",
             "genericlist": "_check_list", "tuple": "_check_list", "layout": "_check_layout",
             "memory_format": "_check_memory_format"}


class DataSpecChecks:
    """Checks of data specs; the class mixing them in provides ``problem`` and ``warn``."""

    def problem(self, path: Sequence[Any], message: str, hint: Optional[str] = None) -> None:
        raise NotImplementedError

    def warn(self, path: Sequence[Any], message: str) -> None:
        raise NotImplementedError

    def _check_data_spec(self, spec: Any, path, section: _Section, copy_allowed: bool) -> None:
        if not isinstance(spec, dict):
            return
        arg_type = spec.get("type")
        if arg_type == "tensor" and "dtype" not in spec and not any(
                isinstance(entry, dict) and is_whole_copy(entry.get("dtype"))
                for entry in spec.get(ATTR_COPY) or []):  # {"dtype": N} fills it in
            self.problem(path, "missing required key 'dtype'",
                         'give one, or copy another arg\'s with "__copy__": [{"dtype": ARG}]')
        ranged = spec.get(ATTR_RANGE) or []
        listed = spec.get(ATTR_LIST) or []
        if (ranged or listed or ATTR_COPY in spec) and not section.custom \
                and not section.expands_macros:
            macro = ATTR_RANGE if ranged else ATTR_LIST if listed else ATTR_COPY
            self.problem(path + (macro,), f"{macro} has no effect with {section.iterator}",
                         f'set the operator\'s "{section.iterator_key}" to '
                         f'"{RANGE_ITERATOR}"')
            return
        if section.custom:
            return  # a custom iterator gives macros its own meaning
        self._check_macro_names(spec, path, arg_type, ranged, listed)
        for key, owner, hint in misplaced_keys(spec):
            self.problem(path + (key,), f"{key} applies to {owner} args, not to "
                         f"{short(arg_type)}", hint)
        name = _CHECKERS.get(arg_type) if isinstance(arg_type, str) else None
        checker = getattr(self, name) if name else None
        if checker:
            checker(spec, path, section, "value" in ranged or "value" in listed)
        if ATTR_COPY in spec:
            if copy_allowed:
                self._check_copies(spec, path, section)
            else:
                self.problem(path + (ATTR_COPY,), "__copy__ works on args and kwargs, not on "
                                                  "items nested inside a list or tuple")
        if "value_range" in spec:
            low, high = spec["value_range"]
            if _is_number(low) and _is_number(high) and low > high:
                self.problem(path + ("value_range",), f"min {low} is greater than max {high}",
                             "write [min, max]")

    def _check_macro_names(self, spec, path, arg_type, ranged, listed) -> None:
        rangeable = {"tensor": ("shape", "dtype", "requires_grad"),
                     "genericlist": ("value",), "tuple": ("value",), "none": ()}
        allowed = rangeable.get(arg_type, ("value",))
        for macro, names in ((ATTR_RANGE, ranged), (ATTR_LIST, listed)):
            verb = "ranged" if macro == ATTR_RANGE else "listed"
            for i, attr in enumerate(names):
                if attr not in spec:
                    self.problem(path + (macro, i), f"{macro} names {attr!r}, which this "
                                                    f"{arg_type} arg does not have",
                                 did_you_mean(attr, [k for k in spec if k not in MACRO_KEYS]))
                elif macro == ATTR_RANGE and arg_type in ("float", "double"):
                    # PARAM never ranged floats; [0.1, 1.0] could read as a continuous range.
                    self.problem(path + (macro, i), f"{attr!r} of a {arg_type} arg cannot be "
                                                    "ranged",
                                 'list the choices with "__list__": ["value"]')
                elif attr not in allowed:
                    self.problem(path + (macro, i), f"{attr!r} of a {arg_type} arg cannot be "
                                                    f"{verb}",
                                 f"{verb} here: {', '.join(allowed) or 'nothing'}")
                elif macro == ATTR_LIST:
                    if not isinstance(spec[attr], list) or not spec[attr]:
                        self.problem(path + (attr,), f"{attr!r} is named in __list__ so it must "
                                                     "be a non-empty list of choices")
        both = set(ranged) & set(listed)
        for attr in sorted(both):
            self.problem(path + (ATTR_LIST,), f"{attr!r} is in both __range__ and __list__")

    def _choices(self, spec, path, key, varying: bool, check_one: Callable[[Any, tuple], None]):
        value = spec.get(key)
        if varying:
            if not isinstance(value, list) or not value:
                self.problem(path + (key,), f"{key!r} varies, so it must be a non-empty list")
                return
            for i, item in enumerate(value):
                check_one(item, path + (key, i))
        elif key in spec:
            check_one(value, path + (key,))

    def _check_tensor(self, spec, path, section, _value_varies) -> None:
        ranged = set(spec.get(ATTR_RANGE) or []) | set(spec.get(ATTR_LIST) or [])

        def check_dtype(value, where):
            if not isinstance(value, str) or value not in DTYPE_NAMES:
                self.problem(where, f"unknown dtype {short(value)}", dtype_hint(value))

        checks = {"dtype": check_dtype,
                  "requires_grad": self._typed(lambda v: isinstance(v, bool), "true or false")}
        for key, check in checks.items():
            if isinstance(spec.get(key), list) and key not in ranged:
                self.problem(path + (key,), f"{key!r} is a list of choices but is not named in "
                                            "__range__ or __list__",
                             f'add "__list__": ["{key}"] (with {RANGE_ITERATOR}) or give one '
                             "value")
            else:
                self._choices(spec, path, key, key in ranged, check)
        dtypes = spec.get("dtype") if isinstance(spec.get("dtype"), list) else [spec.get("dtype")]
        grads = (spec.get("requires_grad") if isinstance(spec.get("requires_grad"), list)
                 else [spec.get("requires_grad")])
        if True in grads:
            for dtype in dtypes:
                if isinstance(dtype, str) and dtype in DTYPE_NAMES and not is_differentiable(dtype):
                    self.problem(path + ("requires_grad",), f"a {dtype} tensor cannot require "
                                 "grad", "only floating and complex tensors can; drop "
                                         "requires_grad or use a floating dtype")
        shape = spec.get("shape")
        if "shape" in (spec.get(ATTR_RANGE) or []) and "shape" in (spec.get(ATTR_LIST) or []):
            pass  # reported as in both; which form the dims should have is unknown
        elif isinstance(shape, list) and "shape" in spec.get(ATTR_LIST, []):
            for i, alternative in enumerate(shape):
                self._check_shape(alternative, path + ("shape", i), spec, False)
        elif isinstance(shape, list):
            self._check_shape(shape, path + ("shape",), spec, "shape" in ranged)
        # A __range__ shape still has one entry per dim (an int or a range): its stride list
        # must match; the alternatives of a __list__ shape are not checked here.
        self._check_tensor_layout(spec, path, None if "shape" in (spec.get(ATTR_LIST) or [])
                                  else shape)
        for where, message, hint in structure_problems(spec) + float_data.profile_problems(spec):
            self.problem(path + where, message, hint)

    def _check_tensor_layout(self, spec, path, shape) -> None:
        """``stride`` (one per dim), ``storage_offset`` and a fixed ``device`` of a tensor."""
        stride = spec.get("stride")
        if isinstance(stride, list) and isinstance(shape, list) and len(stride) != len(shape):
            self.problem(path + ("stride",), f"stride has {len(stride)} entries but the shape "
                                             f"has {len(shape)} dims", "give one stride per dim")
        if isinstance(stride, list):
            for i, step in enumerate(stride):
                if _is_int(step) and step < 0:
                    self.problem(path + ("stride", i), f"strides must be >= 0, got {step}")
        if "device" in spec and not _is_device(spec["device"]):
            self.problem(path + ("device",), f"not a device: {short(spec['device'])}",
                         'write "cpu", "cuda" or "cuda:N"')

    def _check_shape(self, shape, path, spec, ranged: bool) -> None:
        if not isinstance(shape, list):
            self.problem(path, f"a shape is a list of dims, got {short(shape)}")
            return
        copies = [entry.get("shape") for entry in spec.get(ATTR_COPY, [])
                  if isinstance(entry, dict) and "shape" in entry]
        copy_targets = ({m[0] for m in copies if isinstance(m, list) and m and _is_int(m[0])}
                        | (set(range(len(shape))) if any(map(is_whole_copy, copies)) else set()))
        for i, dim in enumerate(shape):
            where = path + (i,)
            if isinstance(dim, list):
                if not ranged:
                    self.problem(where, f"dim {short(dim)} is a range but 'shape' is not in "
                                        "__range__", 'add "__range__": ["shape"]')
                else:
                    message = _range_problem(dim)
                    if message:
                        self.problem(where, message)
                    elif dim[0] < 0:
                        self.problem(where, f"a dim range must not go below 0, got {dim[0]}")
            elif _is_int(dim):
                if dim == -1:
                    if i not in copy_targets:
                        self.problem(where, "placeholder dim -1 is never filled",
                                     f'fill it with "__copy__": [{{"shape": [{i}, [arg, dim]]}}] '
                                     "or give a size")
                elif dim < 0:
                    self.problem(where, f"dims must be >= 0, got {dim}")
            else:
                self.problem(where, f"a dim is an integer or [min, max(, step)], got "
                                    f"{short(dim)}")

    def _check_integer(self, spec, path, section, varies) -> None:
        if varies and "value" in (spec.get(ATTR_RANGE) or []):
            message = _range_problem(spec.get("value"))
            if message:
                self.problem(path + ("value",), message)
            return

        def check(value, where):
            if _is_int(value):
                return
            if _is_number(value):
                # PARAM's own specs pass 2.5 as an "int" (test_native_basic_ops.json): accepted
                # as written, but never silently.
                self.warn(where, f"{spec['type']} value {value} is not an integer; passed as is")
            else:
                self.problem(where, f"expected an integer, got {json_type(value)} "
                                    f"{short(value)}")

        self._choices(spec, path, "value", varies, check)
        value_range = spec.get("value_range")
        if isinstance(value_range, list) and not all(map(_is_int, value_range)):
            self.problem(path + ("value_range",), f"an {spec['type']} value_range is two "
                                                  f"integers, got {short(value_range)}")

    def _typed(self, predicate, expected: str):
        def check(value, where):
            if not predicate(value):
                self.problem(where, f"expected {expected}, got {json_type(value)} "
                                    f"{short(value)}")
        return check

    def _check_float(self, spec, path, section, varies) -> None:
        self._choices(spec, path, "value", varies,
                      self._typed(lambda v: _is_number(v) or v in NON_FINITE_FLOATS,
                                  'a number (or "inf", "-inf", "nan")'))

    def _check_bool(self, spec, path, section, varies) -> None:
        self._choices(spec, path, "value", varies,
                      self._typed(lambda v: isinstance(v, bool), "true or false"))

    def _check_str(self, spec, path, section, varies) -> None:
        self._choices(spec, path, "value", varies,
                      self._typed(lambda v: isinstance(v, str), "a string"))

    def _check_device(self, spec, path, section, varies) -> None:
        def check(value, where):
            if not _is_device(value):
                self.problem(where, f"not a device: {short(value)}",
                             'write "cpu", "cuda" or "cuda:N"')

        self._choices(spec, path, "value", varies, check)

    def _check_dtype_value(self, spec, path, section, varies) -> None:
        def check(value, where):
            if not isinstance(value, str) or value not in DTYPE_NAMES:
                self.problem(where, f"unknown dtype {short(value)}", dtype_hint(value))

        self._choices(spec, path, "value", varies, check)

    def _named_value(self, names: Sequence[str], kind: str):
        def check(value, where):
            if value not in names:
                self.problem(where, f"unknown {kind} {short(value)}",
                             (did_you_mean(value, names) if isinstance(value, str) else None)
                             or f"known: {', '.join(names)}")
        return check

    def _check_layout(self, spec, path, section, varies) -> None:
        self._choices(spec, path, "value", varies, self._named_value(LAYOUT_NAMES, "layout"))

    def _check_memory_format(self, spec, path, section, varies) -> None:
        self._choices(spec, path, "value", varies,
                      self._named_value(MEMORY_FORMAT_NAMES, "memory format"))

    def _check_list(self, spec, path, section, varies) -> None:
        items = spec.get("value")
        if not isinstance(items, list):
            return
        if "value" in (spec.get(ATTR_LIST) or []):
            self.problem(path + (ATTR_LIST,), f"a {spec['type']} value is a list of data specs; "
                                              "vary its items with __range__ instead")
            return
        for i, item in enumerate(items):
            if fastpath.data_spec(item):
                continue  # plain, and free of any problem
            if isinstance(item, dict) and has_macros(item) and not varies:
                self.problem(path + ("value", i), f"item has {ATTR_RANGE}/{ATTR_LIST} but the "
                                                  f"{spec['type']} is not ranged",
                             f'add "__range__": ["value"] to the {spec["type"]}')
            self._check_data_spec(item, path + ("value", i), section, copy_allowed=False)

    def _check_whole_copy(self, spec, where, attr: str, src_arg: int, args) -> None:
        """``{"dtype": 0}``: arg 0 has ``attr`` (same arg type); this arg does not vary it."""
        if src_arg >= len(args):
            self.problem(where, f"source arg index {src_arg} is out of range: there are "
                                f"{len(args)} args")
            return
        source = args[src_arg]
        if source is spec:
            self.problem(where, f"copies {attr!r} from itself (arg {src_arg})")
            return
        if not isinstance(source, dict) or (attr not in source and attr != "dtype"):
            self.problem(where, f"source arg {src_arg} has no {attr!r}")
        elif source.get("type") != spec.get("type"):
            self.problem(where, f"copies {attr!r} from arg {src_arg}, a {source.get('type')} arg,"
                                f" into a {spec.get('type')} arg")
        elif attr in (spec.get(ATTR_RANGE) or []) or attr in (spec.get(ATTR_LIST) or []):
            self.problem(where, f"{attr!r} is copied from arg {src_arg} and also varied here",
                         "vary it in the source arg only")

    def _check_copies(self, spec, path, section: _Section) -> None:
        """Each copy reads and writes list elements that exist in every combination: the target
        and the source attribute must be lists once expanded (a constant list, a shape with ranged
        dims, a ranged genericlist/tuple, or every alternative of a listed attribute), long
        enough for the indices."""
        args = section.args
        for i, entry in enumerate(spec.get(ATTR_COPY) or []):
            for attr, mapping in entry.items():
                where = path + (ATTR_COPY, i, attr)
                if is_whole_copy(mapping):
                    self._check_whole_copy(spec, where, attr, mapping, args)
                    continue
                target, (src_arg, src_elem) = mapping
                own = expanded_lists(spec, attr)
                if own is None:
                    self.problem(where, f"copies into {attr!r}, which this arg does not have as "
                                        "a list" + (" in every combination" if attr in spec
                                                    else ""))
                    continue
                shortest = min(map(len, own))
                if target >= shortest:
                    self.problem(where + (0,), f"target index {target} is out of range: "
                                               f"{attr!r} has {shortest} elements")
                if src_arg >= len(args):
                    self.problem(where + (1, 0), f"source arg index {src_arg} is out of range: "
                                                 f"there are {len(args)} args")
                    continue
                source = (expanded_lists(args[src_arg], attr)
                          if isinstance(args[src_arg], dict) else None)
                if source is None:
                    self.problem(where + (1, 0), f"source arg {src_arg} has no list {attr!r}"
                                 + (" in every combination" if isinstance(args[src_arg], dict)
                                    and attr in args[src_arg] else ""))
                    continue
                shortest = min(map(len, source))
                if src_elem >= shortest:
                    self.problem(where + (1, 1), f"source element index {src_elem} is out of "
                                                 f"range: arg {src_arg}'s {attr!r} has "
                                                 f"{shortest} elements")

