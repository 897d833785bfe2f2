"""The host memory allocator a process runs with, as its environment sets it.

Which memory the allocator recycles decides how many fresh pages a step touches first, and
that can be most of a step: a DLRM-like training step (eight 25.6 MB embedding gradients a
step) took 98-130 ms under glibc's defaults, which give the heap back to the kernel whenever
its top is free, and 46 ms with ``GLIBC_TUNABLES=glibc.malloc.trim_threshold=...:
glibc.malloc.mmap_threshold=33554432``, which keeps it (as jemalloc or tcmalloc would). A
replay that runs under other settings than the captured step does not measure the same thing,
and the settings can only be given when a process starts. So a live capture records them
(``__capture__.allocator``), a run records its own (``sys_info.allocator``), and a replay
warns when they differ.

The settings are the environment variables glibc's malloc and the common replacement
allocators read (``ALLOCATOR_VARIABLES``), and the allocator libraries ``LD_PRELOAD`` names;
an empty mapping means glibc's defaults. Torch-free.
"""

from __future__ import annotations

import os
import shlex
from typing import Dict, Mapping, Optional

from param_compute.formatting import printable

#: Variables that change how the host allocator behaves (glibc's malloc, jemalloc, tcmalloc,
#: mimalloc). ``LD_PRELOAD`` is kept only for the allocator libraries it names.
ALLOCATOR_VARIABLES = ("GLIBC_TUNABLES", "MALLOC_ARENA_MAX", "MALLOC_ARENA_TEST",
                       "MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_",
                       "MALLOC_TRIM_THRESHOLD_", "MALLOC_CONF", "JE_MALLOC_CONF",
                       "TCMALLOC_RELEASE_RATE", "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD",
                       "MIMALLOC_OPTIONS", "LD_PRELOAD")
#: Library names in ``LD_PRELOAD`` that replace the allocator.
ALLOCATOR_LIBRARIES = ("jemalloc", "tcmalloc", "mimalloc", "hoard", "snmalloc")
#: The longest value kept (an environment is the user's, not a place for a novel).
MAX_VALUE_CHARS = 1000


def _preloaded(value: str) -> str:
    """The allocator libraries among ``LD_PRELOAD``'s entries (by file name), in order."""
    kept = [item for item in value.replace(":", " ").split()
            if any(name in os.path.basename(item) for name in ALLOCATOR_LIBRARIES)]
    return " ".join(os.path.basename(item) for item in kept)


def allocator_settings(environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The allocator's settings in ``environ`` (the process's environment by default): each
    variable of ``ALLOCATOR_VARIABLES`` that is set, by name (``{}``: glibc's defaults)."""
    environ = os.environ if environ is None else environ
    out: Dict[str, str] = {}
    for name in ALLOCATOR_VARIABLES:
        value = environ.get(name)
        if value is None:
            continue
        if name == "LD_PRELOAD":
            value = _preloaded(value)
        elif name == "GLIBC_TUNABLES":  # only the allocator's tunables, in one order
            value = ":".join(sorted(part for part in value.split(":")
                                    if part.startswith("glibc.malloc.")))
        if value:  # control characters as escapes: a spec holds printable settings only
            out[name] = printable(value)[:MAX_VALUE_CHARS]
    return out


def _shown(value: str) -> str:
    """A value as a shell takes it back (quoted where it must be: the warning's advice is
    pasted into one), control characters as the escapes that name them (a terminal would act
    on them, a newline would forge a log line)."""
    return printable(shlex.quote(str(value)))


def describe(settings: Mapping[str, str]) -> str:
    """``NAME=value ...`` for the environment, or ``glibc's defaults``."""
    if not settings:
        return "glibc's defaults"
    return " ".join(f"{name}={_shown(value)}" for name, value in sorted(settings.items()))
