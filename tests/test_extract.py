"""PyTorch extraction: hand-checked graphs, the saved-tensor table, zoo graphs against autograd, rescaling."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from zoo_cases import CASES, build

from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.graph import load_graph
from remat.graph.reference import load_reference_graph, reference_graphs_available
from remat.models import PAPER_MODELS, SPECS, zoo_graph, zoo_sample
from remat.schedule import simulate
from remat.torch.extract import ExtractionError, extract

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


_GRAPHS: dict[tuple[str, int], object] = {}


def zoo_small(name: str, batch: int = 2):
    """The graph of the zoo model's small test setting (tests/zoo_cases.py)."""
    if (name, batch) not in _GRAPHS:
        case = CASES[name]
        _GRAPHS[name, batch] = zoo_graph(name, batch_size=batch, input_shape=case["shape"],
                                         model_kwargs=case["kwargs"])
    return _GRAPHS[name, batch]


# ---------------------------------------------------------------------- a 3-layer MLP by hand
class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.act1 = nn.Linear(4, 8), nn.ReLU()
        self.fc2, self.act2 = nn.Linear(8, 8), nn.ReLU()
        self.fc3 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc3(self.act2(self.fc2(self.act1(self.fc1(x)))))


def test_mlp_graph_node_by_node():
    g = extract(MLP(), (4,), batch_size=2, name="mlp")
    L = 5
    assert g.loss == L and g.n == 2 * L + 1
    assert g.names == (
        "fc1", "act1", "fc2", "act2", "fc3", "Loss",
        "fc3_backward", "act2_backward", "fc2_backward", "act1_backward", "fc1_backward",
    )  # fmt: skip
    for i in range(L):
        assert g.names[2 * L - i] == g.names[i] + "_backward"
        assert g.metadata["backward_of"][i] == 2 * L - i and g.metadata["forward_of"][2 * L - i] == i
    expected_edges = {
        (0, 1), (1, 2), (2, 3), (3, 4), (4, 5),  # forward data flow and the loss reading the output
        (5, 6), (3, 6),  # fc3 backward: gradient from the loss, its saved input act2
        (6, 7), (3, 7),  # act2 (ReLU) backward: gradient from fc3, its own saved output
        (7, 8), (1, 8),  # fc2 backward: its input act1
        (8, 9), (1, 9),  # act1 backward: its output
        (9, 10),  # fc1 backward: its input is the model input (constant), so only the gradient
    }  # fmt: skip
    assert {tuple(map(int, e)) for e in g.edges} == expected_edges
    f = 4  # float32 bytes
    hidden, out = 2 * 8 * f, 2 * 3 * f
    # forward outputs; Loss = dL/d(output); backward of u = dL/d(u's activation input); fc1's input is x: 0.
    assert g.memory.tolist() == [hidden, hidden, hidden, hidden, out, out, hidden, hidden, hidden, hidden, 0]
    params = (4 * 8 + 8 + 8 * 8 + 8 + 8 * 3 + 3) * f
    inputs = 2 * 4 * f + 2 * 8  # x in float32, int64 class targets
    assert g.input_memory == inputs
    assert g.constant_memory == inputs + 2 * params
    assert g.batch_size == 2 and g.batch_scaled.all()
    assert g.cost_unit == "flop" and g.metadata["model"] == "mlp" and g.metadata["input_shape"] == [4]
    assert g.metadata["fx_nodes"] == ["fc1", "act1", "fc2", "act2", "fc3", None, "fc3", "act2", "fc2", "act1", "fc1"]
    # FLOPs: a (B x i) @ (i x o) product is 2*B*i*o; the ReLU floor is one per element forward, two backward.
    assert g.cost[0] == 2 * 2 * 4 * 8 and g.cost[1] == 16 and g.cost[4] == 2 * 2 * 8 * 3
    assert g.cost[6] == 2 * (2 * 2 * 8 * 3)  # fc3: grad input and grad weight
    assert g.cost[7] == 2 * 16
    assert g.cost[10] == 2 * 2 * 4 * 8  # fc1: grad weight only, the model input needs no gradient
    assert g.cost[5] == 3 * 2 * 3  # loss floor: three per output element


