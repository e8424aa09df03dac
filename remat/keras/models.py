"""Keras definitions of the paper's models, laid out and named as in the Checkmate reference graphs.

* ``vgg16``, ``vgg19``, ``resnet50``: ``keras.applications`` with ``weights=None``.
  Keras 3 matches the reference layer for layer; ResNet50's classifier is named
  ``predictions`` where the reference (Keras 2) says ``probs`` (see
  :data:`REFERENCE_RENAMES`).
* ``mobilenet``: :func:`mobilenet_v1`, MobileNet v1 in the Keras 2 layout the
  reference was extracted from. Keras 3's ``keras.applications.MobileNet``
  differs in structure, not maths: its ``conv1`` pads ``"same"`` where Keras 2
  had a ``ZeroPadding2D`` ``conv1_pad`` ((0, 1), (0, 1)) and a ``"valid"``
  convolution (identical for even sizes), its global pooling keeps dims where
  Keras 2 pooled and then reshaped (``reshape_1``), and its softmax is named
  ``predictions`` instead of ``act_softmax``. So ``keras.applications.MobileNet``
  extracts to the reference minus ``conv1_pad`` and ``reshape_1`` (and their
  gradients); see :data:`KERAS_APPLICATIONS_MISSING`.
* ``unet``, ``fcn8``, ``segnet``: the segmentation models of the reference graphs
  (U-Net with a VGG encoder, FCN-8s on VGG16, SegNet on a plain 4-level
  encoder), 19 classes at 416x608, each ending in a per-pixel reshape and
  softmax. Layers carry the reference graphs' (Keras auto-generated) names so
  that graphs compare node for node.
"""

from __future__ import annotations

import re
from typing import Any

from remat.keras.env import keras

L = keras.layers

CLASSIFIERS = ("vgg16", "vgg19", "mobilenet", "resnet50")
SEGMENTATION = ("unet", "fcn8", "segnet")
ZOO = CLASSIFIERS + SEGMENTATION
# Our zoo names -> the reference graphs' short names (remat.graph.reference).
REFERENCE_NAMES = {
    "vgg16": "vgg16",
    "vgg19": "vgg19",
    "mobilenet": "mobilenet",
    "resnet50": "resnet50",
    "unet": "vgg_unet",
    "fcn8": "fcn8_vgg",
    "segnet": "segnet",
}
# Keras layer name -> reference node name, per zoo model.
REFERENCE_RENAMES: dict[str, dict[str, str]] = {"resnet50": {"predictions": "probs"}}
# For the keras.applications models themselves (keyed by zoo name): renames, and reference nodes that have no
# Keras 3 layer.
KERAS_APPLICATIONS_RENAMES = {"mobilenet": {"predictions": "act_softmax"}, "resnet50": {"predictions": "probs"}}
KERAS_APPLICATIONS_MISSING = {"mobilenet": ("conv1_pad", "reshape_1")}


def keras_applications_renames(zoo_name: str, model: Any) -> dict[str, str]:
    """Keras layer name -> reference node name for a ``keras.applications`` model of our zoo.

    Besides :data:`KERAS_APPLICATIONS_RENAMES`, Keras 3 MobileNet's pooling layer is auto-named, so a second
    model built in one process calls it ``global_average_pooling2d_1``; it maps back to the reference name.
    """
    renames = dict(KERAS_APPLICATIONS_RENAMES.get(zoo_name, {}))
    for layer in model.layers:
        if isinstance(layer, L.GlobalAveragePooling2D) and re.fullmatch(r"global_average_pooling2d_\d+", layer.name):
            renames[layer.name] = "global_average_pooling2d"
    return renames


def build_zoo_model(name: str, input_shape: tuple[int, int, int] | None = None, classes: int | None = None) -> Any:
    """A zoo model by name at ``input_shape`` (height, width, channels); paper resolution by default."""
    apps = {
        "vgg16": keras.applications.VGG16,
        "vgg19": keras.applications.VGG19,
        "resnet50": keras.applications.ResNet50,
    }
    if name in apps:
        return apps[name](weights=None, input_shape=input_shape or (224, 224, 3), classes=classes or 1000)
    if name == "mobilenet":
        return mobilenet_v1(input_shape or (224, 224, 3), classes=classes or 1000)
    builders = {"unet": vgg_unet, "fcn8": fcn8_vgg, "segnet": segnet}
    if name in builders:
        return builders[name](input_shape or (416, 608, 3), n_classes=classes or 19)
    raise ValueError(f"unknown Keras zoo model {name!r}; known: {', '.join(ZOO)}")


