"""Activation patching over (layer, named block, position), in the style of ``transformer_lens.patching``.

One generic function, :func:`patch`, runs the model on the corrupted input and, for each index of
the axes asked for, writes the clean activation into that slice of the residual stream, then scores
the output with ``metric``. ``hook="resid_pre"`` patches ``h^l`` going into layer ``l``,
``"resid_post"`` the stream ``h^{l+1}`` coming out of it. Since the stream is concatenated onward, a
block patched at ``h^l`` stays patched in every later layer's copy of ``h^l``. The named shorthands
fix the axes: :func:`patch_blocks` (layer × block, all positions at once), :func:`patch_positions`
(layer × position, whole rows) and :func:`patch_block_positions` (layer × block × position).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..model.build import with_hooks
from ..model.disentangled import DisentangledModel
from ..stream import hook_name
from ..task import mse
from ..training.progress import progress_bar

HOOKS = ("resid_pre", "resid_post")
AXES = ("layer", "block", "pos")

#: ``metric(output (B, d, d)) -> scalar`` (a 0-d tensor or a float).
Metric = Callable[[Tensor], "Tensor | float"]


@dataclass(frozen=True)
class LabelledTensor:
    """A tensor whose axes have names (``dims``) and whose indices have labels, like a small xarray.

    ``attrs`` holds what the values are read against (for patching: the clean and corrupted metric).
    """

    values: Tensor
    dims: tuple[str, ...]
    labels: dict[str, tuple]
    attrs: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.dims) != self.values.ndim:
            raise ValueError(f"dims {self.dims} must name each of the {self.values.ndim} axes")
        for dim, size in zip(self.dims, self.values.shape):
            if len(self.labels.get(dim, ())) != size:
                raise ValueError(f"axis {dim!r} has {size} entries but labels {self.labels.get(dim)}")

    def sel(self, **index) -> Tensor | float:
        """Values at the given labels, e.g. ``result.sel(layer=1, block="L1.x")``."""
        values, dims = self.values, list(self.dims)
        for dim, label in index.items():
            if dim not in dims:
                raise ValueError(f"dimension must be one of {dims}, got {dim!r}")
            labels = self.labels[dim]
            if label not in labels:
                raise ValueError(f"{dim} label must be one of {list(labels)}, got {label!r}")
            axis = dims.index(dim)
            values = values.select(axis, labels.index(label))
            dims.pop(axis)
        return float(values) if values.ndim == 0 else values

    def to_dict(self) -> dict:
        """JSON-friendly: nested lists (NaN becomes ``None``), dims, labels and attrs."""
        def clean(x):
            return [clean(v) for v in x] if isinstance(x, list) else (None if x != x else x)

        return {"dims": list(self.dims), "labels": {k: list(v) for k, v in self.labels.items()},
                "values": clean(self.values.tolist()), "attrs": dict(self.attrs)}


@dataclass(frozen=True)
class Sites:
    """Which activations :func:`patch` tries: the hook point (``"resid_pre"`` or
    ``"resid_post"``) and the layers, named blocks and positions (``None``: all of them)."""

    hook: str = "resid_pre"
    layers: Sequence[int] | None = None
    blocks: Sequence[str] | None = None
    positions: Sequence[int] | None = None


EVERY_SITE = Sites()


def mse_to(Y: Tensor) -> Metric:
    """The note's loss against targets ``Y (B, d, d)``: the usual patching metric here."""
    return lambda out: mse(out, Y)


def position_labels(model: DisentangledModel) -> tuple[str, ...]:
    """One label per input row: ``P[0]``, …, ``Y[0]``, …, ``S[0]``, …"""
    return tuple(f"{seg.name}[{i}]" for seg in model.cfg.layout.segments for i in range(seg.n_rows))


