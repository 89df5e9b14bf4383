"""Ablations that read against the causal floor: "ablating the mask sends MSE from 1e-4 to 2.5 = floor".

Each ablation runs the model on one batch with and without an intervention and returns an
:class:`AblationResult` holding both MSEs and ``theory.causal_floor`` of the model's layout and
read-out (the best any causally masked model can do). The weights are never edited; only
:func:`ablate_mask` builds a second model. Interventions on ``h^0`` (the embedding), on the scores
(removed rows masked as keys) and on the read-out stream ``h^L``, and the mask's flip, run as plain
forwards that compute only what the read-out needs (``model.variants.forward_stacked``: on 3 layers
of 2 heads about 6× cheaper than a hooked run of every row); a block of a stream in between is
edited in a plain forward where ``blocks.{l}.hook_resid_pre`` would act. Either model (plain or
hooked) works, and no TransformerLens is needed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from ..maths.floors import causal_floor
from ..model.disentangled import DisentangledModel, embedding, grown
from ..model.variants import forward_stacked
from ..task import Batch, mse, sample_batch

SCRATCH_MODES = ("remove", "zero", "random", "fewer")
BLOCK_MODES = ("zero", "mean")


@dataclass(frozen=True)
class AblationResult:
    """MSE (the note's loss) before and after an ablation, and the causal floor to read it against."""

    name: str
    mse_before: float
    mse_after: float
    causal_floor: float
    description: str
    # A block ablation's target, as fields (None for the mask and scratch ablations): how
    # ("zero"/"mean"), which block of which stream h^layer, and the hook it acts at.
    how: str | None = None
    block: str | None = None
    layer: int | None = None
    hook: str | None = None
    #: Whether the ablated model runs under a causal mask, so the causal floor bounds it (every
    #: ablation of a causal model; of a bidirectional one, only the mask ablation)
    under_mask: bool = True

    @classmethod
    def from_dict(cls, data: dict) -> AblationResult:
        found = {k: data.get(k) for k in cls.__dataclass_fields__}
        found["under_mask"] = data.get("under_mask", True)  # records written before it was kept
        return cls(**found)

    @property
    def change(self) -> float:
        return self.mse_after - self.mse_before

    def __str__(self) -> str:
        floor = f" (causal floor {self.causal_floor:.3g})" if self.under_mask else ""
        return f"{self.name}: MSE {self.mse_before:.3g} → {self.mse_after:.3g}{floor}"

    def to_dict(self) -> dict:
        return {**{k: getattr(self, k) for k in self.__dataclass_fields__}, "text": str(self)}


def _batch(model: DisentangledModel, batch: Batch | None, n: int, seed: int) -> Batch:
    if batch is None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"n must be an integer >= 1, got {n!r}")
        generator = torch.Generator(device=model.device).manual_seed(seed)
        return sample_batch(model.cfg.layout, n, generator=generator, dtype=model.cfg.torch_dtype)
    if not isinstance(batch, Batch):
        raise ValueError(f"batch must be a Batch, got {type(batch).__name__}")
    if batch.layout != model.cfg.layout:
        raise ValueError(f"batch layout {batch.layout} differs from the model's {model.cfg.layout}")
    return batch.to(model.device, model.cfg.torch_dtype)


def _run(model: DisentangledModel, X: Tensor, layer: int,
         edit: Callable[[Tensor], Tensor]) -> Tensor:
    """The output ``(B, d, d)`` of ``model`` on ``X (B, T, d)``, a plain forward of its maths
    (``model.disentangled``) with ``edit`` applied to ``h^layer (B, T, D_layer)`` where its hook
    ``resid_hook(layer)`` would (the edit stays in the stream as it grows): no hooks needed."""
    mask = model.blocks[0].attn.mask if model.cfg.causal else None
    with torch.no_grad():
        h = embedding(X, model.pos)
        for index, block in enumerate(model.blocks):
            h = grown(edit(h) if index == layer else h, block.attn.A, mask)
        return h[:, model.unembed.rows] @ model.unembed.W_U


