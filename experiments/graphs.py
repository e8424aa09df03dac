"""Where graphs come from: a reference graph, a graph file, or a zoo model through a front end.

A graph spec is a reference short name (``vgg16``), a path to a graph JSON, or
``model:<name>`` for a zoo model extracted with the settings of
``conf/model/<name>.yaml``.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from experiments.common import PROJECT_ROOT, InputError, MissingAPIError, project_path

COST_MODELS = ("flops", "profile", "reference")
FRONTENDS = ("torch", "keras")


def model_config(name: str) -> dict[str, Any]:
    """The settings of ``conf/model/<name>.yaml`` as a plain dict."""
    from omegaconf import OmegaConf

    path = PROJECT_ROOT / "conf" / "model" / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
        raise InputError(f"unknown model {name!r}: pick one of {known} (conf/model/)")
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)  # type: ignore[return-value]


def load_spec(spec: str, cost_model: str = "flops", frontend: str = "torch",
              results_dir: str | Path = "results") -> Any:
    """The DFGraph a graph spec names (see the module docstring)."""
    spec = str(spec)
    if spec.startswith("model:"):
        return model_graph(model_config(spec.split(":", 1)[1]), cost_model, frontend, results_dir)
    from remat.graph.reference import resolve_graph

    return resolve_graph(spec)


def model_graph(model: dict[str, Any], cost_model: str, frontend: str = "torch",
                results_dir: str | Path = "results") -> Any:
    """Extract a zoo model's training graph with the given cost model.

    ``reference`` returns the model's reference graph (V100-profiled costs from
    the Checkmate export, at the export's batch size); ``profile`` uses the cost
    file the ``profile`` experiment saved when there is one, else profiles now.
    """
    if cost_model not in COST_MODELS:
        raise InputError(f"unknown cost_model {cost_model!r}: pick one of {', '.join(COST_MODELS)}")
    if frontend not in FRONTENDS:
        raise InputError(f"unknown frontend {frontend!r}: pick one of {', '.join(FRONTENDS)}")
    name = model["name"]
    if cost_model == "reference":
        ref = model.get("reference_graph")
        if not ref:
            raise InputError(
                f"model {name!r} has no reference graph with profiled costs: use cost_model=flops or "
                f"cost_model=profile (reference costs exist for vgg16, vgg19, mobilenet, resnet50, fcn8, segnet, unet)"
            )
        from remat.graph.reference import load_reference_graph

        return load_reference_graph(ref)
    if cost_model == "profile":
        saved = profile_path(model, results_dir)
        if saved.is_file():
            from remat.graph import load_graph

            return load_graph(saved)
    if frontend == "keras":
        return _keras_graph(model, cost_model)
    return _torch_graph(model, cost_model)


def profile_path(model: dict[str, Any], results_dir: str | Path = "results", device: str | None = None) -> Path:
    """Where the ``profile`` experiment saves a model's profiled graph (cost file)."""
    size = f"t{int(model['seq_len'])}" if "seq_len" in model else "x".join(map(str, _resolution(model)))
    dev = device or current_device()
    return project_path(results_dir) / "profiles" / f"{model['name']}_{size}_b{model['batch_size']}_{dev}.json"


def current_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _resolution(model: dict[str, Any]) -> tuple[int, int]:
    res = model.get("resolution", 224)
    if isinstance(res, (list, tuple)):
        return int(res[0]), int(res[1])
    return int(res), int(res)


def input_shape(model: dict[str, Any]) -> tuple[int, ...]:
    """The per-sample input shape a model config describes: ``(seq_len,)`` for sequences, else ``(C, H, W)``."""
    if "seq_len" in model:
        return (int(model["seq_len"]),)
    h, w = _resolution(model)
    return (int(model.get("channels", 3)), h, w)


def _torch_graph(model: dict[str, Any], cost_model: str) -> Any:
    try:
        from remat.models import zoo_graph
    except ImportError:
        raise MissingAPIError(
            "remat.models.zoo_graph is not available yet (model zoo, issue 4): use graph=<reference name or path>"
        ) from None
    kwargs = dict(model.get("kwargs") or {})
    kwargs.pop("device", None)  # static FLOPs extract on the meta device anyway
    return zoo_graph(model["name"], batch_size=int(model["batch_size"]), input_shape=input_shape(model),
                     cost_model=cost_model, model_kwargs=kwargs)


def _keras_graph(model: dict[str, Any], cost_model: str) -> Any:
    try:
        from remat.keras.extract import extract_zoo_model
    except ImportError as exc:
        raise MissingAPIError(
            f"remat.keras.extract_zoo_model is not available ({exc}); it needs the keras extra "
            f"(pip install -e '.[keras]') and the Keras front end (issue 8): use frontend=torch"
        ) from None
    h, w = _resolution(model)
    options = {"resolution": (h, w), "input_shape": (h, w, int(model.get("channels", 3))), "cost_model": cost_model}
    return extract_zoo_model(model["name"], int(model["batch_size"]), **_accepted(extract_zoo_model, options))


def _accepted(fn: Any, options: dict[str, Any]) -> dict[str, Any]:
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return options
    return {k: v for k, v in options.items() if k in params}
