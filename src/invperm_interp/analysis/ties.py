"""Ties: which constructions a test can tell apart, and when the rule's best one is tied.

Two constructions are a **tie** under an ablation style when the test cannot tell which of them the
model runs; the rule then reports the set of them (``"theorem3_two_block = theorem3_two_block_mass"``)
instead of naming one by its tie-break. A tie arises two ways:

- **by construction** (:func:`relation`): mean and resample ablation, and scrubbing
  (``analysis.scrub``), replace a removed cell's score contribution ``h_q R h_kᵀ`` by its value on
  other inputs. Where the query and key blocks are both raw position blocks (``pos.P``, ``pos.Y``,
  ``pos.S``, at any layer; not a layer's copies such as ``L1.pos.S``, which average positions by
  input-dependent attention) ``h_q`` and ``h_k`` are the same on every input, so the style keeps that
  cell's contribution exactly, in the claim or not. Constructions whose cells differ only there
  score identically under it; if their templates agree too, nothing separates them, and if not,
  only the sign check (``Faithfulness.signs_agree``, read from the weights) does. Zero ablation
  sees every cell.
- **by measurement** (:func:`tied_with`): two faithful constructions are tied when the batch
  cannot rank them. Where their difference was measured on the same samples (:func:`paired`, kept as
  the test's ``versus``), the interval of that difference (``estimate ± z·se``) decides: it holds 0,
  or the estimate is within :data:`TIE` (the rule's rounding). A paired difference is far tighter
  than two separate intervals, which share the samples' spread. Records without it fall back to
  whether the two separate loss-recovered intervals overlap (conservative).
"""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations

import torch

from ..maths import registry
from .verdict import RULE, Rule, interval

#: The ablation styles whose removed cells take their value on other inputs (input-independent
#: cells are kept exactly); ``"zero"`` removes every cell it does not keep.
KEEPS_INPUT_INDEPENDENT = {"zero": False, "mean": True, "resample": True, "scrub": True,
                           "silence": False}
STYLES = tuple(KEEPS_INPUT_INDEPENDENT)
#: The raw position blocks: the same on every input.
POSITION_BLOCKS = ("pos.P", "pos.Y", "pos.S")
#: Loss recovered equal to this is equal for the rule (it ranks by loss recovered to 1e-4).
TIE = 1e-4
#: :func:`relation`'s answers, from the weakest test to the strongest.
SAME, SIGNS, CELLS = "nothing", "the sign check only", "cells"


def input_independent(query: str, key: str) -> bool:
    """Whether a cell's score contribution is the same on every input: both blocks raw positions."""
    return query in POSITION_BLOCKS and key in POSITION_BLOCKS


def _check_style(style: str) -> None:
    if style not in KEEPS_INPUT_INDEPENDENT:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")


def visible_sites(spec: registry.ConstructionSpec, style: str) -> frozenset[tuple[int, int, str, str]]:
    """The ``(layer, head, query, key)`` cells of a construction that ``style`` can tell kept from
    removed (under zero ablation all of them)."""
    _check_style(style)
    return frozenset(c.site for c in spec.cells
                     if not (KEEPS_INPUT_INDEPENDENT[style] and input_independent(c.query, c.key)))


def relation(a: str, b: str, style: str) -> str:
    """What tells registry constructions ``a`` and ``b`` apart under ``style``: :data:`CELLS` (a
    cell the style sees, or the read-out, differs), :data:`SIGNS` (the same cells as the style sees
    them, a template differs where both hold one) or :data:`SAME` (nothing: a tie on any weights)."""
    sa, sb = registry.get(a), registry.get(b)
    if sa.read_block != sb.read_block or visible_sites(sa, style) != visible_sites(sb, style):
        return CELLS
    labels = lambda s: {c.site: set() for c in s.cells}  # noqa: E731
    la, lb = labels(sa), labels(sb)
    for spec, into in ((sa, la), (sb, lb)):
        for cell in spec.cells:
            into[cell.site].add(cell.label)
    return SIGNS if any(la[s] != lb[s] for s in set(la) & set(lb)) else SAME


def comparable(layout: str, attention_dir: str) -> list[str]:
    """The working registry constructions of one layout and attention (those a model may be named)."""
    return [n for n, s in registry.REGISTRY.items()
            if s.works and s.layout == layout and s.attention_dir == attention_dir]


def untold_pairs(names: list[str], style: str) -> list[tuple[str, str, str]]:
    """The pairs of ``names`` that ``style`` cannot tell apart by their cells:
    ``(a, b, relation)`` with relation :data:`SIGNS` or :data:`SAME`."""
    return [(a, b, r) for a, b in combinations(names, 2)
            if (r := relation(a, b, style)) != CELLS]


def tied(best, other, z: float = RULE.z) -> bool:
    """Whether two scores (anything with ``loss_recovered`` and ``recovered_se``) cannot be ranked:
    estimates within :data:`TIE`, or ``z``-standard-error intervals that overlap."""
    if best.loss_recovered is None or other.loss_recovered is None:
        return False
    if abs(best.loss_recovered - other.loss_recovered) <= TIE:
        return True
    lo_a, hi_a = interval(best.loss_recovered, best.recovered_se, z)
    lo_b, hi_b = interval(other.loss_recovered, other.recovered_se, z)
    return lo_a <= hi_b and lo_b <= hi_a


def tied_with(good: list, rule: Rule = RULE) -> tuple[str, ...]:
    """The faithful constructions tied with the best (``good``: the rule's faithful list, best
    first; anything with ``hypothesis`` and ``circuit``, and optionally ``versus``): the rule names
    them with it. A test paired with the best decides by its paired difference, else by overlap."""
    if not good:
        return ()
    best = good[0].hypothesis
    out = []
    for t in good[1:]:
        versus = getattr(t, "versus", None)
        if versus is not None and versus[0] == best:
            _, difference, se = versus
            if abs(difference) <= TIE or abs(difference) <= rule.z * se:
                out.append(t.hypothesis)
        elif tied(good[0].circuit, t.circuit, rule.z):
            out.append(t.hypothesis)
    return tuple(out)


def paired(best: torch.Tensor, other: torch.Tensor, baseline: float, model_mse: float
           ) -> tuple[float, float]:
    """``(difference, se)``: the loss recovered of the claim with per-sample errors ``other``
    ``(B,)`` less that of the claim with ``best``, on the same samples, with its standard error.
    Loss recovered is ``(baseline - mean e) / (baseline - model_mse)``, so the difference is the
    mean of ``best - other`` over that gap."""
    gap = baseline - model_mse
    d = (best - other).double()
    n = len(d)
    se = float(d.std(unbiased=True)) / (n ** 0.5 * gap) if n > 1 else 0.0
    return float(d.mean()) / gap, se


def with_paired(tester, tested: list, good: list, hypotheses: dict) -> list:
    """``tested`` with each faithful test after the best (``good``, best first) given its paired
    difference against the best on ``tester``'s samples (``versus``); ``hypotheses``: each test's
    hypothesis by its label."""
    if len(good) < 2:
        return tested
    names = [t.hypothesis for t in good]
    errors = dict(zip(names, tester.errors([hypotheses[n] for n in names])))
    best = names[0]
    versus = {n: (best, *paired(errors[best], errors[n], tester.baseline, tester.clean.mse))
              for n in names[1:]}
    return [replace(t, versus=versus[t.hypothesis]) if t.hypothesis in versus else t for t in tested]