def _forward(model: DisentangledModel, X: Tensor, *, cfg=None, h0: Tensor | None = None,
             offsets: list[Tensor] | None = None, stream: bool = False) -> Tensor:
    """``model``'s output ``(B, d, d)`` on ``X (B, T, d)`` without hooks, computing only what the
    read-out needs; ``cfg``: another config of the same shapes (the other mask); ``h0``: an edited
    ``h^0 (B, T, D_0)``; ``offsets``: per layer a term ``(H_l, T, T)`` added to the scores;
    ``stream``: the read-out rows of ``h^L`` ``(B, d, D_L)`` instead of the output."""
    As = [block.attn.A.detach()[None] for block in model.blocks]
    W_U = model.unembed.W_U.detach()
    W_U = torch.ones(W_U.shape[0], 1, dtype=W_U.dtype, device=W_U.device) if stream else W_U
    with torch.no_grad():
        return forward_stacked(cfg or model.cfg, As, W_U[None], X, h0=h0, readout=not stream,
                               offsets=None if offsets is None else [o[None] for o in offsets])[0]


def clean_mse(model: DisentangledModel, batch: Batch) -> float:
    """The model's own MSE on ``batch``: what every ablation is read against."""
    return float(mse(_forward(model, batch.X), batch.Y))


def _result(name: str, model: DisentangledModel, batch: Batch, after: Tensor,
            description: str, before: float | None = None, under_mask: bool | None = None,
            **target) -> AblationResult:
    before = clean_mse(model, batch) if before is None else before
    floor = causal_floor(model.cfg.layout, model.cfg.readout)
    under_mask = model.cfg.causal if under_mask is None else under_mask
    return AblationResult(name, before, float(mse(after, batch.Y)), floor, description, **target,
                          under_mask=under_mask)


# -- the mask ------------------------------------------------------------------------------------------
def flip_mask(model: DisentangledModel) -> DisentangledModel:
    """The same weights with the other attention direction (causal ↔ bidirectional)."""
    flipped = "bidirectional" if model.cfg.causal else "causal"
    twin = type(model)(replace(model.cfg, attention_dir=flipped)).to(model.device)
    twin.load_state_dict(model.state_dict())
    return twin


def ablate_mask(model: DisentangledModel, batch: Batch | None = None, *, n: int = 512,
                seed: int = 0,
                before: float | None = None) -> tuple[DisentangledModel, AblationResult]:
    """Flip the attention direction; returns the flipped model and the MSE change.

    A bidirectional construction under a causal mask can do no better than the causal floor
    (Theorem 1): reading the P rows, nothing of ``Y`` is visible, so the floor is ``d/4``.
    """
    twin = flip_mask(model)
    return twin, _mask_result(model, _batch(model, batch, n, seed), before)


def _mask_result(model: DisentangledModel, batch: Batch,
                 before: float | None) -> AblationResult:
    """:func:`ablate_mask`'s result, without building the flipped model."""
    flipped = replace(model.cfg, attention_dir="bidirectional" if model.cfg.causal else "causal")
    desc = f"attention {model.cfg.attention_dir} → {flipped.attention_dir}, same weights"
    return _result("ablate mask", model, batch, _forward(model, batch.X, cfg=flipped), desc, before,
                   under_mask=True)  # a causal model's floor is what it ran against


# -- scratch rows --------------------------------------------------------------------------------------
def scratch_rows(model: DisentangledModel) -> list[int]:
    """Input positions of every scratch (kind ``S``) row, in order."""
    layout = model.cfg.layout
    rows = [r for seg in layout.segments if seg.kind == "S"
            for r in range(layout.rows(seg.name).start, layout.rows(seg.name).stop)]
    if not rows:
        raise ValueError(f"the layout {layout} has no scratch (S) segment to ablate")
    return rows


