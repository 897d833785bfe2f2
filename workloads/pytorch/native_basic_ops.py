"""PARAM's native PyTorch operator set, registered under PARAM's names.

The names are the ones existing PARAM spec files use (``torch.add``, ``torch.nn.Conv2d``...), so
those specs run unchanged. Each entry maps a name to an adapter factory: the registry calls the
factory for every build, so no operator state is shared between runs.
"""

import functools

import torch

from param_compute.plugins.registry import register_operator
from param_compute.operators.adapters import CallableOperator, InplaceMethodOperator, ModuleOperator

# Plain functions, called as ``function(*args, **kwargs)``.
CALLABLE_OPS = {
    "torch.add": torch.add,
    "torch.baddbmm": torch.baddbmm,
    "torch.bmm": torch.bmm,
    "torch.cat": torch.cat,
    "torch.matmul": torch.matmul,
    "torch.mean": torch.mean,
    "torch.mm": torch.mm,
    "torch.mul": torch.mul,
    "torch.nn.functional.relu": torch.nn.functional.relu,
    "torch.reshape": torch.reshape,
}

# PARAM spells in-place Tensor methods as ``torch.<method>``; the first argument is the tensor.
INPLACE_OPS = {
    "torch.add_": "add_",
    "torch.clamp_": "clamp_",
}

# nn.Module classes, constructed from the build args.
MODULE_OPS = {
    "torch.nn.AdaptiveAvgPool2d": torch.nn.AdaptiveAvgPool2d,
    "torch.nn.Conv2d": torch.nn.Conv2d,
    "torch.nn.Dropout": torch.nn.Dropout,
    "torch.nn.MaxPool2d": torch.nn.MaxPool2d,
    "torch.nn.ReLU": torch.nn.ReLU,
    "torch.nn.Linear": torch.nn.Linear,
}

for _name, _function in CALLABLE_OPS.items():
    register_operator(_name, functools.partial(CallableOperator, _function))
for _name, _method in INPLACE_OPS.items():
    register_operator(_name, functools.partial(InplaceMethodOperator, _method))
for _name, _module_class in MODULE_OPS.items():
    register_operator(_name, functools.partial(ModuleOperator, _module_class))
