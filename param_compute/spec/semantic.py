"""Semantic validation: the checks of a whole spec that a JSON Schema can't express.

``SpecValidator.validate`` holds a parsed spec to the value limits, then the JSON Schema, then
these checks: operator names resolve, iterators and data generators are registered, aten schema
strings parse, each data spec makes sense (``data_checks``), each variant's size is bounded,
custom iterators accept their configs. Every problem is collected (file, JSON path, what is
wrong, what would be right) and raised together as one ``SpecError``; the result is a typed
``BenchmarkSpec``. The plain parts of a large spec are proved problem-free by ``fastpath`` first,
so their cost is about that of reading them.
"""

from __future__ import annotations

import gc
import itertools
import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

from param_compute.errors import Problem, SpecError, did_you_mean, format_json_path
from param_compute.formatting import printable
from param_compute.spec import fastpath
from param_compute.spec.data_checks import DataSpecChecks, _Section
from param_compute.spec.limits import (CUSTOM_ITERATOR_PROBE, MAX_OPERATORS, MAX_PROBLEMS,
                                       MAX_RUNS_PER_VARIANT, MAX_VALUES_PER_AXIS)
from param_compute.spec.macros import (DEFAULT_ITERATOR, DUMMY_ITERATOR, MISREAD_FACTOR,
                                       RANGE_ITERATOR, literal_count, variant_axes)
from param_compute.spec.model import (DEFAULT_DATA_GENERATOR, AtenSchemaChecker, BenchmarkSpec,
                                      GraphChecker, OperatorSpec, Resolution, Resolver)
from param_compute.spec.graphs import GRAPHS_KEY, graph_input_problems, graph_name, graphs_of
from param_compute.spec.job import process_groups, rank_entry_problems
from param_compute.spec.reserved import RESERVED_KEYS, capture_settings, reserved_problems
from param_compute.spec.schema import data_spec_schema_problems, schema_problems
from param_compute.spec.walker import asl_data_specs

log = logging.getLogger("param_compute")


class _TooManyProblems(Exception):
    """Raised when MAX_PROBLEMS problems are known: the rest of the spec is not checked."""


