"""Library use leaves the caller's process as it found it: threads, RNG states, CUDA device.

A run sets torch's thread count (``--num-threads``) and seeds Python's, torch's (and on CUDA the
device's) generators before every run. ``preserved`` saves what the caller had and puts it back
afterwards, as ``torch.utils.benchmark`` restores the thread count it changed: torch's intra-op
(and inter-op, where changed) threads, Python's ``random`` state, torch's CPU generator, the CUDA
generators and current device when CUDA is initialized, and numpy's global generator when numpy
is imported. Torch is only touched when it is imported (``import_torch`` imports it first).
"""

from __future__ import annotations

import contextlib
import logging
import random
import sys
from typing import Any, Callable, Iterator, List

log = logging.getLogger("param_compute")


def _torch_restorers(torch) -> List[Callable[[], None]]:
    restorers: List[Callable[[], None]] = []
    threads, interop = torch.get_num_threads(), torch.get_num_interop_threads()
    cpu_state = torch.default_generator.get_state()

    def restore_threads() -> None:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        if torch.get_num_interop_threads() != interop:  # settable only before parallel work
            try:
                torch.set_num_interop_threads(interop)
            except RuntimeError:
                log.debug("could not restore %d inter-op threads", interop, exc_info=True)

    restorers += [restore_threads, lambda: torch.default_generator.set_state(cpu_state)]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        device = torch.cuda.current_device()
        cuda_states = torch.cuda.get_rng_state_all()
        restorers += [lambda: torch.cuda.set_rng_state_all(cuda_states),
                      lambda: torch.cuda.set_device(device)]
    return restorers


@contextlib.contextmanager
def preserved(import_torch: bool = False) -> Iterator[None]:
    """Run the block, then restore the process state it may change (see the module's doc)."""
    restorers: List[Callable[[], Any]] = []
    python_state = random.getstate()
    restorers.append(lambda: random.setstate(python_state))
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy_state = numpy.random.get_state()
        restorers.append(lambda: numpy.random.set_state(numpy_state))
    if import_torch:
        import torch  # noqa: F401  (the run imports it anyway; importing first saves its state)
    torch = sys.modules.get("torch")
    if torch is not None:
        restorers += _torch_restorers(torch)
    try:
        yield
    finally:
        for restore in reversed(restorers):
            restore()
