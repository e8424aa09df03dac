"""Our schedules against PyTorch's own rematerialization, on every zoo model (issues 5 and 26).

Models: the ``conf/model/`` entries at their reduced defaults (sizes, batch, input from the yaml; ``--models``
picks some). Per model, each contender runs in a fresh subprocess (``MALLOC_MMAP_THRESHOLD_`` set so the RSS
follows frees), on one thread:

* ``plain``: eager autograd, nothing recomputed;
* ``checkpoint``: ``torch.utils.checkpoint.checkpoint(use_reentrant=False)`` around every block (transformer
  layer, residual block, VGG/MobileNet stage, segmentation encoder/decoder stage; :func:`blocks`);
* ``ours``: the certified ``ilp``'s schedule (``--ilp-time-limit``; any schedule it has by then) run by
  :class:`remat.torch.execute.ScheduleExecutor`, at the budget ``--budget``: by default ``ckpt``, the constant
  part plus checkpoint's measured activation memory (the same memory), else any run.py form (``span:0.5``);
* ``compile``: ``torch.compile(backend="aot_eager_decomp_partition")`` (the min-cut partitioner inductor uses)
  with ``torch._functorch.config.activation_memory_budget`` = checkpoint's activation memory over plain's (the
  knob is a fraction of the activations saved without recomputation): the same memory, as far as one setting
  can ask for it.

Memory columns are activation memory: tensor storage alive at once during the step, without the constant
part (parameters, inputs, target) and without the parameter gradients (``zero_grad(set_to_none=True)`` before
each step, as PyTorch does by default; the storages that end up as ``.grad`` are taken out of the count
afterwards, :class:`ActivationMeter`), measured the same way for every eager contender. ``predicted`` is
``simulate()``'s peak minus the constant part (which holds all gradients); ``measured`` is ours, transients
inside a statement included; ``between`` the executor's own meter read between statements, where
``simulate()`` measures; ``peak/pred`` compares ours' whole peak with the prediction (constant included,
gradients counted from the step's start), ``act/pred`` activations only. ``compile`` is measured by
RSS growth only (under the live meter's dispatch mode dynamo runs the model eagerly), so every contender's RSS
growth is shown too, with glibc told to ``mmap`` every block of 4 KiB or more (``MALLOC_MMAP_THRESHOLD_``) so
that freed tensors leave the RSS at once (timings include those system calls, alike for all). Step time is
the best of ``--steps``;
ratios are ours' time over theirs. CPU only (no GPU lent to this project):
``torch.cuda.max_memory_allocated`` columns appear when run on CUDA. Timings are on a shared 2-core machine.

Usage: ``python benchmarks/vs_pytorch.py [--models gpt2 bert] [--budget span:0.5] [--steps 3]``;
``--node-counts`` prints each model's graph size at its reduced default and at full (paper) size instead.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import markdown_table  # noqa: E402

from remat.torch.memory import MMAP_ENV, LiveTensorMeter, rss_peak  # noqa: E402

ZOO = ["vgg16", "vgg19", "mobilenet", "resnet50", "unet", "fcn8", "segnet", "gpt2", "bert", "vit_b16", "resnet18"]
MIB = 2.0**20


class ActivationMeter(LiveTensorMeter):
    """A live-storage meter that can leave out, after the block, the storages that became parameter gradients."""

    def __init__(self, existing: Any) -> None:
        super().__init__(existing)
        self.events: list[tuple[int, int]] = []  # (storage key, +bytes at allocation / -bytes at release)

    def _track(self, t: torch.Tensor) -> None:
        key = id(t.untyped_storage())
        if key not in self._live and key not in self._existing:
            self.events.append((key, t.untyped_storage().nbytes()))
        super()._track(t)

    def _release(self, key: int) -> None:
        self.events.append((key, -self._live.get(key, 0)))
        super()._release(key)

    def peak_without(self, kept: list[torch.Tensor]) -> int:
        """The peak with the storages of ``kept`` (alive after the block, e.g. ``.grad``) never counted."""
        skip = {id(t.untyped_storage()) for t in kept}
        last_alloc: dict[int, int] = {}
        freed: set[int] = set()  # allocation events whose storage was released (ids are reused after a release)
        for i, (key, b) in enumerate(self.events):
            if b >= 0:
                last_alloc[key] = i
            elif key in last_alloc:
                freed.add(last_alloc[key])
        current = peak = 0
        for i, (key, b) in enumerate(self.events):
            if b >= 0 and key in skip and i not in freed:
                continue  # alive at the end and kept: a gradient
            current += b
            peak = max(peak, current)
        return peak


class Checkpointed(nn.Module):
    """``inner`` run under ``torch.utils.checkpoint`` (its activations recomputed in the backward)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args: Any) -> Any:
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.inner, *args, use_reentrant=False)


