"""PARAM's ``lib.iterator``: the config-iterator interface, the built-in iterators, registration."""

from __future__ import annotations

from param_compute.lib._engine import RegistryView
from param_compute.plan.iterators import (DefaultConfigIterator, DummyConfigIterator,
                                          RangeConfigIterator)
from param_compute.plugins.interfaces import ConfigIterator
from param_compute.plugins.registry import register_config_iterator

#: Registered config iterators by name (a live, read-only view).
config_iterator_map = RegistryView("config_iterators")

__all__ = ["ConfigIterator", "DefaultConfigIterator", "DummyConfigIterator",
           "RangeConfigIterator", "config_iterator_map", "register_config_iterator"]
