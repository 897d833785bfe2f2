"""PARAM's ``lib.operator``: the operator interface and its registration calls."""

from __future__ import annotations

from param_compute.lib._engine import RegistryView
from param_compute.plugins.interfaces import OperatorInterface
from param_compute.plugins.registry import register_operator, register_operators

#: Registered operators by name (a live, read-only view; each lookup builds a fresh object).
op_map = RegistryView("operators", lambda factory: factory())

__all__ = ["OperatorInterface", "op_map", "register_operator", "register_operators"]
