"""Extraction of today's models: the sample as given, keyword inputs, structured outputs, views, tied weights,
attention kernels, in-place writes, and errors that name the op and the module; each executed against autograd."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_executor import assert_same_training_state
from torch import nn

from remat.budget import span_budget
from remat.models.transformers import GPT2, BertEncoder, masked_lm_loss
from remat.strategies import get_strategy
from remat.torch import Sample
from remat.torch.execute import ScheduleExecutor, autograd_step
from remat.torch.extract import ExtractionError, extract

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def tiny_gpt(dropout: float = 0.1) -> nn.Module:
    torch.manual_seed(0)
    return GPT2(vocab_size=32, context=8, n_layer=1, d_model=16, n_head=2, dropout=dropout)


def tiny_bert() -> nn.Module:
    torch.manual_seed(0)
    return BertEncoder(vocab_size=32, max_len=8, n_layer=1, d_model=16, n_head=2, d_ff=32)


def bert_batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 32, (2, 8), generator=g)
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, 6:] = False
    target = torch.randint(0, 32, (2, 8), generator=g)
    target[:, ::2] = -100
    return ids, mask, target


def run_exactly(build, graph, sample, target, loss, fraction: float = 0.3, strategy: str = "checkpoint_last"):
    """One step under a recomputing schedule and one of plain autograd, same seed: both training states equal."""
    budget = span_budget(graph, fraction) if strategy != "checkpoint_last" else float("inf")
    result = get_strategy(strategy)(graph, budget)
    assert result.has_schedule, result.message
    model, ref = build(), build()
    torch.manual_seed(3)
    res = ScheduleExecutor(model, graph, result.schedule, loss=loss).step(sample, target, measure_live=True)
    torch.manual_seed(3)
    value = autograd_step(ref, sample, target, loss)
    assert res.recomputes > 0 and res.accounting_mismatches == []
    assert res.loss == pytest.approx(value, rel=1e-6)
    assert_same_training_state(model, ref)
    assert abs(res.live_between_peak - res.predicted_peak) <= 0.01 * res.predicted_peak
    return res


# ---------------------------------------------------------------------- inputs
def test_token_ids_are_traced_as_given_and_run_exactly():
    ids, y = torch.randint(0, 32, (2, 8)), torch.randint(0, 32, (2, 8))
    g = extract(tiny_gpt(), ids, loss="token_cross_entropy")  # an invented float sample broke nn.Embedding
    (spec,) = g.metadata["inputs"]
    assert spec["name"] == "input_ids" and spec["dtype"] == "int64" and spec["shape"] == [8]
    assert spec["high"] == int(ids.max()) + 1
    assert g.constant_memory - g.metadata["parameter_bytes"] * 2 == 2 * 8 * 8 + 2 * 8 * 8  # ids and targets
    run_exactly(tiny_gpt, g, ids, y, "token_cross_entropy")


def test_keyword_inputs_with_an_attention_mask():
    ids, mask, target = bert_batch()
    a = extract(tiny_bert(), {"input_ids": ids, "attention_mask": mask}, loss=masked_lm_loss, target=target)
    b = extract(tiny_bert(), Sample(ids, attention_mask=mask), loss=masked_lm_loss, target=target)
    c = extract(tiny_bert(), (ids, mask), loss=masked_lm_loss, target=target)
    assert a.names == b.names == c.names and np.array_equal(a.edges, b.edges) and np.array_equal(a.memory, c.memory)
    names = [s["name"] for s in a.metadata["inputs"]]
    assert names == ["input_ids", "attention_mask"] and a.metadata["inputs"][1]["dtype"] == "bool"
    assert a.metadata["loss"] == "callable:masked_lm_loss" and a.metadata["target"]["high"] == int(target.max()) + 1
    run_exactly(tiny_bert, a, {"input_ids": ids, "attention_mask": mask}, target, masked_lm_loss)


class Optional(nn.Module):
    """A parameter with a default (fixed when not given) and a flag that changes the traced code."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, mask=None, scale: float = 1.0, double: bool = False):
        h = self.fc(x) * scale
        if mask is not None:
            h = h * mask
        return h + h if double else h


def test_defaults_and_plain_values_are_fixed_and_checked():
    x = torch.randn(2, 4)
    plain = extract(Optional(), x, loss="mse")
    flagged = extract(Optional(), Sample(x, scale=2.0, double=True), loss="mse")
    assert plain.loss < flagged.loss  # the flag's branch was traced
    fixed = {s["name"]: s["value"] for s in flagged.metadata["inputs"] if not s["tensor"]}
    assert fixed == {"mask": None, "scale": 2.0, "double": True}
    ex = ScheduleExecutor(Optional(), flagged, get_strategy("checkpoint_all")(flagged, float("inf")).schedule)
    with pytest.raises(ValueError, match=r"input 'double' is False; the traced model is fixed to True"):
        ex.step(Sample(x, scale=2.0, double=False), torch.randn(2, 4))
    with pytest.raises(ExtractionError, match=r"input 'mask' is a list"):
        extract(Optional(), Sample(x, mask=[1, 2]))


# ---------------------------------------------------------------------- outputs
@dataclasses.dataclass
class Out:
    logits: torch.Tensor
    hidden: torch.Tensor


