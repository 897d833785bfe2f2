"""PARAM's ``lib.config``: one operator's resolved configuration and a loaded benchmark config."""

from __future__ import annotations

import copy
import json
from typing import Any, Dict, List, Optional

from param_compute.files import read_bounded
from param_compute.lib._engine import resolve_operator, toolchain
from param_compute.lib.init_helper import get_logger
from param_compute.plan.iterators import DefaultConfigIterator
from param_compute.spec.loader import MAX_SPEC_BYTES


class OperatorConfig:
    """An operator's name, its spec entry (``info``), its operator object, and the iterator and
    data-generator classes (factories) its entry names."""

    def __init__(self, name: str, info: Dict[str, Any], op: Any = None):
        self.name = name
        self.info = info
        self.op = op
        self.build_iterator = DefaultConfigIterator
        self.input_iterator = DefaultConfigIterator
        self.build_data_generator: Any = None
        self.input_data_generator: Any = None


def _named(info: Dict[str, Any], key: str, table: Dict[str, Any], default: Any) -> Any:
    """The entry ``info[key]`` names in ``table``; ``default`` when absent, null or unknown."""
    name = info.get(key)
    return table[name] if name and name in table else default


def make_op_config(op_name: str, op_info: Dict[str, Any], device: str) -> Optional[OperatorConfig]:
    """Resolve an operator's spec entry: its operator object on ``device`` (None where the name
    does not resolve) and its iterators and generators. None (with a warning) when the entry
    names no usable ``input_data_generator``, as PARAM."""
    registries = toolchain().registries
    config = OperatorConfig(op_name, op_info, resolve_operator(op_name, device))
    iterators, generators = registries.config_iterators, registries.data_generators
    config.build_iterator = _named(op_info, "build_iterator", iterators, DefaultConfigIterator)
    config.input_iterator = _named(op_info, "input_iterator", iterators, DefaultConfigIterator)
    config.build_data_generator = _named(op_info, "build_data_generator", generators, None)
    config.input_data_generator = _named(op_info, "input_data_generator", generators, None)
    if config.input_data_generator is None:
        get_logger().warning("%s has invalid input_data_generator: %r", op_name,
                             op_info.get("input_data_generator"))
        return None
    return config


class BenchmarkConfig:
    """A benchmark config (``{op_name: op_info}``) loaded with its run options."""

    def __init__(self, run_options: Dict[str, Any]):
        self.run_options = run_options
        self.bench_config: Optional[Dict[str, Any]] = None
        self._op_configs: List[OperatorConfig] = []

    def _process(self) -> None:
        for op_name, op_info in self.bench_config.items():
            config = make_op_config(op_name, op_info, self.run_options["device"])
            if config is not None:
                self._op_configs.append(config)

    def load_json_file(self, config_file_name: str) -> None:
        # bounded as a spec is (an OSError, as open() raised, when it cannot be read)
        self.bench_config = json.loads(read_bounded(config_file_name, MAX_SPEC_BYTES,
                                                    regular_only=False))
        self._process()

    def load_json(self, config_json: str) -> None:
        self.bench_config = json.loads(config_json)
        self._process()

    def load(self, config: Dict[str, Any]) -> None:
        self.bench_config = copy.deepcopy(config)
        self._process()

    @property
    def op_configs(self) -> List[OperatorConfig]:
        return self._op_configs

    def has_op(self, op: str) -> bool:
        return any(config.name == op and config.op is not None for config in self._op_configs)
