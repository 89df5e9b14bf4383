"""Ablations that read against the causal floor: "ablating the mask sends MSE from 1e-4 to 2.5 = floor".

Each ablation runs the model on one batch with and without an intervention and returns an
:class:`AblationResult` holding both MSEs and ``theory.causal_floor`` of the model's layout and
read-out (the best any causally masked model can do). Interventions edit a plain forward of the
model's maths (``model.disentangled``) where its hooks would (``hook_embed`` and ``hook_pos_embed``:
``h^0``; ``blocks.{l}.attn.hook_attn_scores``; the residual streams), so the weights are never edited,
either model (plain or hooked) works, and no TransformerLens is needed; only :func:`ablate_mask`
builds a second model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from ..maths.floors import causal_floor
from ..model.disentangled import DisentangledModel, attention_scores
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

    @classmethod
    def from_dict(cls, data: dict) -> AblationResult:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})

    @property
    def change(self) -> float:
        return self.mse_after - self.mse_before

    def __str__(self) -> str:
        return (f"{self.name}: MSE {self.mse_before:.3g} → {self.mse_after:.3g} "
                f"(causal floor {self.causal_floor:.3g})")

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


Edit = Callable[[Tensor], Tensor]


def _run(model: DisentangledModel, X: Tensor, *, embed: Edit | None = None,
         scores: Edit | None = None, stream: tuple[int, Edit] | None = None) -> Tensor:
    """The output ``(B, d, d)`` of ``model`` on ``X (B, T, d)``, a plain forward with edits:
    ``embed`` of ``h^0 (B, T, D_0)``, ``scores`` of every layer's masked scores ``(B, H, T, T)``,
    ``stream = (layer, edit)`` of ``h^layer (B, T, D_layer)`` (kept as the stream grows)."""
    mask = model.blocks[0].attn.mask if model.cfg.causal else None
    at, edit = stream if stream is not None else (-1, None)
    with torch.no_grad():
        h = torch.cat([X, model.pos.expand(X.shape[0], -1, -1)], dim=-1)  # h^0 = [X, I_T]
        h = embed(h) if embed is not None else h
        for layer, block in enumerate(model.blocks):
            h = edit(h) if layer == at else h
            s = attention_scores(h, block.attn.A, mask)
            pattern = torch.softmax(s if scores is None else scores(s), dim=-1)  # (B, H, T, T)
            h = torch.cat([h, (pattern @ h.unsqueeze(1)).transpose(1, 2).flatten(start_dim=2)], -1)
        h = edit(h) if at == model.cfg.n_layers else h
        return h[:, model.unembed.rows] @ model.unembed.W_U


def clean_mse(model: DisentangledModel, batch: Batch) -> float:
    """The model's own MSE on ``batch``: what every ablation is read against."""
    return float(mse(_run(model, batch.X), batch.Y))


def _result(name: str, model: DisentangledModel, batch: Batch, after: Tensor,
            description: str, before: float | None = None, **target) -> AblationResult:
    before = clean_mse(model, batch) if before is None else before
    floor = causal_floor(model.cfg.layout, model.cfg.readout)
    return AblationResult(name, before, float(mse(after, batch.Y)), floor, description, **target)


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
    batch = _batch(model, batch, n, seed)
    twin = flip_mask(model)
    desc = f"attention {model.cfg.attention_dir} → {twin.cfg.attention_dir}, same weights"
    return twin, _result("ablate mask", model, batch, _run(twin, batch.X), desc, before)


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
        def zero(h: Tensor) -> Tensor:  # content and position: the whole row of h^0
            h = h.clone()
            h[:, index] = 0.0
            return h

        out = _run(model, batch.X, embed=zero)
        return _result("scratch zero", model, batch, out,
                       f"the {len(rows)} scratch rows' embedding (content and position) set to 0",
                       before)
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randint(0, 2, (len(batch), len(rows), model.cfg.d), generator=generator)

    def randomise(h: Tensor) -> Tensor:  # the content block x of h^0
        h = h.clone()
        h[:, index, :model.cfg.d] = noise.to(h)
        return h

    out = _run(model, batch.X, embed=randomise)
    return _result("scratch random", model, batch, out,
                   f"the {len(rows)} scratch rows' content replaced by random binary rows", before)


