"""Forward-pass cost of the hooks: hooked model (no hooks attached) vs a bare module, same maths.

Measured side by side in one run, interleaved, so machine noise hits both alike. Prints the ratio.
Usage: python benchmarks/forward.py [--threads N] [--repeats R]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from invperm_interp import HookedDisentangledTransformer, Layout, ModelConfig, sample_batch


class BareDisentangled(nn.Module):
    """The same maths as HookedDisentangledTransformer with no HookPoints and no checks."""

    def __init__(self, As: list[torch.Tensor], W_U: torch.Tensor, rows: slice, causal: bool):
        super().__init__()
        self.As, self.W_U, self.rows, self.causal = As, W_U, rows, causal

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        B, T, _ = X.shape
        h = torch.cat([X, torch.eye(T, dtype=X.dtype).expand(B, T, T)], dim=-1)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        for A in self.As:
            scores = torch.einsum("bti,hij->bhtj", h, A) @ h.unsqueeze(1).transpose(-1, -2)
            if self.causal:
                scores = scores.masked_fill(mask, float("-inf"))
            z = (torch.softmax(scores, -1) @ h.unsqueeze(1)).transpose(1, 2)
            h = torch.cat([h, z.flatten(2)], dim=-1)
        return h[:, self.rows] @ self.W_U


def timed(fn, X) -> float:
    start = time.perf_counter()
    fn(X)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--batch", type=int, default=1024)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    cfg = ModelConfig(Layout.plain(10), n_layers=2, attention_dir="bidirectional")
    hooked = HookedDisentangledTransformer(cfg, seed=0)
    bare = BareDisentangled([b.attn.A.detach() for b in hooked.blocks],
                            hooked.unembed.W_U.detach(), cfg.readout_rows, False)
    X = sample_batch(cfg.layout, args.batch, torch.Generator().manual_seed(0)).X
    runners = {
        "hooked (checked)": lambda X: hooked(X),
        "hooked (check_input=False)": lambda X: hooked(X, check_input=False),
        "bare nn.Module": bare,
    }
    with torch.inference_mode():
        assert torch.allclose(hooked(X), bare(X), atol=1e-5)
        for fn in runners.values():  # warm-up
            fn(X)
        times = {name: [] for name in runners}
        for _ in range(args.repeats):  # interleaved: each round times every runner once
            for name, fn in runners.items():
                times[name].append(timed(fn, X))
    base = statistics.median(times["bare nn.Module"])
    print(f"d=10, T=20, 2 layers, batch {args.batch}, threads {torch.get_num_threads()}, "
          f"{args.repeats} interleaved repeats (median)")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:28s} {med * 1e3:8.3f} ms   ratio to bare {med / base:5.3f}")


if __name__ == "__main__":
    main()
