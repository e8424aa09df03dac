"""remat.torch.optimize: both training styles equal plain PyTorch training, save/load, bad input."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from test_executor import ATOL, RTOL, SHAPE, Net, assert_same_training_state

import remat.torch as rt

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def pair(seed: int = 0):
    torch.manual_seed(seed)
    model, ref = Net(), Net()
    ref.load_state_dict(model.state_dict())
    return model, ref


def batches(n: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(2, *SHAPE, generator=g), torch.randint(0, 5, (2,), generator=g)) for _ in range(n)]


def test_step_style_trains_like_plain_pytorch():
    model, ref = pair()
    m = rt.optimize(model, batches(1)[0][0], budget=0.9, strategy="ilp", time_limit=20)
    assert m.schedule.R.sum() > m.graph.n  # the schedule recomputes something
    opt, opt_ref = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    for i, (x, y) in enumerate(batches(3)):
        opt.zero_grad()
        opt_ref.zero_grad()
        torch.manual_seed(10 + i)
        loss = m.step(x, y)
        torch.manual_seed(10 + i)
        loss_ref = F.cross_entropy(ref(x), y)
        loss_ref.backward()
        assert loss.item() == pytest.approx(loss_ref.item(), rel=1e-6)
        assert_same_training_state(model, ref)
        opt.step()
        opt_ref.step()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.allclose(p, q, rtol=RTOL, atol=ATOL)
    assert int(model.bn.num_batches_tracked) == 3
    assert m.last_step.tracked_peak == m.last_step.predicted_peak == m.result.peak_memory


def test_module_style_with_any_loss_is_exact():
    model, ref = pair()
    x, y = batches(1)[0]
    m = rt.optimize(model, x, budget=1.0, strategy="checkpoint_last")
    assert m.schedule.R.sum() > 2 * m.graph.n

    def smooth_ce(out):  # a loss other than the graph's own: its gradient reaches the Loss node
        return F.cross_entropy(out, y, label_smoothing=0.1) + 0.01 * out.pow(2).mean()

    torch.manual_seed(3)
    out = m(x)
    loss = smooth_ce(out)
    loss.backward()
    torch.manual_seed(3)
    out_ref = ref(x)
    smooth_ce(out_ref).backward()
    assert torch.allclose(out, out_ref, rtol=RTOL, atol=ATOL)
    assert_same_training_state(model, ref)
    assert m.last_step.recomputes > 0 and m.last_step.accounting_mismatches == []


def test_inference_runs_the_plain_model():
    model, _ = pair()
    x, _ = batches(1)[0]
    m = rt.optimize(model, x, budget=1.0, strategy="checkpoint_all")
    m.eval()
    with torch.no_grad():
        assert torch.equal(m(x), model(x))


def test_save_and_load_round_trip(tmp_path):
    model, ref = pair()
    x, y = batches(1)[0]
    m = rt.optimize(model, x, budget=0.9, strategy="ilp", time_limit=20)
    path = tmp_path / "net.schedule.json"
    m.save(path)
    again = rt.load(path, ref)
    assert (again.schedule.R == m.schedule.R).all() and (again.schedule.S == m.schedule.S).all()
    assert again.result.peak_memory == m.result.peak_memory
    torch.manual_seed(4)
    a = m.step(x, y)
    torch.manual_seed(4)
    b = again.step(x, y)
    assert a.item() == b.item()
    assert_same_training_state(model, ref)
    with pytest.raises(rt.RematError, match="was solved for model 'Net'"):
        rt.load(path, Net(width=6))
    (tmp_path / "junk.json").write_text('{"format": "other"}')
    with pytest.raises(rt.RematError, match="not a schedule saved by remat.torch"):
        rt.load(tmp_path / "junk.json", ref)


def test_summary_names_strategy_budget_and_peak():
    model, _ = pair()
    x, y = batches(1)[0]
    m = rt.optimize(model, x, budget=0.9, strategy="ilp", time_limit=20)
    m.step(x, y)
    text = m.summary()
    assert "strategy ilp" in text and "predicted peak" in text and "last step" in text


def test_bad_budget_and_infeasible_budget_are_explained():
    model, _ = pair()
    x, y = batches(1)[0]
    with pytest.raises(rt.RematError, match=r"budget -1 must be positive: give bytes .* \"span:f\""):
        rt.optimize(model, x, budget=-1)
    with pytest.raises(rt.RematError, match="sample must be the model's input batch"):
        rt.optimize(model, [1, 2], budget=0.9)
    for strategy in ("checkpoint_last", "ilp"):
        with pytest.raises(rt.RematError) as err:
            rt.optimize(model, x, budget=0.2, strategy=strategy, time_limit=20)
        message = str(err.value)
        assert f"{strategy} found no schedule" in message and "raise the budget" in message
        least = float(re.search(r"the least budget that works: (\d+) bytes", message).group(1))
        lower = float(re.search(r"no schedule at all exists below (\d+) bytes", message).group(1))
        assert lower <= least
        m = rt.optimize(model, x, budget=least, strategy=strategy, time_limit=20)  # the named budget works
        assert m.result.peak_memory <= least
        m.step(x, y)


def test_every_budget_form_of_run_py():
    from remat.budget import memory_lower_bound, no_recompute_peak

    model, _ = pair()
    x, _ = batches(1)[0]
    g = rt.optimize(model, x, budget=1.0, strategy="checkpoint_all").graph
    peak, lower = no_recompute_peak(g), memory_lower_bound(g)[0]
    forms = {0.95: 0.95 * peak, int(peak): peak, f"{peak / 1000:.3f}kB": round(peak / 1000, 3) * 1000,
             "span:0.5": round(lower + 0.5 * (peak - lower))}
    for spec, expected in forms.items():
        m = rt.optimize(model, x, budget=spec, strategy="eviction_greedy")
        assert m.result.budget == pytest.approx(expected), spec


def test_language_model_through_optimize_both_styles():
    """Token ids in, per-token cross entropy out, dropout 0.1: both styles train exactly like plain PyTorch."""
    from remat.models import get_model
    from remat.models.transformers import masked_lm_loss

    def gpt():
        torch.manual_seed(0)
        return get_model("gpt2", n_layer=2, d_model=16, n_head=2, context=8, vocab_size=32)

    ids = torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(1))
    model, ref = gpt(), gpt()
    m = rt.optimize(model, ids, budget="span:0.3", loss="token_cross_entropy", strategy="ilp", time_limit=20)
    assert m.schedule.R.sum() > m.graph.n
    y = ids.roll(-1, dims=1)
    torch.manual_seed(5)
    m.step(ids, y)
    torch.manual_seed(5)
    F.cross_entropy(ref(ids).flatten(0, 1), y.flatten()).backward()
    assert_same_training_state(model, ref)

    def bert():
        torch.manual_seed(0)
        return get_model("bert", n_layer=1, d_model=16, n_head=2, d_ff=32, max_len=8, vocab_size=32)

    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[0, 5:] = False
    labels = torch.where(torch.arange(8) % 3 == 0, ids, -100)
    batch = {"input_ids": ids, "attention_mask": mask}
    model, ref = bert(), bert()
    m = rt.optimize(model, batch, budget="span:0.6", loss=masked_lm_loss, target=labels, strategy="ap_greedy")
    torch.manual_seed(6)
    out = m(**batch)  # style 2: the output object comes back, any loss of it
    assert type(out).__name__ == "MaskedLMOutput"
    masked_lm_loss(out, labels).backward()
    torch.manual_seed(6)
    masked_lm_loss(ref(**batch), labels).backward()
    assert_same_training_state(model, ref)
    assert m.last_step.recomputes > 0 and m.last_step.accounting_mismatches == []