class Heads(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.body, self.head, self.aux = nn.Linear(4, 8), nn.Linear(8, 3), nn.Linear(8, 2)
        self.kind = kind

    def forward(self, x):
        h = torch.tanh(self.body(x))
        logits, side = self.head(h), self.aux(h)
        if self.kind == "tuple":
            return logits, side
        if self.kind == "dict":
            return {"logits": logits, "side": side}
        return Out(logits=logits, hidden=h)


def first(out):
    return out[0] if isinstance(out, tuple) else out["logits"] if isinstance(out, dict) else out.logits


@pytest.mark.parametrize("kind", ["tuple", "dict", "object"])
def test_tuple_dict_and_output_object(kind):
    x, y = torch.randn(2, 4), torch.tensor([0, 2])

    def loss(out, target):
        return F.cross_entropy(first(out), target)

    g = extract(Heads(kind), x, loss=loss, target=y)
    L = g.loss
    names = list(g.names)
    # the Loss node reads every graph node of the output; only what the loss reaches gets a gradient from it
    from_loss = {names[int(b)] for a, b in g.edges if a == L}
    assert from_loss == {"head_backward"}
    assert g.memory[L] == 2 * 3 * 4
    if kind != "object":
        assert "aux" in names[:L] and "aux_backward" not in names  # an unused output needs no backward
    run_exactly(lambda: _seeded(Heads, kind), g, x, y, loss)


def _seeded(cls, *args):
    torch.manual_seed(0)
    return cls(*args)


# ---------------------------------------------------------------------- views, ties, kernels
class Views(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 12)
        self.out = nn.Linear(6, 3)

    def forward(self, x):
        h = self.fc(x)  # (B, 12)
        a, b = h.view(-1, 2, 6).transpose(1, 2).chunk(2, dim=2)  # views of h
        z = (a.squeeze(2) * torch.sigmoid(b[..., 0])).T.T  # getitem, squeeze, getattr .T: views
        return self.out(z.permute(1, 0).permute(1, 0))


def test_views_getitem_and_getattr_are_aliases():
    g = extract(Views(), torch.randn(2, 6), loss="cross_entropy")
    assert g.names[: g.loss] == ("fc", "sigmoid", "mul", "out")
    assert set(g.metadata["fx_aliases"]) >= {"view", "transpose", "chunk", "getitem", "getitem_1", "squeeze",
                                              "getattr_1", "permute"}
    fc = g.names.index("fc")
    assert g.memory[fc] == 2 * 12 * 4  # the views cost nothing; the base counts once
    sig, mul = g.names.index("sigmoid"), g.names.index("mul")
    assert {(fc, sig), (fc, mul)} <= {tuple(map(int, e)) for e in g.edges}
    run_exactly(lambda: _seeded(Views), g, torch.randn(2, 6), torch.tensor([1, 2]), "cross_entropy")


def test_tied_parameters_are_counted_once():
    m = tiny_gpt()
    assert m.lm_head.weight is m.wte.weight
    g = extract(m, torch.randint(0, 32, (2, 8)), loss="token_cross_entropy")
    unique = sum(p.numel() * 4 for p in m.parameters())  # parameters() skips the tied duplicate
    assert g.metadata["parameter_bytes"] == unique
    listed = sum(p.numel() * 4 for mod in m.modules() for p in mod.parameters(recurse=False))
    assert listed == unique + 32 * 16 * 4


class Attention(nn.Module):
    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.qkv, self.p = nn.Linear(8, 24), dropout

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
        return F.scaled_dot_product_attention(q, k, v, dropout_p=self.p, is_causal=True).flatten(1)


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_attention_saves_what_the_cpu_kernel_saves(dropout):
    """Flash attention on the CPU saves q, k, v, out and the log-sum-exp; with dropout the math path saves the
    T x T probabilities too. The graph must read the same: found on meta as the CPU would choose."""
    x = torch.randn(2, 5, 8)
    g = extract(_seeded(Attention, dropout), x, loss="mse")
    sdpa = g.names.index("scaled_dot_product_attention")
    out_bytes = 2 * 2 * 5 * 4 * 4
    extra = int(g.memory[sdpa]) - out_bytes
    if dropout == 0:
        assert extra == 2 * 2 * 5 * 4  # the log-sum-exp only
    else:
        assert extra >= 2 * 2 * 5 * 5 * 4  # at least the attention probabilities
    run_exactly(lambda: _seeded(Attention, dropout), g, x, torch.randn(2, 40), "mse")


# ---------------------------------------------------------------------- in-place writes
class Writes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 6), nn.Linear(6, 3)

    def forward(self, x):
        h = self.a(x)
        h[:, 0] = 0.0  # setitem
        h.masked_fill_(h > 1.0, 1.0)
        h += 1  # (fx records it as a plain add)
        return self.b(F.relu(h, inplace=True))


def test_inplace_writes_run_out_of_place_and_exactly():
    x = torch.randn(2, 4) * 3
    g = extract(Writes(), x, loss="cross_entropy")
    assert set(g.metadata["fx_out_of_place"]) == {"setitem", "masked_fill_", "relu"}
    run_exactly(lambda: _seeded(Writes), g, x, torch.tensor([0, 1]), "cross_entropy")


class WritesIntoView(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        h = self.a(x)
        h.view(-1)[0:2].mul_(2.0)
        return h


def test_inplace_write_into_a_view_is_refused():
    with pytest.raises(ExtractionError, match=r"writes in place into .* a view of another tensor"):
        extract(WritesIntoView(), torch.randn(2, 4), loss="mse")


# ---------------------------------------------------------------------- what cannot be traced
class ReadsValues(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        return h * h.abs().max().item()


class Wrapper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner, self.head = ReadsValues(), nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.inner(x))


def test_an_op_that_reads_values_is_named_with_its_module():
    with pytest.raises(ExtractionError, match=r"cannot run call_method 'item' \(fx node 'item', in module 'inner'\)"
                                              r".*Rewrite it without reading tensor values"):
        extract(Wrapper(), torch.randn(2, 4))
