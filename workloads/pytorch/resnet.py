"""``pytorch.model.resnet``: a whole ResNet as one benchmarked operator.

PARAM's workload constructs its ResNet with default arguments, which is ResNet-50 (bottleneck
blocks, 3-4-6-3) in torchvision's "v1.5" form: the stride of a downsampling bottleneck sits on its
3x3 convolution, not on the first 1x1. That is the model built here by default (25,557,032
parameters with 1000 classes), written out so that torchvision is not a dependency. A build entry
may pick another standard depth (``[{"type": "int", "value": 101}]``); the spec's input is one
float tensor ``[N, 3, H, W]``, 224x224 in PARAM's configs.
"""

import functools
from typing import Optional

import torch
from torch import nn

from param_compute.plugins.registry import register_operator
from param_compute.operators.adapters import ModuleOperator


def _conv_bn(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1) -> nn.Sequential:
    """A bias-free convolution and its batch norm (the norm makes a conv bias redundant)."""
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                  padding=kernel_size // 2, bias=False),
        nn.BatchNorm2d(out_channels),
    )


class BasicBlock(nn.Module):
    """Two 3x3 convolutions (ResNet-18/34)."""

    expansion = 1

    def __init__(self, in_channels: int, channels: int, stride: int, shortcut: Optional[nn.Module]):
        super().__init__()
        self.branch = nn.Sequential(
            _conv_bn(in_channels, channels, 3, stride), nn.ReLU(inplace=True),
            _conv_bn(channels, channels, 3),
        )
        self.shortcut = shortcut
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.shortcut is None else self.shortcut(x)
        return self.relu(self.branch(x) + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carrying the stride: v1.5), 1x1 expand by 4 (ResNet-50/101/152)."""

    expansion = 4

    def __init__(self, in_channels: int, channels: int, stride: int, shortcut: Optional[nn.Module]):
        super().__init__()
        self.branch = nn.Sequential(
            _conv_bn(in_channels, channels, 1), nn.ReLU(inplace=True),
            _conv_bn(channels, channels, 3, stride), nn.ReLU(inplace=True),
            _conv_bn(channels, channels * self.expansion, 1),
        )
        self.shortcut = shortcut
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.shortcut is None else self.shortcut(x)
        return self.relu(self.branch(x) + identity)


# depth -> (block type, number of blocks in each of the four stages), as in He et al. 2015.
RESNET_LAYOUTS = {
    18: (BasicBlock, (2, 2, 2, 2)),
    34: (BasicBlock, (3, 4, 6, 3)),
    50: (Bottleneck, (3, 4, 6, 3)),
    101: (Bottleneck, (3, 4, 23, 3)),
    152: (Bottleneck, (3, 8, 36, 3)),
}


class ResNet(nn.Module):
    def __init__(self, depth: int = 50, num_classes: int = 1000) -> None:
        super().__init__()
        if depth not in RESNET_LAYOUTS:
            raise ValueError(f"unsupported ResNet depth {depth}; choose one of {sorted(RESNET_LAYOUTS)}")
        block, stage_sizes = RESNET_LAYOUTS[depth]
        self.stem = nn.Sequential(
            _conv_bn(3, 64, 7, stride=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
        )
        stages = []
        in_channels = 64
        for index, num_blocks in enumerate(stage_sizes):
            channels = 64 * 2 ** index
            stride = 1 if index == 0 else 2
            for block_index in range(num_blocks):
                out_channels = channels * block.expansion
                shortcut = None
                if block_index == 0 and (stride != 1 or in_channels != out_channels):
                    shortcut = _conv_bn(in_channels, out_channels, 1, stride)
                stages.append(block(in_channels, channels, stride if block_index == 0 else 1, shortcut))
                in_channels = out_channels
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(in_channels, num_classes)
        # He initialization keeps activations in range through the deep stack from the first
        # iteration, so a benchmark does not time denormal or overflowing arithmetic.
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.stages(self.stem(x)))
        return self.fc(torch.flatten(x, 1))


# ModuleOperator builds the model on the run device; an empty build entry means ResNet-50.
register_operator("pytorch.model.resnet", functools.partial(ModuleOperator, ResNet))
