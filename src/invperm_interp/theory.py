"""What a causal model can and cannot do: the exact Bayes floor under a causal mask (Theorem 1).

By Lemma 1, the read-out row at position ``t`` is a function of input rows ``0..t`` only. The
floor is the MSE of the Bayes-optimal predictor given exactly those rows, computed in closed form.
"""

from __future__ import annotations

from .task import Layout


def _row_positions(layout: Layout, kind: str) -> range:
    rows = layout.rows(layout.segment_of_kind(kind).name)
    return range(rows.start, rows.stop)


def per_entry_error(k: int, a: int) -> float:
    """Expected squared error of one entry of ``Y_r`` when its row is unidentified.

    ``Y_r`` sits in one of ``k`` candidate rows of ``Y_P`` (uniformly, independent of the data), of
    which ``a`` are visible. The Bayes prediction is the mean over candidates of (the visible value,
    or 1/2). With centred entries ``u_j = y_j - 1/2`` (variance 1/4) the error is
    ``u_J - (1/k) Σ_visible u_j``, whose variance is
    ``(a/k)·¼[(1-1/k)² + (a-1)/k²] + ((k-a)/k)·¼[1 + a/k²]``.
    """
    if k == 0:
        return 0.0
    seen = (a / k) * 0.25 * ((1 - 1 / k) ** 2 + (a - 1) / k**2) if a else 0.0
    unseen = ((k - a) / k) * 0.25 * (1 + a / k**2)
    return seen + unseen


def row_floor(layout: Layout, position: int, r: int) -> float:
    """Least expected squared error (summed over ``d`` columns) for predicting ``Y_r`` from input
    rows ``0..position``.

    ``Y_r`` is row ``J = perm⁻¹(r)`` of ``Y_P``. If ``P``'s row ``J`` is visible (probability
    ``|V_P|/d``, ``J`` then uniform on ``V_P``) the model knows ``J`` and is exact iff ``Y_P``'s row
    ``J`` is visible, else it can do no better than 1/2 (cost ``d/4``). Otherwise ``J`` is uniform on
    the ``k`` unseen rows of ``P`` and :func:`per_entry_error` applies.
    """
    d = layout.d
    visible_P = {i for i, pos in enumerate(_row_positions(layout, "P")) if pos <= position}
    visible_Y = {i for i, pos in enumerate(_row_positions(layout, "Y")) if pos <= position}
    del r  # by symmetry of the uniform permutation the floor does not depend on which row r
    known_missing = len(visible_P - visible_Y)  # J known but Y_P row J not yet visible
    unknown = set(range(d)) - visible_P
    k, a = len(unknown), len(unknown & visible_Y)
    return known_missing / d * 0.25 * d + k / d * d * per_entry_error(k, a)


def causal_floor(layout: Layout, readout: str) -> float:
    """Exact best achievable MSE (the note's loss: squared error summed over ``d`` columns, averaged
    over rows) of any causally masked model reading segment ``readout`` of ``layout``.

    Reading the P rows of ``[P; Y_P]`` it is ``d/4`` (2.5 at d = 10: the note's "random guessing");
    reading the Y_P rows it is ``(d-1)/8`` (1.125 at d = 10); reading scratch rows after ``Y_P``, 0.
    """
    if not isinstance(layout, Layout):
        raise ValueError(f"layout must be a Layout, got {type(layout).__name__}")
    rows = layout.rows(layout.segment(readout).name)
    if rows.stop - rows.start != layout.d:
        raise ValueError(f"readout segment {readout!r} must have d={layout.d} rows")
    return sum(row_floor(layout, rows.start + r, r) for r in range(layout.d)) / layout.d
