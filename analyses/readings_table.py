"""What causal scrubbing feeds each cell of every working construction from: the hypothesis.

Per registered working construction (built exactly at d = 8, the census's shapes' d) and per
(layer, head, query block, key block) cell, what its score term reads of the input, per
(query segment, key segment) of the rows (``analysis.readings``): nothing, ``P``, ``Y`` or both,
and so the partner ``analysis.scrub`` feeds it from (another input, the same P, the same Y, the
sample). Writes readings.{json,md} into runs/reproduce/ (or ``--out DIR``; the checkout's assets/
with ``--update-assets``, as ``make reproduce`` does).

    python analyses/readings_table.py [--out DIR | --update-assets]
"""

from __future__ import annotations

import sys

from common import reproduce_output, write_table

from invperm_interp.analysis.readings import PARTNER, cell_reads, construction_readings
from invperm_interp.config import ModelConfig
from invperm_interp.maths import registry

D = 8
#: The partners, as the table names them (``analysis.readings.EQUIVALENCES``).
FED = {"any": "another input", "P": "same P", "Y": "same Y", "all": "the sample"}


def rows(d: int = D) -> list[dict]:
    """One row per cell of every working construction, in registry order."""
    out = []
    for name in registry.names():
        spec = registry.get(name)
        if not spec.works:
            continue
        heads = spec.heads[0] if len(set(spec.heads)) == 1 else spec.heads
        cfg = ModelConfig(spec.make_layout(d), n_layers=spec.n_layers, n_heads=heads,
                          attention_dir=spec.attention_dir, readout=spec.readout)
        for (layer, head, query, key), reading in construction_readings(name, cfg).items():
            where = {}
            for (q, k), reads in reading.items():
                if reads != "nothing":
                    where.setdefault(reads, []).append(f"{q}→{k}")
            out.append({"construction": name, "layer": layer + 1, "head": head,
                        "query block": query, "key block": key, "reads": cell_reads(reading),
                        "where (query rows→key rows)": "; ".join(
                            f"{reads}: {', '.join(pairs)}" for reads, pairs in where.items()) or "-",
                        "fed from": "; ".join(FED[PARTNER[r]] for r in dict.fromkeys(
                            reading.values()))})
    return out


def main(argv: list[str] | None = None) -> int:
    out = reproduce_output("readings_table", __doc__, argv)
    if isinstance(out, int):
        return out
    write_table(out, "readings", rows(),
                "What each construction's cells read: the hypothesis causal scrubbing tests",
                f"Each working construction built exactly (float64, default β) at d = {D}; each cell's "
                "gauge-fixed score term compared on 64 samples and on partners that keep the sample's P "
                "(another Y) or its Y (another P), per (query segment, key segment) of the rows the "
                "mask lets through (analysis.readings). P, Y, S: the permutation's rows, the Y_P rows, "
                "the scratch rows. Under scrubbing a term is fed, at each segment pair, from an input "
                "that keeps what it reads there (fed from: every partner the cell meets).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