def test_dtype_and_json_round_trip(tmp_path):
    g = extract(MLP(), (4,), batch_size=2, dtype=torch.bfloat16, name="mlp")
    assert g.memory[0] == 2 * 8 * 2 and g.metadata["dtype"] == "bfloat16"
    params = (4 * 8 + 8 + 8 * 8 + 8 + 8 * 3 + 3) * 2
    assert g.constant_memory == 2 * 4 * 2 + 2 * 8 + 2 * params
    g.save(tmp_path / "mlp.json")
    back = load_graph(tmp_path / "mlp.json")
    assert back.names == g.names and np.array_equal(back.edges, g.edges) and np.array_equal(back.memory, g.memory)
    assert back.metadata["fx_nodes"] == g.metadata["fx_nodes"] and back.metadata["cost_unit"] == "flop"


# ---------------------------------------------------------------------- what autograd saves, op by op
# "input": the op's argument; "output": its result; "extra": a batch-sized tensor of its own (indices, mask).
SAVED = {
    "relu": (nn.ReLU(), {"output"}),
    "sigmoid": (nn.Sigmoid(), {"output"}),
    "tanh": (nn.Tanh(), {"output"}),
    "softmax": (nn.Softmax(1), {"output"}),
    "relu6": (nn.ReLU6(), {"input"}),
    "gelu": (nn.GELU(), {"input"}),
    "conv": (nn.Conv2d(4, 4, 3, padding=1), {"input"}),
    "conv_transpose": (nn.ConvTranspose2d(4, 4, 2, 2), {"input"}),
    "batchnorm": (nn.BatchNorm2d(4), {"input"}),
    "maxpool": (nn.MaxPool2d(2), {"input", "extra"}),
    "avgpool": (nn.AvgPool2d(2), {"input"}),
    "global_avgpool": (nn.AdaptiveAvgPool2d(1), set()),
    "upsample": (nn.Upsample(scale_factor=2), set()),
    "flatten": (nn.Flatten(), set()),
    "dropout": (nn.Dropout(0.5), {"extra"}),
    "linear": (nn.Sequential(nn.Flatten(), nn.Linear(4 * 8 * 8, 5))[1], {"input"}),
}
BINARY = {"add": (torch.add, set()), "mul": (torch.mul, {"input"}), "cat": (lambda a, b: torch.cat([a, b], 1), set())}


def autograd_saved_kinds(op, *inputs) -> set[str]:
    """What autograd saves for ``op``, found with saved_tensors_hooks on real CPU tensors (by storage)."""
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = op(*inputs)
    params = {p.untyped_storage().data_ptr() for p in getattr(op, "parameters", lambda: [])()}
    params |= {b.untyped_storage().data_ptr() for b in getattr(op, "buffers", lambda: [])()}
    kinds = set()
    for t in saved:
        ptr = t.untyped_storage().data_ptr()
        if ptr in params:
            continue
        if any(ptr == x.untyped_storage().data_ptr() for x in inputs):
            kinds.add("input")
        elif ptr == out.untyped_storage().data_ptr():
            kinds.add("output")
        elif t.dim() > 0 and t.shape[0] == inputs[0].shape[0]:
            kinds.add("extra")  # batch-sized; per-channel statistics are not
    return kinds


class Unary(nn.Module):
    def __init__(self, op: nn.Module, linear: bool) -> None:
        super().__init__()
        self.src = nn.Conv2d(3, 4, 1)
        self.flat = nn.Flatten() if linear else nn.Identity()
        self.op = op

    def forward(self, x):
        return self.op(self.flat(self.src(x)))


