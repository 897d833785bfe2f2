"""PARAM's library API (``param_bench.train.compute.python.lib``) at PARAM's module paths.

Scripts and plugins written for PARAM run here with their imports pointed at
``param_compute.lib``. Every module is a thin door onto param_compute's own engine: the
registries, operator resolution, data generation and timing loop are the ones
``run_benchmark`` uses (one implementation, two doors). See the README, "Coming from PARAM".
"""

from __future__ import annotations


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("param_compute")
    except Exception:  # a source checkout that was never installed
        return "unknown"


#: PARAM's ``lib.__version__`` (it writes it as ``sys_info.param_train_compute_version``).
__version__ = _version()


def _expose_builtin_workloads() -> None:
    """PARAM's scripts import ``...workloads.pytorch``: make ``param_compute.workloads``
    importable from a source checkout too (an installed package has it already)."""
    import importlib.util

    if importlib.util.find_spec("param_compute.workloads") is None:
        from param_compute.plugins.loading import _builtin_workloads_package

        _builtin_workloads_package()


_expose_builtin_workloads()
