"""From discovery to the registry: each exact form faithful on two runs or more, registered with a
generated name and its provenance in the data file the registry loads (``maths.registry.DISCOVERED``,
``invperm discover DIR --register``).

A proposal (``analysis.discover``) is registered when it is exact as a construction (its float64
max error below ``constructions.REGISTER_TOL`` at every d of the widest range of ``RANGES`` it
holds on, checked in full by ``constructions.register``) and the rule's test passes it on at least
``min_runs`` of the runs that hold it. Its name says its layout and shape and ends in a digest of its content
(``found_plain_1x1_3fa2c1``): the same form found again gets the same name. The entry keeps the
runs and their shapes, and a digest of what was verified: an entry edited by hand afterwards is not
loaded (``maths.registry.load_discovered``). Each proposal not registered gets its reason.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..maths import constructions, registry
from ..model.disentangled import DisentangledModel
from .discover import DISCOVER_DS, Discovery, Proposal


@dataclass(frozen=True)
class Registration:
    """What ``--register`` did with one proposal: the name it registered, or why not."""

    proposal: str
    name: str | None
    reason: str = ""

    def __str__(self) -> str:
        return (f"{self.proposal}: registered as {self.name}" if self.name
                else f"{self.proposal}: not registered: {self.reason}")


def form_name(proposal: Proposal) -> str:
    """``found_{layout}_{heads per layer}_{digest}``: readable, and the same for the same form."""
    spec = proposal.form.spec("x")
    content = json.dumps([proposal.form.attention_dir, proposal.form.layout, proposal.form.readout,
                          proposal.form.read, [list(c) for c in proposal.form.cells]])
    return (f"found_{proposal.form.layout}_{'x'.join(map(str, spec.heads))}_"
            f"{hashlib.sha256(content.encode()).hexdigest()[:6]}")


def _already(proposal: Proposal) -> str | None:
    """The registered construction with the proposal's cells and wiring, if any."""
    form = proposal.form
    for name, spec in registry.REGISTRY.items():
        if (set(spec.cells), spec.read_block, spec.layout, spec.attention_dir, spec.readout) == (
                set(form.cells), form.read, form.layout, form.attention_dir, form.readout):
            return name
    return None


#: The ``d`` ranges a discovered form is registered over, widest first (the note's forms claim 1 or 2
#: to 16); the last is the range discovery checked it at.
RANGES = ((1, 16), (2, 16), (3, 16), (min(DISCOVER_DS), max(DISCOVER_DS)))


def register_widest(name: str, form) -> constructions.ConstructionSpec:
    """``form`` registered as ``name`` over the widest of ``RANGES`` it is exact on (every ``d``
    of it checked by ``constructions.register``); the last range's ``ValueError`` if none."""
    wiring = constructions.Wiring(form.layout, form.attention_dir, form.readout, form.read)

    def register(low: int, high: int) -> constructions.ConstructionSpec:
        return constructions.register(name, form.cells, wiring, replace=True, min_d=low, max_d=high,
                                      description=f"discovered: {form.text}")

    for low, high in RANGES[:-1]:
        try:
            return register(low, high)
        except ValueError:
            continue
    return register(*RANGES[-1])


def register_proposals(found: Discovery, models: Mapping[str, DisentangledModel], *,
                       path: Path = registry.DISCOVERED, min_runs: int = 2) -> list[Registration]:
    """Register every exact proposal of ``found`` faithful on at least ``min_runs`` of its runs,
    write each into ``path`` (its entries kept, one of the same name replaced) and register it in
    this process; ``models``: the runs' models by key (their shapes are the provenance)."""
    out, entries = [], []
    for p in found.proposals:
        name = form_name(p)
        if p.exact_from is None:
            out.append(Registration(p.name, None, f"not exact (best error {p.best_error:.2g})"))
            continue
        if p.faithful_runs < min_runs:
            out.append(Registration(p.name, None, f"faithful on {p.faithful_runs} of its runs, "
                                                  f"fewer than {min_runs}"))
            continue
        if (known := _already(p)) is not None:
            out.append(Registration(p.name, None, f"the registry holds it as {known}"))
            continue
        try:
            spec = register_widest(name, p.form)
        except ValueError as err:
            out.append(Registration(p.name, None, str(err)))
            continue
        runs = [r for r, verdict in zip(p.runs, p.verdicts) if verdict == "faithful"]
        entry = {"name": name, "description": spec.description, "attention_dir": spec.attention_dir,
                 "layout": spec.layout, "readout": spec.readout, "read": spec.read_block,
                 "cells": [list(c) for c in spec.cells], "beta_exact": spec.beta_exact,
                 "min_d": spec.min_d, "max_d": spec.max_d,
                 "provenance": {"runs": runs, "shapes": ["x".join(map(str, models[r].cfg.heads))
                                                         for r in runs]}}
        entries.append({**entry, "verified": registry.entry_digest(entry)})
        out.append(Registration(p.name, name))
    if entries:
        kept = json.loads(Path(path).read_text()) if Path(path).is_file() else []
        names = {e["name"] for e in entries}
        merged = sorted([e for e in kept if e["name"] not in names] + entries, key=lambda e: e["name"])
        Path(path).write_text(json.dumps(merged, indent=1) + "\n")
    return out
