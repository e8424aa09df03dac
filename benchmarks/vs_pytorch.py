"""Race our schedules against PyTorch's own checkpointing at the same memory budgets (issue 5, point 6).

Model: VGG16's ``features`` plus a linear head, as one ``nn.Sequential`` (so
``checkpoint_sequential`` applies), at a small resolution on CPU. Contenders, one
fresh subprocess each (``MALLOC_MMAP_THRESHOLD_`` set so the RSS follows frees):

* ``plain``: eager autograd, nothing recomputed;
* ``ours-ilp`` / ``ours-approx``: the Checkmate MILP (time limit) and two-phase
  LP rounding at budget ``B``, run by :class:`remat.torch.execute.ScheduleExecutor`;
* ``sqrt-n``: ``torch.utils.checkpoint.checkpoint_sequential`` with ``round(sqrt(n))``
  segments (no budget knob: its ratios, like plain's, are to the ours-ilp row whose
  measured live peak is closest);
* ``compile``: ``torch.compile(backend="aot_eager")`` with
  ``torch._functorch.config.activation_memory_budget`` = the activation fraction of
  ``B``, ``(B - constant) / (no-recompute peak - constant)`` (the knob is a fraction of
  the activations the default partitioner saves). Train mode is fine here because
  VGG16 features have no batch norm; PRIOR-ART.md notes budgets < 1 failed in train
  mode on resnet18 (in-place BN statistics) and worked in eval mode.

Memory columns: ``live`` = bytes of tensor storage alive at once during the step on
top of the resident model (LiveTensorMeter; eager contenders only), ``rss`` = growth of
the process's resident set at its peak during the step (every contender). Both
exclude parameters, gradients (allocated by a warm-up step) and the batch.
``pred`` = ``simulate()``'s peak minus the same constant part. Time = best of the
measured steps. Ratios are theirs / ours-ilp at the same budget.

``torch.compile``'s rss includes AOT autograd's backward returning every parameter
gradient at once before they are added to ``.grad`` (a transient of the whole
parameter size; eager contenders hold one parameter's gradient at a time).
Timings are on a shared 2-core machine: repeat before trusting differences < 20 %.

Usage: ``python benchmarks/vs_pytorch.py [--batch 8] [--res 32] [--budgets 0.6 0.8 1.0] [--steps 3]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(__file__))
from common import markdown_table  # noqa: E402

from remat.torch.memory import MMAP_ENV, LiveTensorMeter, rss_peak  # noqa: E402


def vgg16_sequential(classes: int = 10) -> nn.Sequential:
    import torchvision

    torch.manual_seed(0)
    features = torchvision.models.vgg16(weights=None).features
    for m in features:
        if isinstance(m, nn.ReLU):
            m.inplace = False  # the executor runs every op out of place; give every contender the same model
    return nn.Sequential(*features, nn.Flatten(), nn.LazyLinear(classes))


def build(batch: int, res: int) -> tuple[nn.Sequential, torch.Tensor, torch.Tensor]:
    model = vgg16_sequential()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 3, res, res, generator=g)
    model(x[:1])  # materialise the lazy head
    y = torch.randint(0, 10, (batch,), generator=g)
    return model, x, y


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    torch.set_num_threads(1)
    model, x, y = build(spec["batch"], spec["res"])
    kind = spec["kind"]
    out: dict[str, Any] = {}
    if kind.startswith("ours"):
        from remat.strategies import get_strategy
        from remat.torch.execute import ScheduleExecutor
        from remat.torch.extract import extract

        graph = extract(model, tuple(x.shape[1:]), x.shape[0], name="vgg16_features")
        result = get_strategy("approx_lp_deterministic")(graph, spec["budget"])
        if kind == "ours-ilp":
            # LP rounding's schedule (when it has one) as the MILP's first incumbent.
            warm = result.schedule if result.has_schedule else None
            result = get_strategy("ilp")(graph, spec["budget"], time_limit=spec["ilp_time_limit"], warm_start=warm)
        if not result.has_schedule:
            return {"status": f"no schedule ({result.status})"}
        ex = ScheduleExecutor(model, graph, result.schedule)
        out.update(pred=result.peak_memory - graph.constant_memory, solve_s=result.solve_time)

        def step(meter: bool = False) -> Any:
            return ex.step(x, y, measure_live=meter)
    elif kind == "compile":
        torch._functorch.config.activation_memory_budget = spec["fraction"]
        compiled = torch.compile(model, backend="aot_eager")

        def step(meter: bool = False) -> Any:
            F.cross_entropy(compiled(x), y).backward()
    else:
        segments = max(1, round(math.sqrt(len(model))))
        out["segments"] = segments

        def step(meter: bool = False) -> Any:
            if kind == "sqrt-n":
                from torch.utils.checkpoint import checkpoint_sequential

                z = checkpoint_sequential(model, segments, x, use_reentrant=False)
            else:
                z = model(x)
            F.cross_entropy(z, y).backward()

    def timed() -> float:
        model.zero_grad(set_to_none=False)
        start = time.perf_counter()
        step()
        return time.perf_counter() - start

    timed()  # warm-up: compiles, allocates the gradients
    times, rss = [], []
    for _ in range(spec["steps"]):
        t, peak = rss_peak(timed)
        times.append(t)
        rss.append(peak)
    out.update(time_s=min(times), rss=max(rss) if None not in rss else None, status="ok")
    if kind != "compile":
        model.zero_grad(set_to_none=False)
        existing = [*model.parameters(), *(p.grad for p in model.parameters()), x, y]
        if kind.startswith("ours"):
            out["live"] = step(meter=True).live_peak - ex._const_live
        else:
            with LiveTensorMeter(existing) as meter:
                step()
            out["live"] = meter.peak
    return out


def run_worker(spec: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, **MMAP_ENV}
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True, env=env
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"status": f"failed: {tail[:100]}"}
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--res", type=int, default=32)
    ap.add_argument("--budgets", type=float, nargs="+", default=[0.6, 0.8, 1.0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--ilp-time-limit", type=float, default=90.0)
    ap.add_argument("--worker")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    from remat.budget import no_recompute_peak
    from remat.torch.extract import extract

    model, x, _ = build(args.batch, args.res)
    graph = extract(model, tuple(x.shape[1:]), args.batch)
    const, peak0 = graph.constant_memory, no_recompute_peak(graph)
    base = {"batch": args.batch, "res": args.res, "steps": args.steps, "ilp_time_limit": args.ilp_time_limit}
    mib = 2.0**20
    rows: list[dict[str, Any]] = []

    def add(kind: str, budget: float | None, label: str, **extra: Any) -> dict[str, Any]:
        r = run_worker({**base, "kind": kind, "budget": budget, **extra})
        row = {"contender": kind, "budget": label, **r}
        rows.append(row)
        print(f"  {kind:12s} {label:>10s}: {r}", file=sys.stderr, flush=True)
        return row

    add("plain", None, "-")
    add("sqrt-n", None, "-")
    for f in args.budgets:
        label, b = f"{f:.2f}x", const + f * (peak0 - const)
        add("ours-ilp", b, label)
        add("ours-approx", b, label)
        add("compile", b, label, fraction=min(max(f, 0.0), 1.0))
    ref = {r["budget"]: r for r in rows if r["contender"] == "ours-ilp" and r.get("live")}
    for r in rows:
        mine = ref.get(r["budget"])
        if mine is None and ref and r.get("live"):
            mine = min(ref.values(), key=lambda o: abs(o["live"] - r["live"]))
        mine = mine or {}
        for key in ("live", "rss", "time_s"):
            a, b = r.get(key), mine.get(key)
            r[f"{key}/ours"] = a / b if a and b and a == a and b == b else None
    for r in rows:  # units only after every ratio is taken
        for key in ("live", "rss", "pred"):
            if r.get(key) is not None:
                r[key] = r[key] / mib
    print(
        f"\nVGG16 features + linear head, batch {args.batch}, {args.res}x{args.res}, CPU, torch {torch.__version__}; "
        f"activation budgets as fractions of the no-recompute activation peak {(peak0 - const) / mib:.1f} MiB "
        f"(constant part {const / mib:.1f} MiB excluded from every memory column, MiB)\n"
    )
    cols = ["contender", "budget", "pred", "live", "rss", "time_s", "live/ours", "rss/ours", "time_s/ours", "solve_s"]
    print(markdown_table(rows, cols))


if __name__ == "__main__":
    main()