def patch(model: DisentangledModel, clean_X: Tensor, corrupted_X: Tensor, metric: Metric,
          *, axes: Sequence[str] = AXES, sites: Sites = EVERY_SITE, normalize: bool = False,
          progress: bool = True) -> LabelledTensor:
    """Patch clean activations into the corrupted run, one slice at a time; score with ``metric``.

    ``axes`` (containing ``"layer"``) are the dimensions of the result; an axis left out is patched
    whole (no ``"block"``: all the ``blocks`` at once; no ``"pos"``: all the ``positions`` at once).
    ``sites`` (:class:`Sites`): the hook point, and the layers, blocks and positions tried (default:
    all). A block absent from a layer's stream gives NaN.
    ``normalize=True`` reports ``(value - corrupted) / (clean - corrupted)``: 1 means the patch
    restores the clean metric, 0 that it does nothing. ``progress``: a tqdm bar over the patches.
    A plain model is patched through its hooked twin (``model.build.with_hooks``).
    """
    model = with_hooks(model)
    hook, layers, blocks, positions = sites.hook, sites.layers, sites.blocks, sites.positions
    if hook not in HOOKS:
        raise ValueError(f"hook must be one of {HOOKS}, got {hook!r}")
    axes = tuple(axes)
    if "layer" not in axes or not set(axes) <= set(AXES) or len(set(axes)) != len(axes):
        raise ValueError(f"axes must include 'layer' and name distinct entries of {AXES}, got {axes}")
    L = model.cfg.n_layers
    layers = list(range(L)) if layers is None else list(layers)
    if not layers or not all(type(lay) is int and 0 <= lay < L for lay in layers):
        raise ValueError(f"layers must be integers in [0, {L - 1}], got {layers}")
    stream_layer = {lay: lay + (hook == "resid_post") for lay in layers}
    widest = max(stream_layer.values())
    blocks = model.stream.labels(widest) if blocks is None else list(blocks)
    for name in blocks:
        if name not in model.stream.labels(widest):
            raise ValueError(f"block {name!r} is not in the stream; known: {model.stream.labels(widest)}")
    T = model.cfg.T
    positions = list(range(T)) if positions is None else list(positions)
    if not positions or not all(type(p) is int and 0 <= p < T for p in positions):
        raise ValueError(f"positions must be integers in [0, {T - 1}], got {positions}")
    clean_X, corrupted_X = model.check_input(clean_X), model.check_input(corrupted_X)
    if clean_X.shape != corrupted_X.shape:
        raise ValueError(f"clean_X and corrupted_X must have the same shape, got "
                         f"{tuple(clean_X.shape)} and {tuple(corrupted_X.shape)}")

    with torch.no_grad():
        clean_out, cache = model.run_with_cache(
            clean_X, names_filter=[hook_name(hook, layer) for layer in layers],
            return_cache_object=False)
        clean_value = float(metric(clean_out))
        corrupted_value = float(metric(model(corrupted_X)))

    # an axis left out is patched whole: all its (given) entries at once
    block_axis = [[name] for name in blocks] if "block" in axes else [blocks]
    pos_axis = [[p] for p in positions] if "pos" in axes else [positions]
    values = torch.full((len(layers), len(block_axis), len(pos_axis)), float("nan"), dtype=torch.float64)
    bar = progress_bar(total=values.numel(), desc="patching", unit="patch", disable=not progress,
                       leave=False)
    for i, layer in enumerate(layers):
        clean_act = cache[hook_name(hook, layer)]
        present = set(model.stream.labels(stream_layer[layer]))
        for j, names in enumerate(block_axis):
            names = [name for name in names if name in present]
            if not names:
                bar.update(len(pos_axis))
                continue  # the block is not in this layer's stream yet: NaN
            features = torch.cat([torch.arange(model.stream.width(stream_layer[layer]))[
                model.stream.slice(name, stream_layer[layer])] for name in names])
            for k, rows in enumerate(pos_axis):
                index = (slice(None), torch.tensor(rows)[:, None], features[None, :])

                def put(act: Tensor, hook, index=index, clean_act=clean_act) -> Tensor:
                    act = act.clone()
                    act[index] = clean_act[index]
                    return act

                with torch.no_grad():
                    out = model.run_with_hooks(corrupted_X, fwd_hooks=[(hook_name(hook, layer), put)])
                values[i, j, k] = float(metric(out))
                bar.update()
    bar.close()
    if normalize:
        if not abs(clean_value - corrupted_value) > 1e-12 * max(abs(clean_value), abs(corrupted_value)):
            raise ValueError(f"normalize needs clean and corrupted metrics that differ, got {clean_value} "
                             f"and {corrupted_value} (a corruption that keeps the answer, e.g. same Y "
                             f"with another P, restores nothing; keep Y_P and change P instead)")
        values = (values - corrupted_value) / (clean_value - corrupted_value)
    keep = [0] + [1 + AXES[1:].index(a) for a in AXES[1:] if a in axes]
    values = values.squeeze(tuple(d for d in (1, 2) if d not in keep))
    order = [a for a in AXES if a in axes]
    values = values.permute([order.index(a) for a in axes])
    labels = {"layer": tuple(layers), "block": tuple(blocks),
              "pos": tuple(position_labels(model)[p] for p in positions)}
    return LabelledTensor(values, axes, {a: labels[a] for a in axes},
                          {"hook": hook, "clean": clean_value, "corrupted": corrupted_value,
                           "normalized": normalize})


def patch_blocks(model: DisentangledModel, clean_X: Tensor, corrupted_X: Tensor,
                 metric: Metric, **options) -> LabelledTensor:
    """Patch whole named blocks (all positions at once): ``(layer, block)``; ``options`` as
    :func:`patch`'s."""
    return patch(model, clean_X, corrupted_X, metric, axes=("layer", "block"), **options)


def patch_positions(model: DisentangledModel, clean_X: Tensor, corrupted_X: Tensor,
                    metric: Metric, **options) -> LabelledTensor:
    """Patch whole stream rows, one position at a time: ``(layer, pos)``; ``options`` as
    :func:`patch`'s."""
    return patch(model, clean_X, corrupted_X, metric, axes=("layer", "pos"), **options)


def patch_block_positions(model: DisentangledModel, clean_X: Tensor,
                          corrupted_X: Tensor, metric: Metric, **options) -> LabelledTensor:
    """Patch one named block at one position: ``(layer, block, pos)``; ``options`` as
    :func:`patch`'s."""
    return patch(model, clean_X, corrupted_X, metric, axes=("layer", "block", "pos"), **options)
