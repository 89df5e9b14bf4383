"""A training step through ``readout_forward`` (the stream kept without its ``I_T`` block) against
the same step through the whole stream (the forward it replaced, kept here as the reference).

For the census's shapes and census_shapes' wider and deeper ones at d = 8, batch 128, Adam, one
thread by default: each round times ``--steps`` steps of each forward in turn (interleaved, so
machine noise hits both), and the best round of each is printed with their ratio. Also checks
the two outputs agree.
Usage: python benchmarks/kept_stream.py [--rounds 7] [--steps 50] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch

from invperm_interp import Layout, ModelConfig, sample_batch
from invperm_interp.model.disentangled import (
    DisentangledTransformer,
    attention_scores,
    grown,
    readout_forward,
)
from invperm_interp.task import mse
from invperm_interp.training.optim import make_optimizer

SHAPES = [  # (name, layout, attention_dir, readout, n_layers, n_heads)
    ("bidirectional d=6", Layout.plain(6), "bidirectional", "P", 2, 1),
    ("bidirectional d=8", Layout.plain(8), "bidirectional", "P", 2, 1),
    ("bidirectional d=10", Layout.plain(10), "bidirectional", "P", 2, 1),
    ("bidirectional d=12", Layout.plain(12), "bidirectional", "P", 2, 1),
    ("scratch d=6", Layout.scratch(6), "causal", "S", 2, 1),
    ("scratch d=8", Layout.scratch(8), "causal", "S", 2, 1),
    ("scratch d=10", Layout.scratch(10), "causal", "S", 2, 1),
    ("scratch d=12", Layout.scratch(12), "causal", "S", 2, 1),
    ("bidirectional d=8, 2 x 2", Layout.plain(8), "bidirectional", "P", 2, 2),
    ("scratch d=8, 2 x 2", Layout.scratch(8), "causal", "S", 2, 2),
    ("scratch d=8, 3 x 1", Layout.scratch(8), "causal", "S", 3, 1),
    ("scratch d=8, 3 x 2", Layout.scratch(8), "causal", "S", 3, 2),
]


def whole_stream_forward(model: DisentangledTransformer, X: torch.Tensor) -> torch.Tensor:
    """The read-out of the whole stream ``h = [X, I_T, Z]``: the last layer's read-out rows' queries
    only and ``W_U``'s head part before the average, as before the stream dropped ``I_T``."""
    mask = model.blocks[0].attn.mask if model.cfg.causal else None
    rows, W = model.unembed.rows, model.unembed.W_U
    h = torch.cat([X, model.pos.expand(X.shape[0], -1, -1)], dim=-1)
    for block in model.blocks[:-1]:
        h = grown(h, block.attn.A, mask)
    A = model.blocks[-1].attn.A
    B, T, D = h.shape
    H, d = A.shape[0], W.shape[1]
    pattern = torch.softmax(attention_scores(h, A, mask, rows), dim=-1)
    u = (h @ W[D:].view(H, D, d).transpose(0, 1).reshape(D, H * d)).view(B, T, H, d)
    return h[:, rows] @ W[:D] + (pattern @ u.transpose(1, 2)).sum(1)


def best_step_ms(model, forwards: dict, batch, rounds: int, steps: int) -> dict[str, float]:
    """The best round's milliseconds per Adam step of each forward, rounds interleaved."""
    opt = make_optimizer("adam", model.parameters(), 1e-4)
    best = dict.fromkeys(forwards, float("inf"))
    for _ in range(rounds):
        for name, forward in forwards.items():
            for i in range(steps + 3):  # three warm-up steps
                if i == 3:
                    start = time.perf_counter()
                loss = mse(forward(model, batch.X), batch.Y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            best[name] = min(best[name], (time.perf_counter() - start) / steps * 1e3)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    forwards = {"whole stream": whole_stream_forward, "kept stream": readout_forward}
    print(f"{args.threads} thread(s), batch 128, best of {args.rounds} rounds of {args.steps} steps")
    print(f"{'shape':<22}{'whole ms':>10}{'kept ms':>10}{'ratio':>8}{'max |diff|':>12}")
    for name, layout, direction, readout, n_layers, n_heads in SHAPES:
        cfg = ModelConfig(layout, n_layers=n_layers, n_heads=n_heads, attention_dir=direction,
                          readout=readout, init_scale=0.1)
        model = DisentangledTransformer(cfg, seed=0)
        batch = sample_batch(layout, 128, torch.Generator().manual_seed(0))
        with torch.no_grad():
            diff = (whole_stream_forward(model, batch.X) - readout_forward(model, batch.X)).abs().max()
        ms = best_step_ms(model, forwards, batch, args.rounds, args.steps)
        whole, kept = ms["whole stream"], ms["kept stream"]
        print(f"{name:<22}{whole:>10.2f}{kept:>10.2f}{whole / kept:>8.2f}{float(diff):>12.1e}")


if __name__ == "__main__":
    main()
