"""The paper's segmentation networks (§6.4): U-Net with a VGG16 encoder, FCN8 with a VGG16 backbone, SegNet.

They follow the Keras ``keras_segmentation`` models the paper's graphs were
extracted from (``vgg_unet``, ``fcn_8_vgg``, ``segnet``): 19 classes, inputs whose
sides are multiples of 32 (416x608 in the paper). Keras' ``ZeroPadding2D`` +
``valid`` convolution pairs are written as ``padding=1`` convolutions (same
output). U-Net and SegNet predict at half the input resolution, as the Keras
models do; FCN8 predicts at full resolution. Outputs are logits (the softmax is
part of the cross-entropy loss).
"""

from __future__ import annotations

import torch
from torch import nn

VGG16_BLOCKS = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))


def _vgg_block(cin: int, widths: tuple[int, ...]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for w in widths:
        layers += [nn.Conv2d(cin, w, 3, padding=1), nn.ReLU()]
        cin = w
    layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers)


def _conv_bn(cin: int, cout: int, relu: bool) -> list[nn.Module]:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, 3, padding=1)]
    if relu:
        layers.append(nn.ReLU())
    layers.append(nn.BatchNorm2d(cout))
    return layers


class VGGUNet(nn.Module):
    """U-Net with the first four VGG16 blocks as encoder and a conv-ReLU-BN decoder with skip concatenations."""

    def __init__(self, num_classes: int = 19) -> None:
        super().__init__()
        cin = 3
        blocks = []
        for widths in VGG16_BLOCKS[:4]:
            blocks.append(_vgg_block(cin, widths))
            cin = widths[-1]
        self.block1, self.block2, self.block3, self.block4 = blocks
        self.center = nn.Sequential(*_conv_bn(512, 512, relu=True))
        self.up3, self.up2, self.up1 = (nn.Upsample(scale_factor=2) for _ in range(3))
        self.dec3 = nn.Sequential(*_conv_bn(512 + 256, 256, relu=True))
        self.dec2 = nn.Sequential(*_conv_bn(256 + 128, 128, relu=True))
        self.dec1 = nn.Sequential(*_conv_bn(128 + 64, 64, relu=True))
        self.classifier = nn.Conv2d(64, num_classes, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f1 = self.block1(x)
        f2 = self.block2(f1)
        f3 = self.block3(f2)
        f4 = self.block4(f3)
        o = self.dec3(torch.cat([self.up3(self.center(f4)), f3], 1))
        o = self.dec2(torch.cat([self.up2(o), f2], 1))
        o = self.dec1(torch.cat([self.up1(o), f1], 1))
        return self.classifier(o)


class FCN8(nn.Module):
    """FCN-8s (Long et al. 2015) on VGG16: fc6/fc7 as convolutions, score fusion at 1/16 and 1/8."""

    def __init__(self, num_classes: int = 19) -> None:
        super().__init__()
        cin = 3
        blocks = []
        for widths in VGG16_BLOCKS:
            blocks.append(_vgg_block(cin, widths))
            cin = widths[-1]
        self.block1, self.block2, self.block3, self.block4, self.block5 = blocks
        self.head = nn.Sequential(
            nn.Conv2d(512, 4096, 7, padding=3), nn.ReLU(), nn.Dropout(0.5),
            nn.Conv2d(4096, 4096, 1), nn.ReLU(), nn.Dropout(0.5),
            nn.Conv2d(4096, num_classes, 1),
        )  # fmt: skip
        self.up32 = nn.ConvTranspose2d(num_classes, num_classes, 4, stride=2, padding=1, bias=False)
        self.score4 = nn.Conv2d(512, num_classes, 1)
        self.up16 = nn.ConvTranspose2d(num_classes, num_classes, 4, stride=2, padding=1, bias=False)
        self.score3 = nn.Conv2d(256, num_classes, 1)
        self.up8 = nn.ConvTranspose2d(num_classes, num_classes, 16, stride=8, padding=4, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f3 = self.block3(self.block2(self.block1(x)))
        f4 = self.block4(f3)
        o = self.up32(self.head(self.block5(f4))) + self.score4(f4)
        o = self.up16(o) + self.score3(f3)
        return self.up8(o)


class SegNet(nn.Module):
    """keras_segmentation's SegNet: a 4-block conv-BN-ReLU-pool encoder and a conv-BN-upsampling decoder."""

    def __init__(self, num_classes: int = 19) -> None:
        super().__init__()
        enc: list[nn.Module] = []
        cin = 3
        for w in (64, 128, 256, 256):
            enc += [nn.Conv2d(cin, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(2)]
            cin = w
        self.encoder = nn.Sequential(*enc)
        dec: list[nn.Module] = []
        for i, w in enumerate((512, 256, 128, 64)):
            dec += _conv_bn(cin, w, relu=False)
            if i < 3:
                dec.append(nn.Upsample(scale_factor=2))
            cin = w
        self.decoder = nn.Sequential(*dec)
        self.classifier = nn.Conv2d(64, num_classes, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.decoder(self.encoder(x)))
