"""The plugin interfaces: operators, config iterators and data generators.

The names and method signatures follow PARAM's so that existing workload modules port by changing
their imports. This module imports nothing heavy (no torch): the spec and plan stages use it.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple


class OperatorInterface:
    """One benchmarked operator. The engine creates a fresh object per build config.

    Life cycle, driven by the engine:
      1. the engine sets ``self.device`` (a string such as ``"cpu"`` or ``"cuda:0"``);
      2. ``build(*build_args, **build_kwargs)`` with the materialized build arguments (only when
         the config has a build entry);
      3. per input config: ``bind_forward(args, kwargs)`` returns the zero-argument callable that
         the timing loop calls; ``forward``/``create_grad``/``backward`` serve the backward pass;
      4. ``cleanup()`` when the build is done, so memory is released deterministically.

    ``forward`` must return the output: the engine never keeps forward outputs alive between
    forward-only iterations, and ``create_grad``/``backward`` work from the output of the last
    ``forward`` call, which this base class remembers.
    """

    device: str = "cpu"

    #: In-place operators mutate their first argument and have no backward pass.
    supports_backward: bool = True

    def build(self, *args: Any, **kwargs: Any) -> None:
        """Prepare state from the build arguments (module weights, tables...)."""

    def cleanup(self) -> None:
        """Drop everything the build and the last runs allocated."""
        self.drop_outputs()

    def drop_outputs(self) -> None:
        """Forget the output and gradient kept for the backward pass."""
        self.__dict__.pop("_last_output", None)
        self.__dict__.pop("_grad", None)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.forward is not implemented")

    def bind_forward(self, args: List[Any], kwargs: Dict[str, Any]) -> Callable[[], Any]:
        """Return a zero-argument callable running one forward call.

        Binding happens once per input config, outside the timed region, so the timed call costs
        no argument unpacking. Subclasses wrapping a plain function return a ``functools.partial``
        of that function directly, which keeps per-call overhead at the function call itself.
        """
        return functools.partial(self.forward, *args, **kwargs)

    def remember_output(self, output: Any) -> None:
        """Keep a forward output (untimed) for ``create_grad``/``backward``."""
        self._last_output = output

    def create_grad(self) -> None:
        """Create the output gradient for ``backward`` (untimed)."""
        import torch

        tensor = _first_differentiable_tensor(getattr(self, "_last_output", None))
        if tensor is None:
            raise RuntimeError("the forward output has no tensor that requires grad; is any input "
                               "a floating tensor with requires_grad?")
        self._grad = torch.ones_like(tensor)

    def backward(self) -> None:
        """One backward pass from the last forward output.

        ``retain_graph=True`` lets the engine time several backward passes over one forward graph
        (continuous mode); in discrete mode a fresh forward precedes every backward anyway.
        """
        tensor = _first_differentiable_tensor(getattr(self, "_last_output", None))
        if tensor is None:
            raise RuntimeError("backward called before a forward producing a differentiable output")
        tensor.backward(self._grad, retain_graph=True)


def _first_differentiable_tensor(value: Any) -> Optional[Any]:
    """The first tensor requiring grad in an output (a tensor, or nested tuples/lists/dicts)."""
    if hasattr(value, "requires_grad") and hasattr(value, "grad_fn"):
        return value if value.requires_grad else None
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            found = _first_differentiable_tensor(item)
            if found is not None:
                return found
    return None


class ConfigIterator:
    """Expands one list of arg-spec-lists (``configs[key]``) into ``(id, config)`` pairs.

    PARAM's constructor signature: ``configs`` is the config entry (``{"build": ..., "input":
    [...]}``), ``key`` is ``"build"`` or ``"input"``. For input iteration the engine passes the
    already expanded build config under ``"build"``, as PARAM does. Iterators must be pure Python
    (no tensors): the dry run uses them without touching torch.
    """

    def __init__(self, configs: Dict[str, Any], key: str, device: str):
        self.configs = configs
        self.key = key
        self.device = device

    def __iter__(self) -> Iterator[Tuple[Any, Dict[str, Any]]]:
        return self

    def __next__(self) -> Tuple[Any, Dict[str, Any]]:
        raise NotImplementedError

    @classmethod
    def count(cls, configs: Dict[str, Any], key: str) -> Optional[int]:
        """Number of pairs this iterator will produce, when known without iterating."""
        return None


class DataGenerator:
    """Turns one expanded arg-spec-list into ``(args, kwargs)`` of real values on ``device``.

    The engine seeds torch's and Python's random generators before each call, so a generator
    that draws from them produces the same data on every run with the same ``--seed``.
    """

    def get_data(self, config: Dict[str, Any], device: str) -> Tuple[List[Any], Dict[str, Any]]:
        raise NotImplementedError