def ablate_scratch(model: DisentangledModel, mode: str = "remove", *, k: int | None = None,
                   batch: Batch | None = None, n: int = 512, seed: int = 0,
                   before: float | None = None) -> AblationResult:
    """Ablate the scratch rows ``S`` (Theorem 3's extra tokens).

    - ``"remove"``: no scratch rows. Every layer's attention masks them as keys (``-inf`` scores),
      which is exactly deleting them when ``S`` is the last segment (the other rows keep their
      positions). A read-out row that no longer exists cannot predict: it is scored as predicting
      0.5, the best guess knowing nothing (cost ``d/4`` per row).
    - ``"fewer"``: keep the first ``k`` of the ``n`` scratch rows, remove the rest as above.
    - ``"zero"``: the rows stay but their embedding (content and one-hot position) is zero.
    - ``"random"``: the rows' content is replaced by random binary rows (seeded by ``seed``).
    """
    if mode not in SCRATCH_MODES:
        raise ValueError(f"mode must be one of {SCRATCH_MODES}, got {mode!r}")
    batch = _batch(model, batch, n, seed)
    rows = scratch_rows(model)
    if mode == "fewer":
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= len(rows):
            raise ValueError(f"k must be an integer in [0, {len(rows)}] for mode 'fewer', got {k!r}")
    elif k is not None:
        raise ValueError(f"k is only for mode 'fewer', got k={k!r} with mode {mode!r}")
    if mode in ("remove", "fewer"):
        gone = rows[k:] if mode == "fewer" else rows
        out = _without_rows(model, batch.X, gone)
        kept = len(rows) - len(gone)
        desc = (f"keep {kept} of {len(rows)} scratch rows" if mode == "fewer" else
                f"remove the {len(rows)} scratch rows") + (
                "; removed rows are masked as keys and removed read-out rows predict 0.5")
        return _result(f"scratch {mode}" + (f" (k={k})" if mode == "fewer" else ""), model, batch,
                       out, desc, before)
    index = torch.tensor(rows, device=model.device)
    if mode == "zero":
        h0 = embedding(batch.X, model.pos)
        h0[:, index] = 0.0  # content and position
        return _result("scratch zero", model, batch, _forward(model, batch.X, h0=h0),
                       f"the {len(rows)} scratch rows' embedding (content and position) set to 0",
                       before)
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randint(0, 2, (len(batch), len(rows), model.cfg.d), generator=generator)
    X = batch.X.clone()
    X[:, index] = noise.to(X)
    out = _forward(model, X)
    return _result("scratch random", model, batch, out,
                   f"the {len(rows)} scratch rows' content replaced by random binary rows", before)


def _without_rows(model: DisentangledModel, X: Tensor, gone: list[int]) -> Tensor:
    """Outputs with the rows ``gone`` removed: masked as keys in every layer; read-out rows among
    them predict 0.5."""
    if not gone:
        return _forward(model, X)
    T = model.cfg.T
    key_gone = torch.zeros(T, dtype=torch.bool, device=model.device)
    key_gone[gone] = True
    # -inf on the removed keys; a removed query row keeps itself, so that it sees some key (a row
    # of -inf would give NaN, which a zero attention weight still carries); it is never read
    hidden = key_gone[None, :] & torch.eye(T, dtype=torch.bool, device=model.device).logical_not()
    term = torch.zeros(T, T, dtype=model.cfg.torch_dtype, device=model.device)
    term = term.masked_fill(hidden, float("-inf"))
    out = _forward(model, X, offsets=[term.expand(h, T, T) for h in model.cfg.heads]).clone()
    rows = model.cfg.readout_rows
    lost = [r - rows.start for r in gone if rows.start <= r < rows.stop]
    out[:, lost] = 0.5
    return out


