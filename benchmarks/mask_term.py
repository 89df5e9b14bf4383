"""A causal training step with the mask as a term on ``A``'s position rows (``mask_term``, what
``weights_forward`` does) against ``masked_fill`` on the ``(B, H, R, T)`` scores (the form it
replaced, kept here as the reference).

For the census's causal shapes and census_shapes' wider and deeper ones, batch 128, Adam, one
thread by default: each round times ``--steps`` steps of each form in turn (interleaved, so
machine noise hits both) and the best round of each is printed with their ratio (CPU time of the
process). Also trains ``--check`` steps of each from the same seed and data and says whether the
weights agree bit for bit (adding 0 leaves a finite score's bits unchanged, and a hidden key's
gradient is 0 either way).
Usage: python benchmarks/mask_term.py [--rounds 7] [--steps 50] [--check 200] [--threads 1]
"""

from __future__ import annotations

import argparse
import time
from contextlib import contextmanager

import torch

from invperm_interp import Layout, ModelConfig, sample_batch
from invperm_interp.model import disentangled
from invperm_interp.model.disentangled import DisentangledTransformer, readout_forward
from invperm_interp.task import mse
from invperm_interp.training.optim import make_optimizer

SHAPES = [  # (name, d, n_layers, n_heads)
    ("scratch d=6", 6, 2, 1), ("scratch d=8", 8, 2, 1), ("scratch d=10", 10, 2, 1),
    ("scratch d=12", 12, 2, 1), ("scratch d=8, 2 x 2", 8, 2, 2), ("scratch d=8, 3 x 1", 8, 3, 1),
    ("scratch d=8, 3 x 2", 8, 3, 2),
]
MASK_TERM = disentangled._pattern


def masked_fill_pattern(kept, A, hidden, rows):
    """``_pattern`` as it was: the scores formed whole, then ``masked_fill`` where a key is hidden."""
    B, T, K = kept.shape
    H, D = A.shape[0], A.shape[1]
    A_kept, A_pos = A.split([K, T], dim=1)
    hq = kept if rows is None else kept[:, rows]
    A_pos = A_pos if rows is None else A_pos[:, rows]
    q = (hq @ A_kept.transpose(0, 1).reshape(K, H * D)).view(B, hq.shape[1], H, D)
    q_kept, q_pos = (q + A_pos.transpose(0, 1)).split([K, T], dim=-1)
    scores = q_kept.transpose(1, 2) @ kept.transpose(1, 2).unsqueeze(1) + q_pos.transpose(1, 2)
    if hidden is not None:
        mask = torch.isinf(hidden)
        scores = scores.masked_fill(mask if rows is None else mask[rows], float("-inf"))
    return torch.softmax(scores, dim=-1)


@contextmanager
def pattern(form):
    disentangled._pattern = form
    try:
        yield
    finally:
        disentangled._pattern = MASK_TERM


def steps(model, opt, batches) -> None:
    for batch in batches:
        loss = mse(readout_forward(model, batch.X), batch.Y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def agree(cfg: ModelConfig, n: int) -> bool:
    """Whether ``n`` steps of each form from the same seed and data end with equal weights."""
    weights = []
    for form in (masked_fill_pattern, MASK_TERM):
        model = DisentangledTransformer(cfg, seed=0)
        generator = torch.Generator().manual_seed(0)
        with pattern(form):
            steps(model, make_optimizer("adam", model.parameters(), 1e-2),
                  (sample_batch(cfg.layout, 128, generator) for _ in range(n)))
        weights.append([p.detach().clone() for p in model.parameters()])
    return all(torch.equal(a, b) for a, b in zip(*weights))


def best_step_ms(cfg: ModelConfig, rounds: int, n: int) -> dict[str, float]:
    """The best round's CPU milliseconds per Adam step of each form, rounds interleaved."""
    model = DisentangledTransformer(cfg, seed=0)
    opt = make_optimizer("adam", model.parameters(), 1e-4)
    batch = sample_batch(cfg.layout, 128, torch.Generator().manual_seed(0))
    forms = {"masked_fill": masked_fill_pattern, "mask term": MASK_TERM}
    best = dict.fromkeys(forms, float("inf"))
    for _ in range(rounds):
        for name, form in forms.items():
            with pattern(form):
                steps(model, opt, [batch] * 3)  # warm-up
                start = time.process_time()
                steps(model, opt, [batch] * n)
            best[name] = min(best[name], (time.process_time() - start) / n * 1e3)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--check", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{args.threads} thread(s), batch 128, best of {args.rounds} rounds of {args.steps} steps")
    print(f"{'shape':<22}{'masked_fill ms':>15}{'mask term ms':>14}{'ratio':>8}"
          f"{f'same after {args.check}':>18}")
    for name, d, n_layers, n_heads in SHAPES:
        cfg = ModelConfig(Layout.scratch(d), n_layers=n_layers, n_heads=n_heads,
                          attention_dir="causal", readout="S")
        ms = best_step_ms(cfg, args.rounds, args.steps)
        old, new = ms["masked_fill"], ms["mask term"]
        print(f"{name:<22}{old:>15.2f}{new:>14.2f}{old / new:>8.2f}{str(agree(cfg, args.check)):>18}")


if __name__ == "__main__":
    main()