class Binary(nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.a, self.b, self.fn = nn.Conv2d(3, 4, 1), nn.Conv2d(3, 4, 1), fn

    def forward(self, x):
        return self.fn(self.a(x), self.b(x))


def graph_saved_kinds(g, op_node: int, input_nodes: list[int]) -> set[str]:
    back = g.metadata["backward_of"][op_node]
    deps = set(map(int, g.deps[back]))
    kinds = set()
    if deps & set(input_nodes):
        kinds.add("input")
    if op_node in deps:
        out_only = g.memory[op_node] == np.prod(g.metadata["output_shape"]) * 4
        kinds.add("output" if out_only else "extra")
    return kinds


@pytest.mark.parametrize("name", sorted(SAVED))
def test_saved_tensor_table_unary(name):
    op, expected = SAVED[name]
    x = torch.randn(2, 4 * 8 * 8 if name == "linear" else 4, *(() if name == "linear" else (8, 8)))
    assert autograd_saved_kinds(op, x.requires_grad_()) == expected  # the table is what autograd does
    g = extract(Unary(op, linear=name == "linear"), (3, 8, 8), 2, loss="mse")
    op_node = g.loss - 1  # its input is the node before it (flatten or identity)
    assert graph_saved_kinds(g, op_node, [op_node - 1]) == expected  # ... and what the graph reads


@pytest.mark.parametrize("name", sorted(BINARY))
def test_saved_tensor_table_binary(name):
    fn, expected = BINARY[name]
    a, b = torch.randn(2, 4, 8, 8, requires_grad=True), torch.randn(2, 4, 8, 8, requires_grad=True)
    assert autograd_saved_kinds(fn, a, b) == expected
    g = extract(Binary(fn), (3, 8, 8), 2, loss="mse")
    assert graph_saved_kinds(g, g.loss - 1, [0, 1]) == expected
    back = g.metadata["backward_of"][g.loss - 1]
    # the gradient w.r.t. both inputs, each (2, 4, 8, 8) float32
    assert g.memory[back] == 2 * (2 * 4 * 8 * 8 * 4)


# ---------------------------------------------------------------------- the zoo
@pytest.mark.parametrize("name", list(SPECS))
def test_zoo_model_extracts_to_training_graph(name):
    g = zoo_small(name)
    L = g.loss
    assert L > 10 and g.names[L] == "Loss"
    if name in PAPER_MODELS:
        assert g.n == 2 * L + 1  # every layer of a CNN has parameters upstream: all need a backward
        for i in range(L):
            assert g.names[2 * L - i] == g.names[i] + "_backward"
    back, fwd = g.metadata["backward_of"], g.metadata["forward_of"]
    for i in range(L):
        assert back[i] == -1 or (g.names[back[i]] == g.names[i] + "_backward" and fwd[back[i]] == i)
    assert g.memory[:L].min() > 0 and g.cost.min() > 0
    assert (g.edges[:, 0] < g.edges[:, 1]).all()
    for b in g.backward_nodes:  # every backward node gets a gradient: from the loss or another backward node
        assert any(d >= L for d in g.deps[b])
    assert g.metadata["device"] and g.metadata["dtype"] == "float32" and g.metadata["model"] == name
    assert not g.metadata["fx_out_of_place"]


def autograd_saved_bytes(model: nn.Module, x) -> int:
    """Distinct bytes of activations autograd saves in the forward (parameters, buffers and inputs excluded)."""
    inputs = list(x.values()) if isinstance(x, dict) else [x]
    skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), *inputs]}
    seen: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(**x) if isinstance(x, dict) else model(x)
    return sum(seen.values())


@pytest.mark.parametrize("name", list(SPECS))
def test_checkpoint_all_memory_matches_autograd(name):
    """Tolerance: checkpoint-all keeps exactly autograd's batch-proportional saved tensors through the loss.

    Autograd's per-channel batch-norm statistics are not batch-proportional and are
    left out of the graph (so we compare the growth from batch 2 to 4). At the loss
    step the graph also holds the model output and the loss gradient; the peak
    exceeds the saved bytes by gradient buffers in flight, at most two of the
    largest gradient nodes. A node whose backward needs only tensors of its own
    (dropout's mask, layer norm's statistics, an opaque attention module's
    intermediates) keeps its output too, because a register holds a node's output
    with its extras: the graph's only excess, bounded by those nodes' bytes.
    """
    model = build(name)
    shape = CASES[name]["shape"]
    saved2 = autograd_saved_bytes(model, zoo_sample(name, model, 2, shape)[0])
    saved4 = autograd_saved_bytes(model, zoo_sample(name, model, 4, shape)[0])
    proportional = saved4 - saved2
    assert 0 <= saved2 - proportional <= 0.1 * saved2  # the per-channel part is small

    g = zoo_small(name)
    sim = simulate(g, checkpoint_all_schedule(g))
    L = g.loss
    at_loss = sim.memory[L, L] - g.constant_memory - g.memory[L] - g.memory[L - 1]
    back = g.metadata["backward_of"]
    kept_for_extras = sum(
        int(g.memory[u]) for u in range(L) if g.names[u] in g.metadata["fx_extra_slots"]
        and all(int(b) == back[u] for b in g.edges[g.edges[:, 0] == u][:, 1] if b > L)
    )
    assert 0 <= at_loss - proportional <= kept_for_extras
    if name in PAPER_MODELS:
        assert at_loss == proportional
    excess = sim.peak_memory - g.constant_memory - at_loss
    assert 0 <= excess <= 2 * g.memory[L:].max() + g.memory[L - 1]