# -- named blocks ----------------------------------------------------------------------------------------
def ablate_block(model: DisentangledModel, name: str, layer: int, how: str = "zero", *,
                 batch: Batch | None = None, n: int = 512, seed: int = 0,
                 before: float | None = None) -> AblationResult:
    """Zero- or mean-ablate the named block ``name`` of ``h^layer`` at every position.

    ``"mean"`` replaces the block by its mean over the batch, position by position. The stream is
    concatenated onward, so every later layer sees the ablated block too.
    """
    if how not in BLOCK_MODES:
        raise ValueError(f"how must be one of {BLOCK_MODES}, got {how!r}")
    return _ablate_block(model, name, layer, how, _batch(model, batch, n, seed), before)


def _ablate_block(model: DisentangledModel, name: str, layer: int, how: str,
                  batch: Batch, before: float | None, final: Tensor | None = None) -> AblationResult:
    """:func:`ablate_block` on a checked batch. A block of ``h^0`` is ablated in the embedding; a
    block of ``h^L`` in the read-out rows of ``h^L`` (``final (B, d, D_L)``, or computed), which
    only ``W_U`` reads (the mean is per position, so the other rows do not matter)."""
    stream_hook = model.stream.resid_hook(layer)  # carries h^layer
    features = model.stream.slice(name, layer)

    def ablate(act: Tensor, hook=None) -> Tensor:  # (B, T or R, D_layer)
        act = act.clone()
        block = act[..., features]
        act[..., features] = 0.0 if how == "zero" else block.mean(0, keepdim=True).expand_as(block)
        return act

    if layer == model.cfg.n_layers:
        read = _forward(model, batch.X, stream=True) if final is None else final
        with torch.no_grad():
            out = ablate(read) @ model.unembed.W_U
    elif layer == 0:
        out = _forward(model, batch.X, h0=ablate(embedding(batch.X, model.pos)))
    else:
        out = _run(model, batch.X, layer, ablate)
    where = "the input stream h^0" if layer == 0 else f"h^{layer}, the stream after layer {layer}"
    return _result(f"{how}-ablate {name} at h^{layer}", model, batch, out,
                   f"{how} the block {name} of {where}, at every position ({stream_hook})", before,
                   how=how, block=name, layer=layer, hook=stream_hook)


# -- the standard table -----------------------------------------------------------------------------------
def read_blocks(model: DisentangledModel) -> list[str]:
    """Blocks of the read-out stream that ``W_U`` reads (rows with any nonzero weight)."""
    W_U = model.unembed.W_U.detach()
    L = model.cfg.n_layers
    return [b.name for b in model.stream.blocks(L) if bool(W_U[b.slice].abs().max() > 0)]


def standard_ablations(model: DisentangledModel, batch: Batch | None = None, *,
                       n: int = 512, seed: int = 0, before: float | None = None,
                       final: Tensor | None = None) -> list[AblationResult]:
    """The mask, every scratch mode (when the layout has ``S``), the token block ``x`` of ``h^0``
    and each block ``W_U`` reads, zero-ablated. The clean run is computed once for all of them
    (``before``: its MSE on ``batch``, when already known); the read-out blocks are ablated in
    the read-out rows of its ``h^L`` ``(B, d, D_L)`` (``final``, when already computed:
    ``model.variants.model_run``), computed once."""
    batch = _batch(model, batch, n, seed)
    before = clean_mse(model, batch) if before is None else before
    out = [_mask_result(model, batch, before)]
    if any(seg.kind == "S" for seg in model.cfg.layout.segments):
        n_scratch = len(scratch_rows(model))
        for mode in SCRATCH_MODES:
            k = n_scratch // 2 if mode == "fewer" else None
            out.append(ablate_scratch(model, mode, k=k, batch=batch, seed=seed, before=before))
    out.append(_ablate_block(model, "x", 0, "zero", batch, before))
    final = _forward(model, batch.X, stream=True) if final is None else final
    for name in read_blocks(model):
        out.append(_ablate_block(model, name, model.cfg.n_layers, "zero", batch, before, final))
    return out
