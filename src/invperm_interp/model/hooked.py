"""The hooked disentangled transformer (the note's Section 2; docs/design.md section 1).

The maths and the weights are :mod:`.disentangled`'s; this adds a TransformerLens ``HookPoint`` at
every intermediate, so ``run_with_cache``, ``run_with_hooks`` and ``hooks()`` work unchanged. Where
an in-place edit in a hook could reach another tensor (the caller's ``X``, a buffer, a tensor
autograd saved), the hook gets a copy.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Literal, TypeVar, get_args, overload

import torch
from jaxtyping import Float
from torch import Tensor, nn
from transformer_lens import ActivationCache, HookedRootModule
from transformer_lens.hook_points import HookPoint

from ..config import DTYPES, ModelConfig
from ..errors import check_choice
from ..runs import checkpoint as ckpt
from ..runs.directory import RunDir, RunWeights
from ..stream import Stream, absent_name_hint
from ..task import answer, mse
from . import tokens
from .build import model_class
from .cache import StreamCache
from .disentangled import (
    AttentionWeights,
    DisentangledModel,
    UnembedWeights,
    check_last,
    check_model_fits,
    init_weights,
    queries,
    scores_of,
)

ReturnType = Literal["output", "loss", "both"]  # what forward returns, as in TransformerLens
RETURN_TYPES = get_args(ReturnType)


def _missing(owner: nn.Module, name: str) -> AttributeError:
    """The ``AttributeError`` for ``name``, pointing at what to use when it is a TransformerLens name
    this model lacks (``W_Q``, ``hook_result``)."""
    hint = absent_name_hint(name)
    where = f"{type(owner).__name__!r} object has no attribute {name!r}"
    return AttributeError(f"{where}: {hint}" if hint else where)


class CopyingHookPoint(HookPoint):
    """A ``HookPoint`` that hands its hooks a copy, so an in-place edit cannot reach the tensor it
    was given (the caller's ``X``, a buffer, a tensor autograd saved). Without hooks it copies
    nothing: the unhooked forward pass is unchanged."""

    def forward(self, x: Tensor) -> Tensor:
        return x.clone() if self._forward_hooks else x


class DisentangledAttention(AttentionWeights):
    """``H`` heads of bilinear attention ``softmax(h A_k hᵀ) h`` over the whole stream ``h^l``: the
    queries are ``h A_k``, the keys and the values are ``h`` itself (no ``W_K``, ``W_V``), hooked
    apart so that a key can be patched without its value."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.hook_q = HookPoint()  # (B, T, H, D_l): h A_k
        self.hook_k = CopyingHookPoint()  # (B, T, H, D_l): h for every head (a view of the stream)
        self.hook_v = CopyingHookPoint()  # (B, T, H, D_l): h for every head (a view of the stream)
        self.hook_attn_scores = HookPoint()  # (B, H, T, T), -inf above the diagonal when causal
        self.hook_pattern = CopyingHookPoint()  # (B, H, T, T); softmax saves its output
        self.hook_z = HookPoint()  # (B, T, H, D_l)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            raise _missing(self, name) from None

    def forward(self, h: Float[Tensor, "batch pos d_l"]) -> Float[Tensor, "batch pos head d_l"]:
        """``h (B, T, D_l)`` → ``z (B, T, H, D_l)``."""
        q = self.hook_q(queries(h, self.A))  # (B, T, H, D)
        shared = h.unsqueeze(2).expand(-1, -1, q.shape[2], -1)  # (B, T, H, D)
        k, v = self.hook_k(shared), self.hook_v(shared)
        scores = self.hook_attn_scores(scores_of(q, k, self.mask if self.causal else None))
        pattern = self.hook_pattern(torch.softmax(scores, dim=-1))  # (B, H, T, T)
        z = (pattern @ v.transpose(1, 2)).transpose(1, 2)  # (B, H, T, D) → (B, T, H, D)
        return self.hook_z(z)


class DisentangledBlock(nn.Module):
    """One layer: attention over ``h^l``, its heads concatenated onto the stream."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.hook_resid_pre = HookPoint()  # (B, T, D_l)
        self.attn = DisentangledAttention(cfg, layer)
        self.hook_attn_out = CopyingHookPoint()  # (B, T, H·D_l): [z_1, …, z_H], what the layer adds
        self.hook_resid_post = HookPoint()  # (B, T, D_{l+1})

    def forward(self, h: Float[Tensor, "batch pos d_l"]) -> Float[Tensor, "batch pos d_next"]:
        h = self.hook_resid_pre(h)
        attn_out = self.hook_attn_out(self.attn(h).flatten(start_dim=2))  # (B, T, H·D_l)
        return self.hook_resid_post(torch.cat([h, attn_out], dim=-1))


class Unembed(UnembedWeights):
    """``out = h^L[rows] W_U`` with ``W_U (D_L, d)``."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.hook_readout = CopyingHookPoint()  # (B, d, D_L): read-out rows, a view of h^L

    def forward(self, h: Float[Tensor, "batch pos d_L"]) -> Float[Tensor, "batch rows d"]:
        return self.hook_readout(h[:, self.rows]) @ self.W_U


class TaskForward:
    """``forward`` by ``return_type``, shared by the hooked models, which define ``check_input``
    and ``predict`` (``X (B, T, d)`` → ``(B, d, d)``). Overloaded on ``return_type`` as in
    TransformerLens, so a type checker knows that ``"both"`` gives a pair."""

    if TYPE_CHECKING:  # what each model defines
        cfg: ModelConfig

        def check_input(self, X: Tensor) -> Tensor: ...

        def predict(self, X: Tensor) -> Tensor: ...

    @overload
    def forward(self, input: Tensor, Y: Tensor | None = ...,
                return_type: Literal["output", "loss"] = ..., check_input: bool = ...) -> Tensor: ...

    @overload
    def forward(self, input: Tensor, Y: Tensor | None, return_type: Literal["both"],
                check_input: bool = ...) -> tuple[Tensor, Tensor]: ...

    @overload
    def forward(self, input: Tensor, Y: Tensor | None = ..., *, return_type: Literal["both"],
                check_input: bool = ...) -> tuple[Tensor, Tensor]: ...

    def forward(self, input: Tensor, Y: Tensor | None = None, return_type: ReturnType = "output",
                check_input: bool = True) -> Tensor | tuple[Tensor, Tensor]:
        """``X (B, T, d)``, or token ids ``(B, T)`` (:mod:`.tokens`), → by ``return_type``:
        ``"output"``, the predicted ``Y`` ``(B, d, d)``; ``"loss"``, the note's loss against ``Y``
        (default: the answer the input asks for, ``Pᵀ Y_P`` read off its rows), a scalar; ``"both"``.

        ``check_input=False`` skips the shape/finiteness checks (the training loop uses it on data it
        drew itself; the finiteness check synchronises a GPU).
        """
        check_choice("return_type", return_type, RETURN_TYPES)
        X = self.check_input(input) if check_input else input
        out = self.predict(X)
        if return_type == "output":
            return out
        if Y is None:
            Y = answer(self.cfg.layout, X)
        elif not isinstance(Y, Tensor) or Y.shape != out.shape:
            shape = tuple(Y.shape) if isinstance(Y, Tensor) else type(Y).__name__
            raise ValueError(f"Y must be a tensor of shape {tuple(out.shape)}, got {shape}")
        loss = mse(out, Y)
        return loss if return_type == "loss" else (out, loss)


Hooked = TypeVar("Hooked", bound="FromWeights")


class FromWeights:
    """The hooked models' constructors from weights: a run directory, a plain model, or weights
    read by ``RunDir.read_weights``. Each model's ``__init__(cfg, seed)`` builds the shape."""

    @classmethod
    def from_run(cls: type[Hooked], run_dir: str, step: int | None = None) -> Hooked:
        """The model a training run wrote to ``run_dir`` (a str or Path): its final weights, or
        checkpoint ``step``. Read with safetensors only (nothing is unpickled)."""
        return cls.from_weights(RunDir(run_dir).read_weights(step))

    @classmethod
    def from_module(cls: type[Hooked], module: nn.Module) -> Hooked:
        """The hooked model of ``module``'s weights (the plain model of the same architecture, or
        another hooked model), copied, on ``module``'s device."""
        model = cls(replace(module.cfg, device="cpu"), seed=0)
        model.load_state_dict(module.state_dict())
        return model.to(next(module.parameters()).device)

    @classmethod
    def from_weights(cls: type[Hooked], weights: RunWeights) -> Hooked:
        """The model of ``weights`` (``RunDir.read_weights``), on the CPU."""
        model = cls(weights.model_cfg, seed=0)
        ckpt.load_model_tensors(model, weights.tensors, weights.path)
        return model


def hooked_model(module: nn.Module) -> nn.Module:
    """The hooked model of a plain (or hooked) model's weights, copied, on its device: the hooked
    class of its architecture (``model.build.model_class``), whichever that is."""
    return model_class(module.cfg, "hooked").from_module(module)


class HookedDisentangledTransformer(DisentangledModel, FromWeights, TaskForward, HookedRootModule):
    """Attention-only disentangled transformer with TransformerLens hooks.

    ``forward(X (B, T, d)) → (B, d, d)``: the prediction of ``Y`` from the read-out rows (``X`` may
    be token ids ``(B, T)``; ``return_type="loss"`` gives the note's loss). TransformerLens's
    conventions hold (``W_U``, ``to_str_tokens``, ``cfg.device`` / ``dtype`` following ``.to``,
    eval mode; hooks may edit in place). Hook names: ``hook_embed``, ``hook_pos_embed``,
    ``blocks.{l}.hook_resid_pre``, ``blocks.{l}.attn.hook_q`` / ``hook_k`` / ``hook_v`` /
    ``hook_attn_scores`` / ``hook_pattern`` / ``hook_z``, ``blocks.{l}.hook_attn_out``,
    ``blocks.{l}.hook_resid_post``, ``unembed.hook_readout``. Weights that would not fit
    ``max_memory`` (default: the memory left) are refused before they are allocated.
    """

    def __init__(self, cfg: ModelConfig, seed: int | None = None, *,
                 max_memory: int | str | None = None):
        super().__init__()
        check_model_fits(cfg, max_memory)
        self.cfg = cfg
        self.stream = Stream(cfg.layout, cfg.heads)
        self.hook_embed = CopyingHookPoint()  # (B, T, d): the tokens X (the caller's tensor)
        self.hook_pos_embed = CopyingHookPoint()  # (B, T, T): I_T, an expanded view of a buffer
        self.register_buffer("pos", torch.eye(cfg.T, dtype=cfg.torch_dtype), persistent=False)
        self.blocks = nn.ModuleList(DisentangledBlock(cfg, layer) for layer in range(cfg.n_layers))
        self.unembed = Unembed(cfg)
        self.init_weights(seed)
        self.setup()
        if cfg.device != "cpu":
            self.to(cfg.device)
        self.eval()  # nothing differs in training; TransformerLens's analysis tools require eval

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            raise _missing(self, name) from None

    def init_weights(self, seed: int | None = None) -> None:
        """``cfg.init``: zeros (the note's code) or i.i.d. ``N(0, init_scale²)``."""
        init_weights(self, self.cfg, seed)

    def embed(self, X: Float[Tensor, "batch pos d"]) -> Float[Tensor, "batch pos d_0"]:
        """``X (B, T, d)`` → ``h^0 = [X, I_T]`` of shape ``(B, T, d + T)``."""
        pos = self.pos.expand(X.shape[0], -1, -1)
        return torch.cat([self.hook_embed(X), self.hook_pos_embed(pos)], dim=-1)

    def predict(self, X: Tensor) -> Tensor:
        """The predicted ``Y (B, d, d)`` of a checked ``X (B, T, d)``: the last stream read out."""
        return self.unembed(self.residual_streams(X, check_input=False)[-1])

    def residual_streams(self, X: Tensor, check_input: bool = True,
                         last: int | None = None) -> list[Tensor]:
        """``[h^0, …, h^last]`` for ``X (B, T, d)`` (``last``: default ``L``), through the hooks;
        ``h^l`` is ``(B, T, D_l)``."""
        if check_input:
            X = self.check_input(X)
        streams = [self.embed(X)]
        for block in self.blocks[:check_last(self.cfg, last)]:
            streams.append(block(streams[-1]))
        return streams

    def run_with_cache(
        self, *model_args, return_cache_object: bool = True, remove_batch_dim: bool = False,
        **kwargs,
    ) -> tuple[Tensor, ActivationCache | dict[str, Tensor]]:
        """As ``HookedRootModule.run_with_cache``, but the cache is an ``ActivationCache`` so that
        ``cache["pattern", 0]`` works, whose ``accumulated_resid`` / ``decompose_resid`` work on this
        stream (:class:`.cache.StreamCache`); ``return_cache_object=False`` gives the plain dict."""
        out, cache = super().run_with_cache(
            *model_args, remove_batch_dim=remove_batch_dim, **kwargs
        )
        if return_cache_object:
            cache = StreamCache(cache, self, has_batch_dim=not remove_batch_dim)
        return out, cache

    def run_with_hooks(self, *model_args, **kwargs):
        """As ``HookedRootModule.run_with_hooks``. Refuses ``X`` from ``transformer_lens.patching``,
        which sizes its position axis by the input's last dimension: ``d`` for ``X``, not ``T``."""
        hooks = [fn for _, fn in kwargs.get("fwd_hooks", [])]
        X = model_args[0] if model_args else kwargs.get("input")
        if isinstance(X, Tensor) and X.is_floating_point() and any(map(_from_tl_patching, hooks)):
            raise ValueError(
                f"transformer_lens.patching reads its position axis from the input's last "
                f"dimension, which for X (B, T, d) is d={self.cfg.d}, not T={self.cfg.T}: pass "
                f"model.to_tokens(X) (token ids (B, T)) for the clean and the corrupted input")
        return super().run_with_hooks(*model_args, **kwargs)

    # -- TransformerLens conventions (W_U: DisentangledModel) ----------------------------------------
    def to_tokens(self, X: Float[Tensor, "batch pos d"]) -> Tensor:
        """``X (B, T, d)`` → token ids ``(B, T)`` (:mod:`.tokens`); the model takes either."""
        return tokens.to_tokens(self.cfg.layout, X)

    def to_str_tokens(self, input: Tensor) -> list[str] | list[list[str]]:
        """Row labels ``P0→e2``, ``Y0=0110…``, ``S0`` of ``X (T, d)`` or ``(B, T, d)``, or of token
        ids ``(T,)`` / ``(B, T)``: one list, or one per sample when ``B > 1``."""
        if isinstance(input, Tensor) and input.ndim == (2 if input.is_floating_point() else 1):
            input = input[None]  # one sample
        labels = [tokens.row_labels(self.cfg.layout, x) for x in self.check_input(input)]
        return labels[0] if len(labels) == 1 else labels

    def _apply(self, fn, *args, **kwargs):
        """``.to`` / ``.double()`` / ``.cuda()`` keep ``cfg.dtype`` and ``cfg.device`` current (as
        TransformerLens's cfg); a dtype other than float32 / float64 is refused before any cast."""
        probe = fn(torch.empty(0, dtype=self.pos.dtype, device=self.pos.device))
        names = {dtype: name for name, dtype in DTYPES.items()}
        if probe.dtype not in names:
            raise ValueError(f"the model's dtype must be float32 or float64, got {probe.dtype}")
        module = super()._apply(fn, *args, **kwargs)
        dtype, device = names[self.pos.dtype], str(self.pos.device)
        if (dtype, device) != (self.cfg.dtype, self.cfg.device):
            self.cfg = replace(self.cfg, dtype=dtype, device=device)
        return module

    def __repr__(self) -> str:
        cfg = self.cfg
        return (f"HookedDisentangledTransformer(layout={cfg.layout}, n_layers={cfg.n_layers}, "
                f"heads={list(cfg.heads)}, attention_dir={cfg.attention_dir!r}, "
                f"readout={cfg.readout!r}, widths={list(cfg.widths)})")


def _from_tl_patching(hook) -> bool:
    """Whether ``hook`` is one of ``transformer_lens.patching``'s patching hooks (a partial)."""
    return getattr(getattr(hook, "func", hook), "__module__", None) == "transformer_lens.patching"