@pytest.mark.reference
def test_vgg16_activation_sizes_match_the_reference_graph():
    """Our VGG16 at the paper's batch and resolution against the Checkmate authors' Keras graph.

    Keras fuses ReLU into each conv, so the reference's conv outputs are our ReLU
    outputs; its dense layers are our Linear layers.
    """
    if not reference_graphs_available():
        pytest.skip("reference graphs not found (set REMAT_GRAPHS_DIR or put them in ../shared/data/graphs)")
    ref = load_reference_graph("vgg16")
    g = zoo_graph("vgg16")
    assert g.batch_size == 256
    ref_conv = [int(ref.memory[i]) for i in range(ref.loss) if "_conv" in ref.names[i]]
    ref_dense = [int(ref.memory[i]) for i in range(ref.loss) if ref.names[i] in ("fc1", "fc2", "predictions")]
    ops = g.metadata["fx_ops"]
    relu_after_conv = [int(g.memory[i + 1]) for i in range(g.loss) if ops[i] == "Conv2d"]
    linear = [int(g.memory[i]) for i in range(g.loss) if ops[i] == "Linear"]
    assert relu_after_conv == ref_conv and linear == ref_dense


@pytest.mark.reference
@pytest.mark.parametrize("name", ["unet", "fcn8", "segnet"])
def test_segmentation_conv_outputs_match_the_reference_graph(name):
    """Same architecture as the paper's Keras model: the multiset of conv output sizes is identical."""
    if not reference_graphs_available():
        pytest.skip("reference graphs not found (set REMAT_GRAPHS_DIR or put them in ../shared/data/graphs)")
    ref = load_reference_graph(SPECS[name].reference)
    g = zoo_graph(name)
    ref_conv = sorted(
        int(ref.memory[i])
        for i in range(ref.loss)
        if "conv" in ref.names[i] and "padding" not in ref.names[i] and "transpose" not in ref.names[i]
    )
    ours = sorted(int(g.memory[i]) for i in range(g.loss) if g.metadata["fx_ops"][i] == "Conv2d")
    assert ours == ref_conv


@pytest.mark.parametrize("name", ["mobilenet", "unet"])
def test_with_batch_size_equals_fresh_extraction(name):
    g2, g5 = zoo_small(name, 2), zoo_small(name, 5)
    r = g2.with_batch_size(5)
    assert r.names == g5.names and np.array_equal(r.edges, g5.edges)
    assert np.array_equal(r.memory, g5.memory)
    np.testing.assert_allclose(r.cost, g5.cost, rtol=1e-12)
    assert (r.constant_memory, r.input_memory, r.batch_size) == (g5.constant_memory, g5.input_memory, 5)