class SpecValidator(DataSpecChecks):
    """Checks one parsed spec; ``validate`` returns a BenchmarkSpec or raises SpecError."""

    def __init__(self, source: str, registries, resolve: Resolver,
                 check_aten_schema: Optional[AtenSchemaChecker] = None,
                 check_graph: Optional[GraphChecker] = None):
        self.source = source
        self.check_graph = check_graph
        self._graphs: Dict[str, Any] = {}  # the spec's __graphs__ (spec.graphs)
        self.registries = registries
        self.resolve = resolve
        self.check_aten_schema = check_aten_schema
        self.problems: List[Problem] = []
        self.warnings: List[str] = []
        self._plain: Any = frozenset()  # ids of the arg-spec-lists proved problem-free
        self._world: Optional[Dict[str, Any]] = None  # a job's __process_groups__
        self._aten_checked: Dict[Tuple[str, str], Optional[str]] = {}
        #: (key, plugins reading there) -> JSON paths: unknown keys accepted for such plugins.
        self._undeclared: Dict[Tuple[str, Tuple[str, ...]], List[tuple]] = {}

    # -- entry point ------------------------------------------------------------------------
    def validate(self, raw: Any) -> BenchmarkSpec:
        collecting = gc.isenabled()
        gc.disable()  # checks make no reference cycles: collections over a large spec are waste
        try:
            return self._validate(raw)
        finally:
            if collecting:
                gc.enable()

    def _validate(self, raw: Any) -> BenchmarkSpec:
        # What the fast path proves problem-free is not checked again (it decides nothing else).
        scan = fastpath.take_scan(raw)
        # The operator count first (it needs no walk), then values JSON can't hold or the engine
        # can't use (and size and depth): every later check may then assume plain, bounded JSON.
        if isinstance(raw, dict) and len(raw) > MAX_OPERATORS:
            raise SpecError(self.source, [Problem((), f"spec has {len(raw)} operators, over the "
                                                      f"{MAX_OPERATORS} limit",
                                                  "split it into several spec files")])
        value_problems = fastpath.scanned_value_problems(raw, scan)
        if value_problems:
            raise SpecError(self.source, value_problems)
        self._plain = scan.plain if scan is not None else frozenset()
        self._world = process_groups(raw)
        self._proved_configs = scan.proved_configs if scan is not None else frozenset()
        operators = []
        try:
            found = (schema_problems(raw) if scan is None else data_spec_schema_problems(
                located for asl, path in scan.rest for located in asl_data_specs(asl, path)))
            if isinstance(raw, dict) and hasattr(self.registries, "declared_keys"):
                found = filter(None, (self._plugin_key(raw, p) for p in found))
            schema_errors = list(itertools.islice(found, MAX_PROBLEMS))
            self.problems.extend(schema_errors)
            if len(self.problems) >= MAX_PROBLEMS:
                raise _TooManyProblems
            bad_paths = [p.path for p in schema_errors]
            if isinstance(raw, dict):
                self._graphs = graphs_of(raw)
                for name, op in raw.items():
                    if name in RESERVED_KEYS:  # not an operator (spec.reserved)
                        known = len(self.problems)
                        for where, message, hint in reserved_problems(name, op):
                            self.problem((name,) + where, message, hint)
                        if name == GRAPHS_KEY and len(self.problems) == known:
                            self._check_graphs()
                        continue
                    operator = self._check_operator(name, op, bad_paths)
                    if operator is not None:
                        operators.append(operator)
        except _TooManyProblems:
            self.problems = _dedupe(self.problems)[:MAX_PROBLEMS] + [Problem(
                (), f"validation stopped after {MAX_PROBLEMS} problems", "fix these first")]
        if self.problems:
            raise SpecError(self.source, _dedupe(self.problems))
        if self._undeclared:
            self.warnings.append(_undeclared_warning(self._undeclared))
        for warning in self.warnings:
            log.warning("%s: %s", self.source, warning)
        return BenchmarkSpec(self.source, tuple(operators), tuple(self.warnings),
                             capture_settings(raw), process_groups(raw),
                             self._graphs or None)

    def _check_graphs(self) -> None:
        """What the graphs' form cannot say (``check_graph``, with torch): each node's operator
        allowed and resolved by its exact name, its arity, and the memory its shapes need."""
        if self.check_graph is None:
            return
        for name, graph in self._graphs.items():
            for where, message, hint in self.check_graph(name, graph):
                self.problem((GRAPHS_KEY, name) + tuple(where), message, hint)

    def _plugin_key(self, raw: Dict[str, Any], problem: Problem) -> Optional[Problem]:
        """None for an unknown key that the operator's iterator or generator declares it reads
        there (``spec_keys``); another unknown key's hint names the declared ones."""
        if not problem.message.startswith("unknown key ") or len(problem.path) < 2:
            return problem
        operator, where = raw.get(problem.path[0]), problem.path[1:-1]
        declared = self.registries.declared_keys(operator, where)
        if problem.path[-1] in declared:
            return None
        readers = getattr(self.registries, "undeclared_readers", lambda *_: [])(operator, where)
        if readers:  # a PARAM-style plugin reads it, or may: accepted, said once (_validate)
            self._undeclared.setdefault((problem.path[-1], tuple(readers)), []).append(
                problem.path)
            return None
        if not declared:
            return problem
        return Problem(problem.path, problem.message,
                       did_you_mean(problem.path[-1], declared)
                       or f"{problem.hint}; read here by this operator's plugins: "
                          f"{', '.join(declared)}")

    def problem(self, path: Sequence[Any], message: str, hint: Optional[str] = None) -> None:
        self.problems.append(Problem(tuple(path), message, hint))
        if len(self.problems) >= MAX_PROBLEMS:
            raise _TooManyProblems

    def warn(self, path: Sequence[Any], message: str) -> None:
        self.warnings.append(f"{format_json_path(path)}: {message}")

    # -- operator level ---------------------------------------------------------------------
    def _registered(self, path, kind: str, name: str, table: Dict[str, Any]) -> None:
        if name not in table:
            self.problem(path, f"unknown {kind} {name!r}",
                         did_you_mean(name, table) or f"registered: {', '.join(sorted(table))}")

    def _check_operator(self, name: str, op: Any, bad_paths) -> Optional[OperatorSpec]:
        if not isinstance(op, dict):
            return None
        known_problems = len(self.problems)
        path = (name,)
        resolution = self.resolve(name)
        if not resolution.ok:
            self.problem(path, resolution.reason, resolution.hint)
        regs = self.registries
        names = {}
        for key, default in (("build_iterator", DEFAULT_ITERATOR),
                             ("input_iterator", DEFAULT_ITERATOR),
                             ("build_data_generator", DEFAULT_DATA_GENERATOR),
                             ("input_data_generator", DEFAULT_DATA_GENERATOR)):
            value = op.get(key)
            value = default if value is None else value  # null means the default, as in PARAM
            if not isinstance(value, str):
                continue  # reported by the schema
            table = regs.config_iterators if key.endswith("iterator") else regs.data_generators
            self._registered(path + (key,), key.replace("_", " "), value, table)
            names[key] = value
        if op.get("input_data_generator") is None:
            self.warn(path, f"no input_data_generator; using {DEFAULT_DATA_GENERATOR} (PARAM "
                            "would skip this operator)")
        configs = op.get("config")
        if not isinstance(configs, list) or len(names) < 4:
            return None
        if resolution.ok and resolution.kind == "graph":
            self._check_graph_configs(name, configs)
        aten = resolution.ok and resolution.kind == "aten"
        proved = self._plain.__contains__
        whole = id(configs) in self._proved_configs  # every entry proved by the fast path
        for index, entry in enumerate(configs if aten or not whole else ()):
            if whole or type(entry) is dict and _proved_entry(entry, proved):
                if aten:  # the arg-spec-lists are proved; the schema string is checked here
                    self._check_aten_build(entry, path + ("config", index))
                continue
            entry_path = path + ("config", index)
            if isinstance(entry, dict) and not _under(entry_path, bad_paths):
                self._check_config_entry(entry, entry_path, names, resolution, bad_paths)
        operator = OperatorSpec(name, names["build_iterator"], names["input_iterator"],
                                names["build_data_generator"], names["input_data_generator"],
                                tuple(configs))
        if len(self.problems) == known_problems:
            self._probe_custom_iterators(operator, path)
        return operator

    def _check_graph_configs(self, name: str, configs: List[Any]) -> None:
        """``graph::NAME``: the spec holds the graph, and each input config gives one tensor
        of its shape and dtype per input (``spec.graphs``)."""
        graph = self._graphs.get(graph_name(name))
        if not isinstance(graph, dict):
            self.problem((name,), f"no graph {graph_name(name)!r} in the spec's {GRAPHS_KEY}",
                         did_you_mean(str(graph_name(name)), list(self._graphs)))
            return
        for index, entry in enumerate(configs):
            if not isinstance(entry, dict):
                continue
            if entry.get("build"):
                self.problem((name, "config", index, "build"), "a graph has no build "
                             "arguments")
            for number, asl in enumerate(entry.get("input") or []):
                for where, message in graph_input_problems(graph, asl):
                    self.problem((name, "config", index, "input", number) + where, message)

    def _probe_custom_iterators(self, operator: OperatorSpec, path) -> None:
        """A registered custom iterator gives configs its own meaning, so only running it can
        tell whether it accepts them: count and expand each config entry's first runs, and
        report what it raises as a problem of that entry (not as an engine error mid-run)."""
        builtin = (RANGE_ITERATOR, DEFAULT_ITERATOR, DUMMY_ITERATOR)
        custom = [key for key in ("build_iterator", "input_iterator")
                  if getattr(operator, key) not in builtin]
        if not custom:
            return
        iterators = self.registries.config_iterators
        build_iterator = iterators[operator.build_iterator]
        input_iterator = iterators[operator.input_iterator]
        for index, entry in enumerate(operator.configs):
            try:
                _expand_some(build_iterator, input_iterator, entry, CUSTOM_ITERATOR_PROBE)
            except Exception as exc:  # plugin code: whatever it raises means "not this config"
                names = " / ".join(getattr(operator, key) for key in custom)
                self.problem(path + ("config", index),
                             f"{names} cannot expand this config: {type(exc).__name__}: "
                             f"{printable(exc, 300)}")

    def _check_config_entry(self, entry, path, names, resolution: Resolution, bad_paths) -> None:
        for section_key in ("build", "input"):
            iterator_key = f"{section_key}_iterator"
            iterator = names[iterator_key]
            lists = entry.get(section_key)
            if not isinstance(lists, list):
                continue
            plain = self._plain
            for index, arg_spec_list in enumerate(lists):
                if id(arg_spec_list) in plain:
                    continue  # proved free of problems by the fast path
                list_path = path + (section_key, index)
                if _under(list_path, bad_paths) or not isinstance(arg_spec_list, dict):
                    continue
                self._check_arg_spec_list(arg_spec_list, list_path,
                                          _Section(iterator, iterator_key))
        if resolution.ok and resolution.kind == "aten":
            self._check_aten_build(entry, path)

    def _check_aten_build(self, entry, path) -> None:
        op_name = path[0]
        for index, build in enumerate(entry.get("build") or []):
            args = build.get("args") or []
            first = args[0] if args else None
            if not (isinstance(first, dict) and first.get("type") == "str"):
                continue  # no schema string: the op name picks the overload
            schema = first.get("value")
            if not isinstance(schema, str):
                continue  # reported by the str check
            key = (op_name, schema)  # a captured workload repeats one schema over many configs
            if key not in self._aten_checked:
                self._aten_checked[key] = (self.check_aten_schema(op_name, schema)
                                           if self.check_aten_schema else None)
            message = self._aten_checked[key]
            if message:
                self.problem(path + ("build", index, "args", 0, "value"), message)

    def _check_ranks(self, ranks: Any, path, section: "_Section") -> None:
        world = (self._world or {}).get("world_size")
        for where, message, hint in rank_entry_problems(ranks, world if isinstance(
                world, int) else None):
            self.problem(path + where, message, hint)
        for rank, entry in (ranks.items() if isinstance(ranks, dict) else ()):
            if not isinstance(entry, dict):
                continue
            for index, spec in enumerate(entry["args"] if isinstance(entry.get("args"), list)
                                         else ()):
                self._check_data_spec(spec, path + (rank, "args", index), section,
                                      copy_allowed=False)
            for key, spec in (entry.get("kwargs") or {}).items() \
                    if isinstance(entry.get("kwargs"), dict) else ():
                self._check_data_spec(spec, path + (rank, "kwargs", key), section,
                                      copy_allowed=False)

    # -- arg level --------------------------------------------------------------------------
    def _check_arg_spec_list(self, asl: Dict[str, Any], path, section: _Section) -> None:
        known_problems = len(self.problems)
        args = asl.get("args") or []
        section.args = args
        for index, spec in enumerate(args):
            self._check_data_spec(spec, path + ("args", index), section, copy_allowed=True)
        for key, spec in (asl.get("kwargs") or {}).items():
            self._check_data_spec(spec, path + ("kwargs", key), section, copy_allowed=True)
        if "ranks" in asl:  # a job's per-rank counts and arguments (spec.job)
            self._check_ranks(asl["ranks"], path + ("ranks",), section)
        if section.expands_macros and len(self.problems) == known_problems:
            count = 1
            for where, length in variant_axes(asl, path):
                if length > MAX_VALUES_PER_AXIS:
                    self.problem(where, f"this range has {length} values, over the "
                                        f"{MAX_VALUES_PER_AXIS} limit", "use a larger step")
                count *= length
            if count == 0:
                self.problem(path, "this variant expands to no runs (an empty range or list)")
            elif count > MAX_RUNS_PER_VARIANT:
                self.problem(path, f"this variant expands to {count} runs, over the "
                                   f"{MAX_RUNS_PER_VARIANT} limit")
            else:
                literal = literal_count(asl)
                if literal is not None and count > MISREAD_FACTOR * literal:
                    self.warn(path, f"expands to {count} runs from {literal} values written: "
                                    "a shape dim or int value written [min, max(, step)] is an "
                                    "inclusive range, and ranges multiply (use __list__ for a "
                                    "list of whole alternatives; --explain shows the expansion)")