def _segments(seq: nn.Sequential, ends: tuple[type, ...] = (), size: int = 0, skip: int = 0) -> nn.Sequential:
    """``seq`` regrouped into checkpointed stages: cut after each module of type ``ends`` or every ``size``."""
    mods, out, cur = list(seq), list(seq)[:skip], []
    for k, m in enumerate(mods[skip:]):
        cur.append(m)
        if (ends and isinstance(m, ends)) or (size and (k + 1) % size == 0):
            out.append(Checkpointed(nn.Sequential(*cur)))
            cur = []
    if cur:
        out.append(Checkpointed(nn.Sequential(*cur)))
    return nn.Sequential(*out)


def blocks(name: str, model: nn.Module) -> nn.Module:
    """``model`` with each of its blocks wrapped in :class:`Checkpointed` (same parameters, same forward)."""
    if name in ("gpt2",):
        model.blocks = nn.ModuleList(Checkpointed(b) for b in model.blocks)
    elif name == "bert":
        model.layers = nn.ModuleList(Checkpointed(b) for b in model.layers)
    elif name == "vit_b16":
        model.encoder.layers = nn.Sequential(*(Checkpointed(b) for b in model.encoder.layers))
    elif name in ("resnet18", "resnet50"):
        for layer in ("layer1", "layer2", "layer3", "layer4"):
            setattr(model, layer, nn.Sequential(*(Checkpointed(b) for b in getattr(model, layer))))
    elif name in ("vgg16", "vgg19"):
        model.features = _segments(model.features, ends=(nn.MaxPool2d,))
    elif name == "mobilenet":
        model.features = _segments(model.features, size=6, skip=3)
    elif name == "unet":
        for part in ("block1", "block2", "block3", "block4", "center", "dec3", "dec2", "dec1"):
            setattr(model, part, Checkpointed(getattr(model, part)))
    elif name == "fcn8":
        for part in ("block1", "block2", "block3", "block4", "block5", "head"):
            setattr(model, part, Checkpointed(getattr(model, part)))
    elif name == "segnet":
        model.encoder = _segments(model.encoder, ends=(nn.MaxPool2d,))
        model.decoder = _segments(model.decoder, ends=(nn.Upsample,))
    return model


def setting(name: str) -> dict[str, Any]:
    from experiments.graphs import input_shape, model_config

    cfg = model_config(name)
    return {"kwargs": dict(cfg.get("kwargs") or {}), "batch": int(cfg["batch_size"]), "shape": input_shape(cfg)}


def build(name: str, spec: dict[str, Any]) -> tuple[nn.Module, Any, Any, Any]:
    from remat.models import get_model, zoo_loss, zoo_sample
    from remat.torch.losses import loss_target, resolve_loss

    torch.manual_seed(0)
    model = get_model(name, **spec["kwargs"])
    sample, target = zoo_sample(name, model, spec["batch"], tuple(spec["shape"]), seed=1)
    loss = zoo_loss(name)
    if target is None:
        with torch.no_grad():
            model.eval()
            out = model(sample)
            model.train()
        target = loss_target(loss, out, random=True)
    return model, sample, target, resolve_loss(loss)


def _call(model: nn.Module, sample: Any) -> Any:
    return model(**sample) if isinstance(sample, dict) else model(sample)


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    torch.set_num_threads(1)
    name, kind = spec["model"], spec["kind"]
    model, sample, target, loss = build(name, spec)
    inputs = list(sample.values()) if isinstance(sample, dict) else [sample]
    out: dict[str, Any] = {}
    if kind == "ours":
        from remat.budget import resolve_budget
        from remat.strategies import get_strategy
        from remat.torch.execute import ScheduleExecutor
        from remat.torch.extract import extract

        start = time.perf_counter()
        graph = extract(model, sample, loss=loss, target=None if loss.named else target, name=name)
        budget = (graph.constant_memory + spec["activation_budget"] if spec["budget"] == "ckpt"
                  else resolve_budget(spec["budget"], graph))
        result = get_strategy("ilp")(graph, budget, time_limit=spec["ilp_time_limit"])
        if not result.has_schedule:
            return {"status": f"no schedule ({result.status})"}
        ex = ScheduleExecutor(model, graph, result.schedule, loss=loss)
        const = graph.constant_memory
        out.update(nodes=graph.n, budget=budget - const, pred=result.peak_memory - const, pred_total=result.peak_memory,
                   const=const, status=str(result.status.value),
                   recomputes=int(result.schedule.R.sum()) - graph.n, solve_s=time.perf_counter() - start)

        def step() -> Any:
            return ex.step(sample, target)
    else:
        if kind == "checkpoint":
            model = blocks(name, model)
        run = _call
        if kind == "compile":
            from torch._functorch import config as functorch_config

            functorch_config.activation_memory_budget = spec["fraction"]
            compiled = torch.compile(model, backend="aot_eager_decomp_partition")
            run = lambda m, s: _call(compiled, s)  # noqa: E731

        def step() -> Any:
            loss.fn(run(model, sample), target).backward()

    def timed() -> float:
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        step()
        return time.perf_counter() - t0

    timed()  # warm-up: compiles, allocates the gradients
    times, rss = [], []
    for _ in range(spec["steps"]):
        t, peak = rss_peak(timed)
        times.append(t)
        rss.append(peak)
    out.update(time_s=min(times), rss=max(rss) if None not in rss else None, status=out.get("status", "ok"))
    if kind != "compile":
        model.zero_grad(set_to_none=True)
        with ActivationMeter([*model.parameters(), *model.buffers(), *inputs, target]) as meter:
            step()
        out["live"] = meter.peak_without([p.grad for p in model.parameters() if p.grad is not None])
        if kind == "ours":
            model.zero_grad(set_to_none=True)
            res = ex.step(sample, target, measure_live=True)
            out.update(between=res.live_between_peak - graph.constant_memory, live_total=res.live_peak)
    return out


