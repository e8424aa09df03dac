"""Cost models: FLOPs against closed forms, profiling on the CPU with its cache, scaling and failures."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from remat.models import get_model
from remat.torch import costs
from remat.torch.extract import extract
from remat.torch.trace import trace

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("REMAT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def vgg16_closed_form_flops(h: int = 224, w: int = 224, classes: int = 1000) -> tuple[list[int], list[int]]:
    """2 x multiply-accumulates of each 3x3 same-padded conv and each linear layer of VGG16 (batch 1)."""
    conv, cin = [], 3
    for block in ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512)):
        for cout in block:
            conv.append(2 * cin * cout * 9 * h * w)
            cin = cout
        h, w = h // 2, w // 2
    linear = [2 * 512 * 7 * 7 * 4096, 2 * 4096 * 4096, 2 * 4096 * classes]
    return conv, linear


def test_vgg16_forward_flops_match_closed_form():
    g = extract(get_model("vgg16", device="meta"), (3, 224, 224), 1, name="vgg16")
    conv, linear = vgg16_closed_form_flops()
    ops = g.metadata["fx_ops"]
    assert [g.cost[i] for i, op in enumerate(ops) if op == "Conv2d"] == conv
    assert [g.cost[i] for i, op in enumerate(ops) if op == "Linear"] == linear
    total = sum(conv) + sum(linear)
    assert abs(g.forward_cost - total) <= 0.01 * total  # the rest: one FLOP per element of ReLU/pool/...
    assert g.forward_cost > total
    assert g.cost_unit == "flop" and g.metadata["cost_model"] == "flops"


def test_backward_flops_count_input_and_weight_gradients():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1))
    g = extract(model, (3, 10, 10), 2, loss="mse")
    fwd = [2 * 2 * cin * 8 * 9 * 100 for cin in (3, 8)]
    assert g.cost[:2].tolist() == fwd
    assert g.names[3:] == ("_1_backward", "_0_backward")  # fx names Sequential children _0, _1
    assert g.cost[3] == 2 * fwd[1]  # gradient w.r.t. input and weight, each as costly as the forward
    assert g.cost[4] == fwd[0]  # the first conv's input is the model input: weight gradient only
    assert g.cost[2] == 3 * 2 * 8 * 100  # MSE: the counter sees no matmul, three FLOPs per output element


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.act = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(8)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(8 * 8 * 8, 1024)
        self.fc2 = nn.Linear(1024, 10)

    def forward(self, x):
        return self.fc2(self.fc(self.flat(self.pool(self.act(self.conv(x))))))


def profiled(batch: int, shape=(3, 16, 16), **options):
    opts = {"device": "cpu", "repeats": 3, "warmup": 1, **options}
    return extract(Tiny(), shape, batch, cost_model="profile", name="tiny", profile_options=opts)


def test_profile_on_cpu_is_cached_and_scaled(cache):
    torch.manual_seed(0)
    g2 = profiled(2)
    assert g2.cost_unit == "seconds" and g2.metadata["cost_model"] == "profile"
    assert g2.metadata["device"].startswith("cpu")
    assert (g2.cost >= costs.TIME_FLOOR).all()
    files = list(cache.glob("profile-tiny-b2-3x16x16-*.json"))
    assert len(files) == 1
    key = json.loads(files[0].read_text())["key"]
    assert {key[k] for k in ("model", "batch", "resolution", "dtype", "torch")} == {
        "tiny", 2, "3x16x16", "torch.float32", torch.__version__,
    }  # fmt: skip
    assert key["device"] == g2.metadata["device"]
    # The cache is read back: an edited entry shows up in the next extraction.
    data = json.loads(files[0].read_text())
    data["costs"]["forward"]["fc"] = 123.0
    files[0].write_text(json.dumps(data))
    g2b = profiled(2)
    assert g2b.cost[g2b.names.index("fc")] == 123.0
    # On the CPU a larger batch is measured at cpu_batch and scaled linearly.
    g8 = profiled(8)
    np.testing.assert_allclose(g8.cost, 4 * g2b.cost, rtol=1e-12)
    assert len(list(cache.glob("*.json"))) == 1
    profiled(2, shape=(3, 8, 8))  # another resolution is another cache entry
    assert len(list(cache.glob("*.json"))) == 2


def test_profile_times_are_real(cache):
    g = profiled(2, repeats=5)
    fc, act = g.names.index("fc"), g.names.index("act")
    assert "flat" not in g.names  # a view: an alias of pool, no node of its own
    assert g.cost[fc] > 3 * g.cost[act]  # 2 MFLOP matmul vs an elementwise max over 1k values
    assert g.cost[g.metadata["backward_of"][fc]] > g.cost[g.metadata["backward_of"][act]]


def test_profile_reports_what_it_cannot_run(cache):
    huge = (3, 30000, 30000)  # about 2 x 8 x 3.6 GB of activations per sample
    with pytest.raises(costs.ProfileError, match=r"cannot profile tiny at batch 2 and resolution 3x30000x30000"):
        extract(Tiny2(), huge, 4, cost_model="profile", name="tiny", profile_options={"device": "cpu"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = extract(Tiny2(), huge, 4, cost_model="profile", name="tiny", fallback="flops")
    assert g.cost_unit == "flop" and "profile failed" in g.metadata["cost_note"]
    assert any("falling back to FLOPs" in str(w.message) for w in caught)
    with pytest.raises(costs.ProfileError, match="meta device"):
        extract(get_model("mobilenet", device="meta"), (3, 32, 32), 2, cost_model="profile")


class Tiny2(nn.Module):
    """Resolution-independent (global pooling), so any input size traces."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.pool, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(self.pool(self.conv(x)).flatten(1))


def test_flops_function_directly():
    from remat.torch.inputs import shape_specs
    from remat.torch.probe import probe

    model = nn.Linear(6, 5)
    tr = trace(model, shape_specs(model, (6,), torch.float32))
    probe(tr, 3, "cross_entropy")  # classifies the nodes
    nc = costs.flops(tr, 3, "cross_entropy")
    (name,) = nc.forward
    assert nc.forward[name] == 2 * 3 * 6 * 5 and nc.backward[name] == 2 * 3 * 6 * 5  # weight gradient only
    assert nc.unit == "flop" and nc.measured_batch == 3