def _proved_entry(entry: Dict[str, Any], proved) -> bool:
    """Whether a config entry is only ``input`` (and ``build``) lists whose arg-spec-lists the
    fast path proved free of problems (``proved``: membership of their ids)."""
    inputs, builds = entry.get("input"), entry.get("build")
    if type(inputs) is not list or not inputs or len(entry) != 1 + (builds is not None):
        return False
    return all(map(proved, map(id, inputs))) and (
        builds is None or type(builds) is list and all(map(proved, map(id, builds))))


def _expand_some(build_iterator: type, input_iterator: type, entry: Dict[str, Any],
                 limit: int) -> None:
    """Count one config entry's runs and expand up to ``limit`` of them, as the run plan
    (``plan.runplan``) will: each build config, then the input configs under it."""
    builds = entry.get("build")
    if builds:
        if getattr(build_iterator, "count", None) is not None:
            build_iterator.count(entry, "build")
        build_configs = (config for _, config in build_iterator(entry, "build", "cpu"))
    else:
        build_configs = iter([builds])
    if getattr(input_iterator, "count", None) is not None:
        input_iterator.count(entry, "input")
    expanded = 0
    for build_config in build_configs:
        view = {"build": build_config, "input": entry["input"]}
        for _ in input_iterator(view, "input", "cpu"):
            expanded += 1
            if expanded >= limit:
                return


def _under(path: tuple, bad_paths) -> bool:
    """True if a schema error lies at or below ``path`` (its subtree is not checked further)."""
    if not bad_paths:
        return False
    n = len(path)
    return any(len(bad) >= n and tuple(bad[:n]) == path for bad in bad_paths)


def _undeclared_warning(accepted: Dict[Tuple[str, Tuple[str, ...]], List[tuple]]) -> str:
    """One warning for every unknown key accepted because a plugin that declares no keys reads
    there: each key with its readers, where it first occurs and how often."""
    parts = []
    for (key, readers), paths in accepted.items():
        more = f" (and {len(paths) - 1} more {key!r})" if len(paths) > 1 else ""
        parts.append(f"{format_json_path(paths[0])}{more}, read there by {', '.join(readers)}")
    return ("keys no plugin declares accepted, for plugins that declare none (spec_keys): "
            + "; ".join(parts))


def _dedupe(problems: List[Problem]) -> List[Problem]:
    seen, out = set(), []
    for p in problems:
        key = (p.path, p.message)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out
