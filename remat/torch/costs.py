"""Cost models for extracted graphs (paper §4.10): static FLOPs and profiled seconds.

Both return a :class:`NodeCosts` for the forward pass of every graph node of a
traced model (:mod:`remat.torch.trace`), its vector-Jacobian product
(the node's backward) and the loss, measured at ``measured_batch``; the
extractor scales batch-proportional nodes linearly to the requested batch.

:func:`flops` walks the model on the ``meta`` device (nothing is allocated) and
counts each node's forward with ``torch.utils.flop_counter.FlopCounterMode``,
then its VJP (gradients w.r.t. its activation inputs that require grad and its
parameters) with the same counter. The counter only sees matrix products and
convolutions; where it sees nothing (ReLU, pooling, batch-norm, add, views, the
loss) a node is charged one FLOP per element of its largest input or output
tensor forward and twice its forward cost backward, so no node is free. The loss
node costs its forward plus its gradient: three FLOPs per output element unless
the counter sees more.

:func:`profile` times each node on a real device: the median of ``repeats`` runs
after ``warmup`` runs, of the node's forward (with autograd recording, as in
training) and of its VJP (``torch.autograd.grad`` with ``retain_graph``). On
CUDA it measures at the requested batch; on CPU at ``min(batch, cpu_batch)`` and
the extractor scales linearly to the requested batch (time per sample taken as
constant, which holds for the compute-bound layers that dominate). Times below
``TIME_FLOOR`` seconds (view ops, empty VJPs) are raised to it so that no node is
free to recompute. Profiles are cached as JSON under ``$REMAT_CACHE_DIR``
(default ``~/.cache/remat``), keyed by model name and structure fingerprint,
measured batch, resolution, dtype, loss, device name, torch version, repeats and
warm-up. A batch or resolution the device cannot run (estimated footprint above
the free memory, or an out-of-memory error) raises :class:`ProfileError`, or falls
back to :func:`flops` with a warning when ``fallback="flops"``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from remat.torch.inputs import InputSpec, random_values
from remat.torch.losses import Loss, example_target, loss_and_grads, resolve_loss
from remat.torch.trace import Trace
from remat.torch.tree import nbytes, tensors_of
from remat.torch.walk import NodeCall, WalkResult, walk

TIME_FLOOR = 1e-6  # seconds: a timer-resolution-sized cost for nodes that measure as nothing


class ProfileError(RuntimeError):
    """The device cannot profile this model at this batch/resolution; the message says why and what to do."""


@dataclass
class NodeCosts:
    """Per-node costs keyed by fx node name, measured at ``measured_batch``."""

    forward: dict[str, float]
    backward: dict[str, float]
    loss: float
    unit: str
    model: str
    device: str
    measured_batch: int
    note: str = ""


def device_name(device: torch.device | str) -> str:
    """A human-readable name of the device (GPU model or CPU model)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "meta":
        return "meta (static count)"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return "cpu: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu: " + (platform.processor() or platform.machine())


def _elementwise(call: NodeCall, out: Any) -> int:
    sizes = [t.numel() for v in call.inputs.values() for t in tensors_of(v)] + [t.numel() for t in tensors_of(out)]
    return max(sizes, default=1)


def _loss_wrt(res: WalkResult) -> list[torch.Tensor]:
    return [res.leaves[r] for r in res.refs(res.output) if res.leaves[r].requires_grad]


def flops(tr: Trace, batch_size: int, loss: Any = "cross_entropy", target: InputSpec | None = None) -> NodeCosts:
    """Forward and VJP FLOPs of every node at ``batch_size`` (see the module docstring for the floor rule)."""
    loss = resolve_loss(loss)
    fwd: dict[str, float] = {}
    bwd: dict[str, float] = {}

    def visit(call: NodeCall) -> Any:
        with FlopCounterMode(display=False) as counter:
            out = call.run()
        name = call.node.name
        fwd[name] = float(counter.get_total_flops() or _elementwise(call, out))
        outs = [t for t in tensors_of(out) if t.requires_grad]
        wrt = call.differentiable()
        if outs and wrt:
            with FlopCounterMode(display=False) as counter:
                torch.autograd.grad(outs, wrt, [torch.ones_like(o) for o in outs], allow_unused=True)
            bwd[name] = float(counter.get_total_flops() or 2 * fwd[name])
        else:
            bwd[name] = 0.0
        return out

    res = walk(tr, batch_size, "meta", visit)
    wrt = _loss_wrt(res)
    y = example_target(loss, res.output, target, batch_size)
    with FlopCounterMode(display=False) as counter:
        loss_and_grads(loss, res.output, y, wrt)
    loss_cost = float(counter.get_total_flops() or 3 * sum(t.numel() for t in tensors_of(res.output)))
    return NodeCosts(fwd, bwd, loss_cost, "flop", "flops", device_name("meta"), batch_size)


# ---------------------------------------------------------------------- profiling
def cache_dir() -> Path:
    return Path(os.environ.get("REMAT_CACHE_DIR") or Path.home() / ".cache" / "remat")


def _free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def footprint(tr: Trace, batch_size: int) -> int:
    """Bytes a profiling run needs at ``batch_size``: every activation, plus parameters and their gradients."""
    total = 0

    def visit(call: NodeCall) -> Any:
        nonlocal total
        out = call.run()
        total += nbytes(out)
        return out

    walk(tr, batch_size, "meta", visit)
    itemsize = torch.empty((), dtype=tr.dtype).element_size()
    return total + 2 * sum(p.numel() * itemsize for p in tr.gm.parameters())


