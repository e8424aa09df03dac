"""MobileNet v1 (Howard et al. 2017), width multiplier 1.0, as used in the paper's §6."""

from __future__ import annotations

import torch
from torch import nn

# (output channels, stride) of the 13 depthwise-separable blocks of MobileNet v1.
_BLOCKS = (
    (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
    (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1),
)  # fmt: skip


def _conv_bn(cin: int, cout: int, kernel: int, stride: int, groups: int = 1) -> list[nn.Module]:
    return [
        nn.Conv2d(cin, cout, kernel, stride, padding=kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU6(),
    ]


class MobileNetV1(nn.Module):
    """A 3x3 stride-2 stem, 13 depthwise-separable blocks (ReLU6, as in the Keras model the paper
    used), global average pooling and a linear classifier."""

    def __init__(self, num_classes: int = 1000, width: float = 1.0) -> None:
        super().__init__()
        c = int(32 * width)
        layers = _conv_bn(3, c, 3, 2)
        for out, stride in _BLOCKS:
            out = int(out * width)
            layers += _conv_bn(c, c, 3, stride, groups=c)  # depthwise
            layers += _conv_bn(c, out, 1, 1)  # pointwise
            c = out
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.classifier = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.flatten(self.pool(self.features(x))))