def mobilenet_v1(input_shape: tuple[int, int, int] = (224, 224, 3), classes: int = 1000, dropout: float = 1e-3) -> Any:
    """MobileNet v1 (alpha 1, depth multiplier 1) in the Keras 2 ``keras_applications`` layout and names."""
    inputs = keras.Input(input_shape)
    x = L.ZeroPadding2D(((0, 1), (0, 1)), name="conv1_pad")(inputs)
    x = L.Conv2D(32, 3, strides=2, padding="valid", use_bias=False, name="conv1")(x)
    x = L.BatchNormalization(name="conv1_bn")(x)
    x = L.ReLU(6.0, name="conv1_relu")(x)
    blocks = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    for i, (filters, stride) in enumerate(blocks, start=1):
        if stride == 2:
            x = L.ZeroPadding2D(((0, 1), (0, 1)), name=f"conv_pad_{i}")(x)
        pad = "same" if stride == 1 else "valid"
        x = L.DepthwiseConv2D(3, strides=stride, padding=pad, use_bias=False, name=f"conv_dw_{i}")(x)
        x = L.BatchNormalization(name=f"conv_dw_{i}_bn")(x)
        x = L.ReLU(6.0, name=f"conv_dw_{i}_relu")(x)
        x = L.Conv2D(filters, 1, padding="same", use_bias=False, name=f"conv_pw_{i}")(x)
        x = L.BatchNormalization(name=f"conv_pw_{i}_bn")(x)
        x = L.ReLU(6.0, name=f"conv_pw_{i}_relu")(x)
    x = L.GlobalAveragePooling2D(name="global_average_pooling2d")(x)
    x = L.Reshape((1, 1, 1024), name="reshape_1")(x)
    x = L.Dropout(dropout, name="dropout")(x)
    x = L.Conv2D(classes, 1, padding="same", name="conv_preds")(x)
    x = L.Reshape((classes,), name="reshape_2")(x)
    x = L.Activation("softmax", name="act_softmax")(x)
    return keras.Model(inputs, x, name="mobilenet_1.00_224")


def _vgg_encoder(inputs: Any, blocks: int) -> list[Any]:
    """VGG16's convolutional blocks (names block{b}_conv{k}, block{b}_pool); returns each block's pooled output."""
    levels, x = [], inputs
    for b, (filters, convs) in enumerate([(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)][:blocks], start=1):
        for k in range(1, convs + 1):
            x = L.Conv2D(filters, 3, activation="relu", padding="same", name=f"block{b}_conv{k}")(x)
        x = L.MaxPooling2D(2, strides=2, name=f"block{b}_pool")(x)
        levels.append(x)
    return levels


def _pixel_softmax(x: Any, reshape: str, activation: str) -> Any:
    h, w, c = x.shape[1:]
    x = L.Reshape((h * w, c), name=reshape)(x)
    return L.Activation("softmax", name=activation)(x)


def vgg_unet(input_shape: tuple[int, int, int] = (416, 608, 3), n_classes: int = 19) -> Any:
    """U-Net with a VGG16 encoder (4 blocks); decoder of pad-conv-BN-upsample steps with skips to blocks 3, 2, 1.

    The output is at half the input resolution, as in the reference graph.
    """
    inputs = keras.Input(input_shape)
    f1, f2, f3, f4 = _vgg_encoder(inputs, 4)
    x = f4
    for k, (filters, skip) in enumerate([(512, f3), (256, f2), (128, f1), (64, None)]):
        sfx = f"_{k}" if k else ""
        x = L.ZeroPadding2D(1, name=f"zero_padding2d{sfx}")(x)
        x = L.Conv2D(filters, 3, padding="valid", activation="relu", name=f"conv2d{sfx}")(x)
        x = L.BatchNormalization(name=f"batch_normalization{sfx}")(x)
        if skip is not None:
            x = L.UpSampling2D(2, name=f"up_sampling2d{sfx}")(x)
            x = L.Concatenate(axis=-1, name=f"concatenate{sfx}")([x, skip])
    x = L.Conv2D(n_classes, 3, padding="same", name="conv2d_4")(x)
    return keras.Model(inputs, _pixel_softmax(x, "reshape", "activation"), name="vgg_unet")


