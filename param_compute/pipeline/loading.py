"""A run's spec: read once, hashed, validated by the toolchain it needs.

A dry run validates without torch where the operator-name index knows the spec's names
(``operators.name_index``: the first dry run writes it); a spec naming a built-in workload's
iterator or data generator, and a measured run, start the full toolchain. An invalid spec is
validated again by the full toolchain, so its messages are the same either way. Operators
without a kernel on the device are reported here, before anything runs.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar, Union

from param_compute.errors import SpecError
from param_compute.runtime.options import RunOptions

log = logging.getLogger("param_compute")

SpecInput = Union[str, os.PathLike, dict]
T = TypeVar("T")


def _start_up(make: Callable[[], T], freeze: bool) -> T:
    """Start-up (torch, plugins, a big spec) creates ~170k long-lived objects without reference
    cycles: collecting them is wasted work, and unless frozen every later collection walks them
    again. Only a process the session owns is changed this way."""
    if not freeze:
        return make()
    gc.disable()
    try:
        return make()
    finally:
        gc.freeze()
        gc.enable()


@dataclass
class LoadedSpec:
    toolchain: Any
    spec: Any  # the validated ``BenchmarkSpec``
    path: Optional[Path]  # the spec file, when read from one
    digest: str  # sha256 of the file's bytes, or of a dict's canonical JSON
    raw: Any = None  # the parsed JSON (``--explain`` reads its macros)


def load_spec(spec: SpecInput, options: RunOptions, toolchain: Any = None,
              owns_process: bool = False) -> LoadedSpec:
    """Read ``spec`` (a path or parsed JSON) and validate it with ``toolchain`` (by default
    the one ``options`` need: see the module's doc). Raises ``SpecError``."""
    from param_compute.spec.limits import nesting_depth_problem
    from param_compute.spec.loader import read_spec_bytes, spec_from_bytes

    path = None
    if isinstance(spec, (str, os.PathLike)):
        path, source = Path(spec), str(spec)
        # Read once: a FIFO or <(cat spec) yields its bytes only once; hashed as read.
        data = read_spec_bytes(path)
        digest = hashlib.sha256(data).hexdigest()
        raw = _start_up(lambda: spec_from_bytes(data, source), owns_process)
    else:
        source = f"<{type(spec).__name__}>"
        problem = nesting_depth_problem(spec)
        if problem:
            raise SpecError(source, [problem])
        # A snapshot: the caller's dict may change while the run goes on; what runs (and
        # what resume and the header's hash know) is the spec as it was given.
        raw = json.loads(json.dumps(spec, default=str))
        digest = hashlib.sha256(json.dumps(raw, sort_keys=True).encode("utf-8")).hexdigest()
    index = _name_index(raw, options) if toolchain is None else None
    if toolchain is None:
        toolchain = _start(options, index, owns_process)
    try:
        validated = _start_up(lambda: toolchain.validate(raw, source), owns_process)
    except SpecError:
        if index is None:
            raise
        toolchain = _start(options, None, owns_process)  # the full toolchain's words for it
        validated = toolchain.validate(raw, source)
        index = None
    _warn_missing_kernels(validated, options.device, index)
    return LoadedSpec(toolchain, validated, path, digest, raw)


def _start(options: RunOptions, index: Any, owns_process: bool):
    from param_compute.runtime.toolchain import Toolchain

    return _start_up(lambda: Toolchain.for_options(options, index), owns_process)


def _name_index(raw: Any, options: RunOptions):
    """The operator-name index a dry run validates with, or None (a measured run; a spec
    naming a built-in workload's iterator or generator; the first dry run, which writes it)."""
    if not options.dry_run:
        return None
    from param_compute.operators import name_index

    index = name_index.load_index()
    if index is None and name_index.torch_version() is not None:  # first use: written
        from param_compute.runtime.toolchain import Toolchain

        name_index.write_index(name_index.build_index(Toolchain.start(),
                                                      Toolchain.bare_registries()))
        return None
    if index is not None and index.names_builtin_workloads(raw):
        return None
    return index


def _warn_missing_kernels(spec: Any, device: str, index: Any) -> None:
    """Operators without a kernel on the device (captured backend ops), said before any run;
    from the index while torch has not been needed."""
    from param_compute.operators.kernels import describe_missing, missing_kernels

    kernel_of = None
    if index is not None and "torch" not in sys.modules:
        kernel_of = index.kernel_of(device)
    missing = missing_kernels({op.name: {"config": list(op.configs)} for op in spec.operators},
                              device, kernel_of)
    for line in describe_missing(missing, device):
        log.warning("%s: these runs will fail", line)