def _without_rows(model: DisentangledModel, X: Tensor, gone: list[int]) -> Tensor:
    """Outputs with the rows ``gone`` removed: masked as keys in every layer; read-out rows among
    them predict 0.5."""
    if not gone:
        return _run(model, X)
    T = model.cfg.T
    key_gone = torch.zeros(T, dtype=torch.bool, device=model.device)
    key_gone[gone] = True

    def mask_keys(scores: Tensor) -> Tensor:  # (B, H, T, T)
        scores = scores.masked_fill(key_gone, float("-inf"))
        # a removed query row may now see no key at all; give it a finite row (it is never read)
        return scores.masked_fill(key_gone[:, None] & key_gone[None, :].logical_not(), 0.0)

    out = _run(model, X, scores=mask_keys)
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
    """:func:`ablate_block` on a checked batch. ``final``: the read-out stream ``h^L (B, T, D_L)``
    of the clean run; a block of ``h^L`` is then ablated in it and read out by ``W_U`` (only
    ``W_U`` reads ``h^L``: the hooked run's output, without running the layers again)."""
    stream_hook = model.stream.resid_hook(layer)  # carries h^layer
    features = model.stream.slice(name, layer)

    def ablate(act: Tensor) -> Tensor:  # (B, T, D_layer)
        act = act.clone()
        block = act[..., features]
        act[..., features] = 0.0 if how == "zero" else block.mean(0, keepdim=True).expand_as(block)
        return act

    if final is not None and layer == model.cfg.n_layers:
        with torch.no_grad():
            out = ablate(final)[:, model.unembed.rows] @ model.unembed.W_U
    else:
        out = _run(model, batch.X, stream=(layer, ablate))
    return _result(f"{how}-ablate {name} at h^{layer}", model, batch, out,
                   f"{how} the block {name} of h^{layer} at every position ({stream_hook})", before,
                   how=how, block=name, layer=layer, hook=stream_hook)


# -- the standard table -----------------------------------------------------------------------------------
def read_blocks(model: DisentangledModel) -> list[str]:
    """Blocks of the read-out stream that ``W_U`` reads (rows with any nonzero weight)."""
    W_U = model.unembed.W_U.detach()
    L = model.cfg.n_layers
    return [b.name for b in model.stream.blocks(L) if bool(W_U[b.slice].abs().max() > 0)]


def standard_ablations(model: DisentangledModel, batch: Batch | None = None, *,
                       n: int = 512, seed: int = 0, before: float | None = None) -> list[AblationResult]:
    """The mask, every scratch mode (when the layout has ``S``), the token block ``x`` of ``h^0``
    and each block ``W_U`` reads, zero-ablated. The clean run is computed once for all of them
    (``before``: its MSE on ``batch``, when already known); the read-out blocks are ablated in
    its read-out stream."""
    batch = _batch(model, batch, n, seed)
    before = clean_mse(model, batch) if before is None else before
    out = [ablate_mask(model, batch, before=before)[1]]
    if any(seg.kind == "S" for seg in model.cfg.layout.segments):
        n_scratch = len(scratch_rows(model))
        for mode in SCRATCH_MODES:
            k = n_scratch // 2 if mode == "fewer" else None
            out.append(ablate_scratch(model, mode, k=k, batch=batch, seed=seed, before=before))
    out.append(_ablate_block(model, "x", 0, "zero", batch, before))
    with torch.no_grad():
        final = model.residual_streams(batch.X, check_input=False)[-1]
    for name in read_blocks(model):
        out.append(_ablate_block(model, name, model.cfg.n_layers, "zero", batch, before, final))
    return out