def run_worker(spec: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, **MMAP_ENV, "MALLOC_MMAP_THRESHOLD_": "4096"}
    proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True,
                          env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"status": f"failed: {tail[:120]}"}
    return json.loads(lines[-1])


def node_counts(models: list[str]) -> None:
    from remat.models import model_spec, zoo_graph

    rows = []
    for name in models:
        spec = setting(name)
        reduced = zoo_graph(name, batch_size=spec["batch"], input_shape=tuple(spec["shape"]),
                            model_kwargs=spec["kwargs"])
        full = zoo_graph(name)
        paper = model_spec(name)
        rows.append({"model": name, "reduced": f"{reduced.n} ({reduced.loss} forward)",
                     "reduced input": f"{spec['batch']} x {'x'.join(map(str, spec['shape']))}",
                     "full": f"{full.n} ({full.loss} forward)",
                     "full input": f"{paper.batch_size} x {'x'.join(map(str, paper.input_shape))}"})
        print(f"  {rows[-1]}", file=sys.stderr, flush=True)
    print(markdown_table(rows, ["model", "reduced", "reduced input", "full", "full input"]))


def _ratio(a: Any, b: Any) -> float | None:
    return a / b if a and b else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=ZOO)
    ap.add_argument("--budget", default="ckpt")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--ilp-time-limit", type=float, default=30.0)
    ap.add_argument("--node-counts", action="store_true")
    ap.add_argument("--worker")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    if args.node_counts:
        node_counts(args.models)
        return
    rows = []
    for name in args.models:
        base = {"model": name, **setting(name), "steps": args.steps, "budget": args.budget,
                "ilp_time_limit": args.ilp_time_limit}
        r = {k: run_worker({**base, "kind": k}) for k in ("plain", "checkpoint")}
        plain, ckpt = r["plain"], r["checkpoint"]
        r["ours"] = ours = run_worker({**base, "kind": "ours", "activation_budget": ckpt.get("live") or 0})
        fraction = min(max((ckpt.get("live") or 0) / (plain.get("live") or 1), 0.0), 1.0)
        comp = run_worker({**base, "kind": "compile", "fraction": fraction})
        print(f"  {name}: {r} compile {comp}", file=sys.stderr, flush=True)
        rows.append({
            "model": name, "nodes": ours.get("nodes"), "budget": ours.get("budget", 0) / MIB,
            "predicted": ours.get("pred", 0) / MIB, "measured": (ours.get("live") or 0) / MIB,
            "between": (ours.get("between") or 0) / MIB,
            "peak/pred": _ratio(ours.get("live_total"), ours.get("pred_total")),
            "act/pred": _ratio(ours.get("live"), ours.get("pred")), "recomputes": ours.get("recomputes"),
            "plain": (plain.get("live") or 0) / MIB, "x plain": _ratio(ours.get("time_s"), plain.get("time_s")),
            "ckpt": (ckpt.get("live") or 0) / MIB, "x ckpt": _ratio(ours.get("time_s"), ckpt.get("time_s")),
            "plain rss": (plain.get("rss") or 0) / MIB, "ckpt rss": (ckpt.get("rss") or 0) / MIB,
            "ours rss": (ours.get("rss") or 0) / MIB, "compile rss": (comp.get("rss") or 0) / MIB,
            "x compile": _ratio(ours.get("time_s"), comp.get("time_s")), "ilp": ours.get("status"),
        })
    which = "checkpoint's measured activation memory" if args.budget == "ckpt" else args.budget
    print(f"\nEvery zoo model at its reduced default (conf/model/), budget {which}, CPU, one thread, torch "
          f"{torch.__version__}; activation memory in MiB (constant part excluded); 'x plain' etc. = our step time "
          f"over theirs\n")
    cols = ["model", "nodes", "budget", "predicted", "measured", "between", "peak/pred", "act/pred", "recomputes",
            "plain", "x plain", "ckpt", "x ckpt", "plain rss", "ckpt rss", "ours rss", "compile rss", "x compile",
            "ilp"]
    print(markdown_table(rows, cols))


if __name__ == "__main__":
    main()