def _timer(device: torch.device) -> Callable[[Callable[[], Any]], tuple[float, Any]]:
    def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        result = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start, result

    return timed


def _median_time(timed: Callable, fn: Callable[[], Any], repeats: int, warmup: int) -> tuple[float, Any]:
    result = None
    for _ in range(warmup):
        result = fn()
    times = []
    for _ in range(repeats):
        dt, result = timed(fn)
        times.append(dt)
    return max(statistics.median(times), TIME_FLOOR), result


def profile(
    tr: Trace,
    batch_size: int,
    loss: Any = "cross_entropy",
    target: InputSpec | None = None,
    *,
    inputs: list[Any] | None = None,
    device: torch.device | str | None = None,
    repeats: int = 5,
    warmup: int = 1,
    cpu_batch: int = 2,
    fallback: str | None = None,
    use_cache: bool = True,
) -> NodeCosts:
    """Seconds per node on ``device`` (default: CUDA if present, else CPU); see the module docstring.

    ``inputs`` are the sample's values (batched tensors are cut to the measured
    batch); without them, random inputs like the sample are used.
    """
    loss = resolve_loss(loss)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if repeats < 1 or warmup < 0:
        raise ProfileError(f"repeats must be >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    measured = batch_size if device.type == "cuda" else min(batch_size, cpu_batch)
    try:
        return _profile(tr, measured, loss, target, inputs, device, repeats, warmup, use_cache)
    except ProfileError as exc:
        if fallback != "flops":
            raise
        warnings.warn(f"{exc}; falling back to FLOPs as asked (fallback='flops')", stacklevel=2)
        costs = flops(tr, batch_size, loss, target)
        costs.note = f"profile failed, FLOPs used instead: {exc}"
        return costs


def _profile(
    tr: Trace, batch: int, loss: Loss, target: InputSpec | None, inputs: list[Any] | None, device: torch.device,
    repeats: int, warmup: int, use_cache: bool,
) -> NodeCosts:
    resolution = "x".join(map(str, next(s for s in tr.inputs if s.tensor).shape))
    if any(p.device.type == "meta" for p in tr.gm.parameters()):
        raise ProfileError(f"{tr.name} has parameters on the meta device: build it on a real device to profile it")
    dev_name = device_name(device)
    key = {
        "model": tr.name,
        "structure": tr.fingerprint(),
        "batch": batch,
        "resolution": resolution,
        "inputs": [s.to_dict() for s in tr.inputs],
        "target": target.to_dict() if target is not None else None,
        "dtype": str(tr.dtype),
        "loss": loss.name,
        "device": dev_name,
        "torch": torch.__version__,
        "repeats": repeats,
        "warmup": warmup,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    path = cache_dir() / f"profile-{tr.name}-b{batch}-{resolution}-{digest}.json"
    if use_cache and path.is_file():
        data = json.loads(path.read_text())
        if data.get("key") == key:
            return NodeCosts(**data["costs"])
    need, free = footprint(tr, batch), _free_bytes(device)
    if need > 0.8 * free:
        raise ProfileError(
            f"{dev_name} cannot profile {tr.name} at batch {batch} and resolution {resolution}: it needs about "
            f"{need / 2**30:.1f} GiB but {free / 2**30:.1f} GiB are free; use a smaller batch or resolution, or "
            f"cost_model='flops' (or fallback='flops')"
        )
    fwd: dict[str, float] = {}
    bwd: dict[str, float] = {}
    timed = _timer(device)

    def visit(call: NodeCall) -> Any:
        name = call.node.name
        fwd[name], out = _median_time(timed, call.run, repeats, warmup)
        outs = [t for t in tensors_of(out) if t.requires_grad]
        wrt = call.differentiable()
        bwd[name] = 0.0
        if outs and wrt:
            grads = [torch.randn_like(o) for o in outs]

            def vjp() -> Any:
                return torch.autograd.grad(outs, wrt, grads, retain_graph=True, allow_unused=True)

            bwd[name] = _median_time(timed, vjp, repeats, warmup)[0]
        return out

    gen = torch.Generator().manual_seed(0)
    if inputs is None:
        values = random_values(tr.inputs, batch, gen, device)
    else:
        values = [v[:batch].to(device) if isinstance(v, torch.Tensor) and s.batched else
                  (v.to(device) if isinstance(v, torch.Tensor) else v) for s, v in zip(tr.inputs, inputs, strict=True)]
    try:
        res = walk(tr, batch, device, visit, inputs=values, free=True)
        wrt = _loss_wrt(res)
        y = example_target(loss, res.output, target, batch, random=True, generator=gen)
        loss_time = _median_time(timed, lambda: loss_and_grads(loss, res.output, y, wrt), repeats, warmup)[0]
    except (torch.OutOfMemoryError, MemoryError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and not _is_oom(exc):
            raise
        raise ProfileError(
            f"{dev_name} ran out of memory profiling {tr.name} at batch {batch} and resolution {resolution} "
            f"({str(exc).splitlines()[0]}); use a smaller batch or resolution, or fallback='flops'"
        ) from exc
    costs = NodeCosts(fwd, bwd, loss_time, "seconds", "profile", dev_name, batch)
    if use_cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"key": key, "costs": asdict(costs)}, indent=1))
        tmp.replace(path)
    return costs


def _is_oom(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "out of memory" in text or "can't allocate memory" in text or "not enough memory" in text
