"""Causal scrubbing down the recursion: Chan et al.'s treeified hypothesis.

``analysis.scrub`` feeds each claimed cell from a partner's *clean* run: one level of the
recursion. Here each claimed cell reads its partner's run scrubbed in turn, and so on ``depth``
levels down to clean runs; at ``n_layers`` levels every path is fed as the claim says (layer 1
reads the input alone). The partners are the scrub tester's (``ScrubTester.partner``'s shifts),
taken again of each partner; every run is a plain float64 forward, its scores formed term by term
(each claimed cell's gauge-fixed part at the positions of what it reads, the rest of the claim
from the tester's default partner, the removed part from another input's clean run).
"""

from __future__ import annotations

import torch

from ..task import Batch
from .faithfulness import Tester
from .gauge import gauge_fix
from .hypothesis import Hypothesis
from .score import Score, scores
from .scrub import ScrubTester, carve


def treeified(tester: ScrubTester, hyp: Hypothesis, depth: int) -> Score:
    """The claim scrubbed recursively, ``depth`` levels deep (Chan et al.'s treeification):
    each claimed cell is fed from its partner's run scrubbed in turn, ``depth - 1`` levels
    deep, down to clean runs at level 0; the removed part from another input's clean run (it
    claims nothing). ``depth=1``: ``tester.circuit`` (partners' clean runs); ``n_layers`` reaches
    layer 1, whose terms read the input alone, so a larger depth changes nothing. Each level
    runs every partner's forward again (at most ``partners ** depth`` of them, shared where
    one input is met twice): for the claims of one run, not for searches."""
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
        raise ValueError(f"depth must be an integer >= 1, got {depth!r}")
    hyp = tester.with_reads(hyp)
    (raw, W_U), _ = Tester._circuit(tester, hyp)
    cfg, stream = tester.model.cfg, tester.model.stream
    raw = [M.detach().to("cpu", torch.float64) for M in raw]
    fixed = [F.to("cpu", torch.float64) for F in tester.fixed]
    parts: list[list] = [[] for _ in raw]  # per layer (partner, gauge-fixed part, positions)
    pieces, rest = carve(raw, tester.fed_positions(hyp))
    for layer, part, where in pieces:
        fixed_part = gauge_fix(part, stream, layer)
        parts[layer] += [(keep, fixed_part, positions) for keep, positions in where.items()]
    for layer in range(cfg.n_layers):
        parts[layer].append((tester.keep, gauge_fix(rest[layer], stream, layer), None))
        parts[layer].append(("removed", fixed[layer] - gauge_fix(raw[layer], stream, layer), None))
    T = cfg.layout.T
    masked = (torch.ones(T, T, dtype=torch.bool).triu(1) if cfg.causal
              else torch.zeros(T, T, dtype=torch.bool))
    memo: dict[tuple, list[torch.Tensor]] = {}

    def streams(path: tuple, batch: Batch, level: int) -> list[torch.Tensor]:
        """``h^0 … h^{L-1}`` of ``batch`` scrubbed ``level`` deep (0: its clean run)."""
        if (path, level) not in memo:
            X = batch.X.to(tester.model.device, cfg.torch_dtype)
            if level == 0:
                with torch.no_grad():
                    out = tester.model.residual_streams(X, check_input=False, last=cfg.n_layers - 1)
                out = [h.to("cpu", torch.float64) for h in out]
            else:
                out = grow(path, batch, level, cfg.n_layers - 1)
            memo[(path, level)] = out
        return memo[(path, level)]

    def grow(path: tuple, batch: Batch, level: int, layers: int) -> list[torch.Tensor]:
        """The scrubbed streams ``h^0 … h^layers``: each layer's terms from its partners."""
        X = batch.X.to("cpu", torch.float64)
        out = [torch.cat([X, torch.eye(T, dtype=torch.float64).expand(len(X), T, T)], -1)]
        for layer in range(layers):
            total = 0.0
            for keep, part, positions in parts[layer]:
                below = 0 if keep == "removed" else level - 1
                h = streams((*path, keep), tester.partner_of(batch, keep), below)[layer]
                term = torch.einsum("btd,hde,bse->bhts", h, part, h)
                total = total + (term if positions is None else term * positions)
            pattern = total.masked_fill(masked, float("-inf")).softmax(-1)  # (B, H, T, T)
            z = (pattern @ out[-1].unsqueeze(1)).transpose(1, 2)  # (B, T, H, D)
            out.append(torch.cat([out[-1], z.flatten(start_dim=2)], -1))
        return out

    h = grow((), tester.batch, depth, cfg.n_layers)[-1]
    out = h[:, cfg.readout_rows] @ W_U.detach().to("cpu", torch.float64)
    return scores([out.to(tester.output.dtype)], tester.batch, tester.baseline, tester.clean.mse,
                  tester.clean_errors)[0]
