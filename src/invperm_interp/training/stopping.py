"""Early stopping: when a run is finished before ``steps`` (``TrainConfig.stop_at_mse``,
``stop_at_floor`` and ``floor_patience``). The reason is recorded in the last metrics record
(``Evaluation.stopped``) and in ``final.safetensors``; ``train`` and ``train_many`` both ask here."""

from __future__ import annotations

from ..config import TrainConfig
from ..runs.evaluation import Evaluation


def stop_reason(cfg: TrainConfig, metrics: list[Evaluation], causal: bool) -> str | None:
    """Why a run with these evaluation ``metrics`` (oldest first) is finished early, or None.

    ``"stop_at_mse"``: the last evaluation's MSE is below ``cfg.stop_at_mse``. ``"causal_floor"``
    (causal models only): the last ``cfg.floor_patience`` evaluations all lie within the relative
    tolerance ``cfg.stop_at_floor`` of the exact causal floor, ``mse <= (1 + tol) · floor``.
    """
    if not metrics:
        return None
    if cfg.stop_at_mse is not None and metrics[-1].mse < cfg.stop_at_mse:
        return "stop_at_mse"
    if causal and cfg.stop_at_floor is not None and len(metrics) >= cfg.floor_patience:
        tail = metrics[-cfg.floor_patience:]
        if all(m.mse <= (1 + cfg.stop_at_floor) * m.causal_floor for m in tail):
            return "causal_floor"
    return None
