"""Picking columns of a stacked stream ``h (V, B, T, n)``, as ``model.variants`` does in every
batched forward: ``index_select`` on the last axis against ``torch.gather`` on an expanded index
and advanced indexing ``h[..., index]``, side by side in one process, on one torch thread. All three
give the same tensor (checked); the shapes are those of a scratch model at d = 10 (T = 31) on the
analysis's 512 samples, one to 30 variants stacked.
Usage: python benchmarks/gather.py [--repeats 20]
"""

from __future__ import annotations

import argparse
import os
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    print(f"load average {os.getloadavg()[0]:.1f}; ms per call, best of {args.repeats}")
    print("variants  columns  picked  index_select  gather  h[..., index]  index_select / gather")
    for V, n, k in [(1, 41, 12), (8, 82, 20), (30, 82, 40), (8, 41, 30)]:
        h = torch.randn(V, 512, 31, n, dtype=torch.float64, generator=generator)
        index = torch.randperm(n, generator=generator)[:k].sort().values
        ways = {"index_select": lambda h=h, i=index: h.index_select(-1, i),
                "gather": lambda h=h, i=index, k=k: torch.gather(h, -1, i.expand(*h.shape[:-1], k)),
                "advanced": lambda h=h, i=index: h[..., i]}
        first = ways["index_select"]()
        assert all(torch.equal(first, way()) for way in ways.values())
        best = {}
        for _ in range(args.repeats):  # interleaved, so a load change hits every way
            for name, way in ways.items():
                start = time.perf_counter()
                way()
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - start)
        ms = {name: 1e3 * t for name, t in best.items()}
        print(f"{V:8d}  {n:7d}  {k:6d}  {ms['index_select']:12.2f}  {ms['gather']:6.2f}  "
              f"{ms['advanced']:13.2f}  {ms['index_select'] / ms['gather']:.1f}x")


if __name__ == "__main__":
    main()
