"""PARAM's ``lib.data``: the data-generator interface and its registration call."""

from __future__ import annotations

from param_compute.lib._engine import RegistryView
from param_compute.plugins.interfaces import DataGenerator
from param_compute.plugins.registry import register_data_generator

#: Registered data generators by name (a live, read-only view).
data_generator_map = RegistryView("data_generators")

__all__ = ["DataGenerator", "data_generator_map", "register_data_generator"]