def _crop_to(x: Any, ref: Any, names: list[str]) -> Any:
    """Crop ``x`` at the bottom/right to ``ref``'s height and width (width first, as FCN-8s does)."""
    dw = x.shape[2] - ref.shape[2]
    dh = x.shape[1] - ref.shape[1]
    if dw < 0 or dh < 0:
        raise ValueError(f"cannot crop {tuple(x.shape)} to {tuple(ref.shape)}: input resolution too small for FCN-8s")
    x = L.Cropping2D(((0, 0), (0, dw)), name=names[0])(x)
    return L.Cropping2D(((0, dh), (0, 0)), name=names[1])(x)


def fcn8_vgg(input_shape: tuple[int, int, int] = (416, 608, 3), n_classes: int = 19) -> Any:
    """FCN-8s on VGG16: fc6/fc7 as convolutions, 2x, 2x, 8x transposed convolutions with pool4/pool3 skips."""
    inputs = keras.Input(input_shape)
    _, _, f3, f4, f5 = _vgg_encoder(inputs, 5)
    x = L.Conv2D(4096, 7, activation="relu", padding="same", name="conv2d_5")(f5)
    x = L.Dropout(0.5, name="dropout")(x)
    x = L.Conv2D(4096, 1, activation="relu", padding="same", name="conv2d_6")(x)
    x = L.Dropout(0.5, name="dropout_1")(x)
    x = L.Conv2D(n_classes, 1, kernel_initializer="he_normal", name="conv2d_7")(x)
    x = L.Conv2DTranspose(n_classes, 4, strides=2, use_bias=False, name="conv2d_transpose")(x)
    skip = L.Conv2D(n_classes, 1, kernel_initializer="he_normal", name="conv2d_8")
    x = _crop_to(x, f4, ["cropping2d", "cropping2d_1"])
    x = L.Add(name="add")([x, skip(f4)])
    x = L.Conv2DTranspose(n_classes, 4, strides=2, use_bias=False, name="conv2d_transpose_1")(x)
    skip = L.Conv2D(n_classes, 1, kernel_initializer="he_normal", name="conv2d_9")(f3)
    x = _crop_to(x, skip, ["cropping2d_2", "cropping2d_3"])
    x = L.Add(name="add_1")([skip, x])
    x = L.Conv2DTranspose(n_classes, 16, strides=8, use_bias=False, name="conv2d_transpose_2")(x)
    return keras.Model(inputs, _pixel_softmax(x, "reshape_1", "activation_1"), name="fcn8_vgg")


def segnet(input_shape: tuple[int, int, int] = (416, 608, 3), n_classes: int = 19) -> Any:
    """SegNet: a 4-level pad-conv-BN-ReLU-pool encoder and a pad-conv-BN decoder with 3 upsamplings."""
    inputs = keras.Input(input_shape)
    x = inputs
    for k, filters in enumerate([64, 128, 256, 256]):
        x = L.ZeroPadding2D(1, name=f"zero_padding2d_{4 + k}")(x)
        x = L.Conv2D(filters, 3, padding="valid", name=f"conv2d_{10 + k}")(x)
        x = L.BatchNormalization(name=f"batch_normalization_{4 + k}")(x)
        x = L.Activation("relu", name=f"activation_{2 + k}")(x)
        x = L.MaxPooling2D(2, name="max_pooling2d" + (f"_{k}" if k else ""))(x)
    for k, filters in enumerate([512, 256, 128, 64]):
        if k:
            x = L.UpSampling2D(2, name=f"up_sampling2d_{2 + k}")(x)
        x = L.ZeroPadding2D(1, name=f"zero_padding2d_{9 + k}")(x)
        x = L.Conv2D(filters, 3, padding="valid", name=f"conv2d_{15 + k}")(x)
        x = L.BatchNormalization(name=f"batch_normalization_{9 + k}")(x)
    x = L.Conv2D(n_classes, 3, padding="same", name="conv2d_19")(x)
    return keras.Model(inputs, _pixel_softmax(x, "reshape_2", "activation_7"), name="segnet")
