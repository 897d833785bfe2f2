"""PARAM's ``lib.pytorch.data_impl``: the PyTorch data generator (registered by the engine)."""

from __future__ import annotations

from typing import Any, Dict

from param_compute.data.generator import DefaultDataGenerator, materialize


def materialize_arg(arg: Dict[str, Any], device: str) -> Any:
    """One data spec (``{"type": "tensor", ...}``) -> its value on ``device``."""
    return materialize(arg, device)


__all__ = ["DefaultDataGenerator", "materialize_arg"]
