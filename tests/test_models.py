"""The model zoo: registry, paper settings, output shapes, Fig. 3 data."""

from __future__ import annotations

import pytest
import torch

from remat.models import (
    PAPER_MODELS,
    SPECS,
    UnknownModelError,
    activation_memory_table,
    get_model,
    model_names,
    model_spec,
    zoo_loss,
    zoo_sample,
)

PAPER_BATCH = {"vgg16": 256, "vgg19": 256, "mobilenet": 512, "resnet50": 256, "unet": 32, "fcn8": 32, "segnet": 32}


def test_registry_names_and_unknown_name():
    assert model_names() == [*PAPER_MODELS, "gpt2", "bert", "vit_b16", "resnet18"]
    assert list(PAPER_MODELS) == ["vgg16", "vgg19", "mobilenet", "resnet50", "unet", "fcn8", "segnet"]
    with pytest.raises(UnknownModelError) as err:
        get_model("alexnet")
    message = str(err.value)
    assert "unknown model 'alexnet'" in message
    assert all(name in message for name in model_names())
    with pytest.raises(UnknownModelError):
        model_spec("vgg17")


def test_paper_settings():
    for name, batch in PAPER_BATCH.items():
        spec = model_spec(name)
        assert spec.batch_size == batch
        if spec.task == "segmentation":
            assert spec.input_shape == (3, 416, 608) and spec.num_classes == 19
        else:
            assert spec.input_shape == (3, 224, 224) and spec.num_classes == 1000
    assert model_spec("vgg_unet").name == "unet" and model_spec("FCN8_VGG").name == "fcn8"


@pytest.mark.parametrize("name", list(SPECS))
def test_output_shapes_at_paper_resolution(name):
    spec = model_spec(name)
    model = get_model(name, device="meta")
    sample, target = zoo_sample(name, model, 2, device="meta")
    out = model(**sample) if isinstance(sample, dict) else model(sample)
    if spec.task in ("language_model", "masked_lm"):
        logits = out if spec.task == "language_model" else out.logits
        assert tuple(logits.shape) == (2, *spec.input_shape, spec.num_classes)
        assert tuple(target.shape) == (2, *spec.input_shape)
        return
    h, w = spec.input_shape[1:]
    expected = {
        "classification": (2, 1000),
        "segmentation": (2, 19, h // 2, w // 2) if name != "fcn8" else (2, 19, h, w),  # as the Keras models
    }[spec.task]
    assert tuple(out.shape) == expected
    assert not any(getattr(m, "inplace", False) for m in model.modules())


def test_parameter_counts():
    count = {n: sum(p.numel() for p in get_model(n, device="meta").parameters()) for n in SPECS}
    assert count["vgg16"] == 138_357_544 and count["resnet50"] == 25_557_032  # torchvision's published counts
    # MobileNet v1 at width 1.0: 4.2 M parameters (Howard et al. 2017, Table 1)
    assert 4.1e6 < count["mobilenet"] < 4.3e6
    assert count["fcn8"] > count["vgg16"] - 124e6  # fc6/fc7 as convolutions: about 134 M
    # today's models at their published sizes: GPT-2 small (Hugging Face's count, head tied to the embedding),
    # torchvision's ViT-B/16 and ResNet-18, BERT-base with its masked-LM head (Hugging Face's BertForMaskedLM
    # 109,514,298 less the 2 x 768 token-type embeddings, which this encoder leaves out)
    assert count["gpt2"] == 124_439_808 and count["vit_b16"] == 86_567_656 and count["resnet18"] == 11_689_512
    assert count["bert"] == 109_514_298 - 2 * 768


def test_today_s_models_at_their_published_sizes():
    gpt = get_model("gpt2", device="meta")
    assert (len(gpt.blocks), gpt.wte.embedding_dim, gpt.blocks[0].attn.n_head, gpt.context) == (12, 768, 12, 1024)
    assert gpt.lm_head.weight is gpt.wte.weight
    bert = get_model("bert", device="meta")
    assert (len(bert.layers), bert.word.embedding_dim, bert.layers[0].mlp.up.out_features) == (12, 768, 3072)
    vit = get_model("vit_b16", device="meta")
    assert (vit.patch_size, len(vit.encoder.layers), vit.hidden_dim, vit.image_size) == (16, 12, 768, 224)
    small = get_model("gpt2", n_layer=2, d_model=64, n_head=4, context=32, vocab_size=100, device="meta")
    assert len(small.blocks) == 2 and small.vocab_size == 100
    assert zoo_loss("gpt2") == "token_cross_entropy" and callable(zoo_loss("bert"))


def test_real_model_runs_small_input():
    torch.manual_seed(0)
    model = get_model("segnet", num_classes=5)
    out = model(torch.randn(2, 3, 64, 96))
    assert out.shape == (2, 5, 32, 48) and torch.isfinite(out).all()


def test_activation_memory_table():
    rows = activation_memory_table(models=["mobilenet", "segnet"])
    assert [r["model"] for r in rows] == ["mobilenet", "segnet"]
    for row in rows:
        assert row["batch_size"] == PAPER_BATCH[row["model"]]
        # Fig. 3's point: activations dwarf parameters at the paper's batch sizes
        assert row["activation_bytes"] > 50 * row["parameter_bytes"]
        assert row["activation_bytes"] >= row["saved_activation_bytes"] > 0
    mobilenet, segnet = rows
    assert mobilenet["input_bytes"] == 512 * (3 * 224 * 224 * 4 + 8)  # float32 images, int64 labels
    assert segnet["input_bytes"] == 32 * (3 * 416 * 608 * 4 + 208 * 304 * 8)  # labels at the output resolution
    weights = get_model("mobilenet", device="meta").parameters()
    assert mobilenet["parameter_bytes"] == 4 * sum(p.numel() for p in weights)
    (one,) = activation_memory_table(batch_sizes=1, models=["mobilenet"])
    assert mobilenet["activation_bytes"] == 512 * one["activation_bytes"]
    assert mobilenet["parameter_bytes"] == one["parameter_bytes"]