# ---------------------------------------------------------------------- structure corner cases
class Preprocessed(nn.Module):
    """The first op touches only the input: it needs no gradient and gets no backward node."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x * 2.0)


def test_node_without_gradient_gets_no_backward():
    g = extract(Preprocessed(), (4,), 2)
    assert g.names == ("mul", "fc", "Loss", "fc_backward")
    assert g.metadata["backward_of"] == [-1, 3] and g.metadata["forward_of"] == [-1, -1, -1, 1]
    assert g.memory[3] == 0  # the gradient w.r.t. mul's output is not needed: it requires no grad
    assert {tuple(map(int, e)) for e in g.edges} == {(0, 1), (1, 2), (2, 3), (0, 3)}


class InPlace(nn.Module):
    def __init__(self, inplace: bool) -> None:
        super().__init__()
        self.a, self.b, self.act = nn.Linear(4, 4), nn.Linear(4, 4), nn.ReLU(inplace=inplace)
        self.inplace = inplace

    def forward(self, x):
        y = self.a(x)
        if self.inplace:
            y.add_(self.b(x))  # (fx records "y += z" as a plain add already)
        else:
            y = y + self.b(x)
        return self.act(y)


def test_inplace_ops_are_modelled_out_of_place():
    g_in, g_out = extract(InPlace(True), (4,), 2), extract(InPlace(False), (4,), 2)
    assert np.array_equal(g_in.edges, g_out.edges) and np.array_equal(g_in.memory, g_out.memory)
    assert g_in.metadata["fx_out_of_place"] == ["add_", "act"] and not g_out.metadata["fx_out_of_place"]


class Chunked(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 6)

    def forward(self, x):
        a, b = torch.chunk(self.fc(x), 2, dim=1)
        return a * torch.sigmoid(b) + x.size(0)


def test_tuple_outputs_aliases_and_shape_arithmetic():
    g = extract(Chunked(), (4,), 2, loss="mse")
    # chunk returns two views of fc's output: no node, its readers read fc
    assert g.names[: g.loss] == ("fc", "sigmoid", "mul", "add")
    assert g.metadata["fx_aliases"] == {"chunk": [0], "getitem": [0], "getitem_1": [0]}
    assert g.metadata["fx_aux"] == {"size": []}  # shape-only: fixed at extraction, reads nothing
    assert g.memory[0] == 2 * 6 * 4  # fc's whole output, both chunks
    mul = g.names.index("mul")
    # mul saves both arguments: fc (through the view) and sigmoid; sigmoid saves its output
    assert set(map(int, g.deps[g.metadata["backward_of"][mul]])) >= {0, 1}
    assert 1 in set(map(int, g.deps[g.metadata["backward_of"][1]]))
    assert {tuple(map(int, e)) for e in g.edges if e[1] < g.loss} == {(0, 1), (0, 2), (1, 2), (2, 3)}


# ---------------------------------------------------------------------- bad input
class DataDependent(nn.Module):
    def forward(self, x):
        return x if x.sum() > 0 else -x


class ShapeDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x) if x.shape[-1] > 2 else x


class Wrapper(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.pre, self.gate, self.head = nn.Linear(4, 4), inner, nn.Linear(4, 3)

    def forward(self, x):
        return self.head(self.gate(self.pre(x)))


def test_untraceable_module_is_named_with_fallback():
    with pytest.raises(ExtractionError, match=r"module 'gate' \(DataDependent\).*leaf_modules=\['gate'\]"):
        extract(Wrapper(DataDependent()), (4,), 2)
    with pytest.raises(ExtractionError, match=r"module 'gate' \(ShapeDependent\)"):
        extract(Wrapper(ShapeDependent()), (4,), 2)
    g = extract(Wrapper(ShapeDependent()), (4,), 2, leaf_modules=["gate"])  # the stated fallback works
    assert g.names[: g.loss] == ("pre", "gate", "head")


def test_bad_arguments_are_reported():
    with pytest.raises(ExtractionError, match="batch_size must be a positive integer"):
        extract(MLP(), (4,), 0)
    with pytest.raises(ExtractionError, match="sample_shape"):
        extract(MLP(), (4, -1), 2)
    with pytest.raises(ExtractionError, match="unknown cost_model 'time'"):
        extract(MLP(), (4,), 2, cost_model="time")
    with pytest.raises(ExtractionError, match="unknown loss 'hinge'"):
        extract(MLP(), (4,), 2, loss="hinge")
    with pytest.raises(ExtractionError, match="needs a torch.nn.Module"):
        extract(lambda x: x, (4,), 2)


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x), F.relu(x)


def test_tuple_returning_model_needs_a_loss_that_reads_it():
    with pytest.raises(ExtractionError, match=r"loss 'cross_entropy' needs a model that returns one tensor.*loss=fn"):
        extract(TwoHeads(), (4,), 2)
    y = torch.zeros(2).long()
    g = extract(TwoHeads(), torch.randn(2, 4), loss=lambda out, y: F.cross_entropy(out[0], y), target=y)
    assert g.names[: g.loss] == ("fc", "relu")
    # the loss reads only the logits: relu's output is in no gradient's way, so it has no backward node
    assert g.names[g.loss + 1 :] == ("fc_backward",) and g.memory[g.loss] == 2 * 3 * 4
    assert g.metadata["loss"].startswith("callable:") and g.metadata["target"]["dtype"] == "int64"
