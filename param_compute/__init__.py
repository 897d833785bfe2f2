"""param_compute: a PyTorch operator benchmark engine that replays JSON operator specs.

Flow: spec file -> validated spec -> expanded run plan -> materialized arguments -> operator and
timing -> result records -> writers. Plugin names follow PARAM's.
"""

from param_compute.errors import SpecError
from param_compute.plugins.interfaces import ConfigIterator, DataGenerator, OperatorInterface
from param_compute.runtime.options import RunOptions
from param_compute.plugins.registry import (register_config_iterator, register_data_generator,
                                            register_operator, register_operators,
                                            register_unavailable_operators)
from param_compute.measure.timing import ExecMode


def run(spec, options=None, workloads_dirs=(), sinks=(), **keywords):
    """Validate and run a spec (dict or path) in-process, as the command line does (output
    file, resume, exports with the same keywords); see ``pipeline.session.run``."""
    from param_compute.pipeline.session import run as _run

    return _run(spec, options, workloads_dirs, sinks, **keywords)


__all__ = [
    "ConfigIterator", "DataGenerator", "ExecMode", "OperatorInterface", "RunOptions", "SpecError",
    "register_config_iterator", "register_data_generator", "register_operator",
    "register_operators", "register_unavailable_operators", "run",
]
