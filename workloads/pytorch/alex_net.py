"""``pytorch.model.alex_net``: the whole AlexNet as one benchmarked operator.

The network is the torchvision ``alexnet`` layout (the single-GPU variant of Krizhevsky et al.,
61,100,840 parameters with 1000 classes), written here so that torchvision is not a dependency.
The spec's input is one float tensor ``[N, 3, 224, 224]``; the model is in training mode (dropout
active), which is what a forward + backward benchmark measures.
"""

import functools

import torch
from torch import nn

from param_compute.plugins.registry import register_operator
from param_compute.operators.adapters import ModuleOperator


def _conv_relu(in_channels: int, out_channels: int, kernel_size: int, **conv_kwargs) -> list:
    return [nn.Conv2d(in_channels, out_channels, kernel_size, **conv_kwargs), nn.ReLU(inplace=True)]


class AlexNet(nn.Module):
    def __init__(self, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            *_conv_relu(3, 64, 11, stride=4, padding=2),
            nn.MaxPool2d(kernel_size=3, stride=2),
            *_conv_relu(64, 192, 5, padding=2),
            nn.MaxPool2d(kernel_size=3, stride=2),
            *_conv_relu(192, 384, 3, padding=1),
            *_conv_relu(384, 256, 3, padding=1),
            *_conv_relu(256, 256, 3, padding=1),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        # Pooling to a fixed 6x6 grid lets the classifier accept inputs other than 224x224.
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout),
            nn.Linear(256 * 6 * 6, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# ModuleOperator builds the model on the run device; an empty build entry means AlexNet().
register_operator("pytorch.model.alex_net", functools.partial(ModuleOperator, AlexNet))
