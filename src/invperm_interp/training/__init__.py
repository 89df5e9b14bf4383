"""Training: one run (``train``, ``resume``, ``train_or_reuse``), many same-shape runs at once
(``train_many``), the loop they share (``Trainer``), the optimizers, early stopping, signals, CPU
threads and the progress bars. Nothing here imports TransformerLens (``Run.model`` builds the hooked
model on use)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .many import train_many
    from .run import Run
    from .single import resume, train, train_or_reuse
    from .trainer import Diverged

_HOMES = {"Run": "run", "train_many": "many", "resume": "single", "train": "single",
          "train_or_reuse": "single", "Diverged": "trainer"}
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
__all__ = ["Diverged", "Run", "resume", "train", "train_many", "train_or_reuse"]
