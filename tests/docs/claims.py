"""The numbers the documentation quotes, computed here from the committed assets (each with the
fragment of text that quotes it), so the pages and the README cannot drift from assets/."""

from __future__ import annotations

import json
from collections import Counter

from helpers import REPO

ASSETS = REPO / "assets"


def load(name: str):
    return json.loads((ASSETS / name).read_text())


def census() -> dict[str, int]:
    data = load("census.json")
    solved = [r for r in data["runs"] if r["steps_to_target"] is not None]
    out = {}
    for kind, prefix in (("bidirectional", "BI"), ("scratch", "SC")):
        mine = [r for r in solved if r["kind"] == kind]
        names = Counter(r["mechanism"] for r in mine)
        out[f"{prefix}_SOLVED"] = len(mine)
        out[f"{prefix}_NONE"] = names["none"]
        out[f"{prefix}_BORDER"] = names["borderline"]
        out[f"{prefix}_NAMED"] = len(mine) - names["none"] - names["borderline"]
        for key, name in (("TWO", "two_block"), ("APPB", "appendix_b"), ("T2", "theorem2"),
                          ("SUP", "theorem3_superposed"), ("MASS", "theorem3_two_block_mass"),
                          ("COMP", "theorem3_superposed_complement")):
            out[f"{prefix}_{key}"] = names[name]
    for key, name in (("TB", "two_block"), ("COMP", "theorem3_superposed_complement"),
                      ("SUP", "theorem3_superposed"), ("MASS", "theorem3_two_block_mass"),
                      ("APPB", "appendix_b")):
        mine = [r for r in solved if r["mechanism"] == name]
        out[f"{key}_RUNS"] = len(mine)
        out[f"{key}_MEAN"] = sum(r["name_mean_ablation"] == name for r in mine)
        out[f"{key}_RES"] = sum(r["name_resample_ablation"] == name for r in mine)
    out["SUP_NOT"] = out["SUP_RUNS"] - out["SUP_RES"]
    out.update(ties(solved))
    return out


def ties(solved: list[dict]) -> dict[str, str]:
    """The zero-ablation ties recounted from each named run's recorded intervals, independently of
    the library: another faithful construction (signs agreeing) whose loss-recovered interval
    (± 1.96 standard errors) overlaps the named one's, or within 1e-4 of it."""
    out = {}
    for kind, prefix in (("bidirectional", "BI"), ("scratch", "SC")):
        named = [r for r in solved if r["kind"] == kind and r["mechanism"] not in ("none", "borderline")]
        tied = 0
        for r in named:
            by = {t["name"]: t for t in r["tested"]}
            best = by[r["mechanism"]]
            lo, hi = (best["loss_recovered"] + s * 1.96 * best["recovered_se"] for s in (-1, 1))
            tied += any(t["verdict"] == "faithful" and t["name"] != r["mechanism"] and (
                abs(t["loss_recovered"] - best["loss_recovered"]) <= 1e-4
                or (t["loss_recovered"] - 1.96 * t["recovered_se"] <= hi
                    and lo <= t["loss_recovered"] + 1.96 * t["recovered_se"])) for t in r["tested"])
        out[f"TIES_{prefix}"] = f"{tied} of {len(named)}"
        out[f"ALSO_{prefix}"] = str(sum(bool(r["also_faithful"]) for r in named))
    return out


def page_text(path: str) -> str:
    """The page at ``path`` (from the repository root) with its whitespace collapsed, so a quoted
    sentence may wrap anywhere."""
    return " ".join((REPO / path).read_text().split())


def fill(text: str, numbers: dict) -> str:
    """``text`` with every placeholder of ``numbers`` replaced, longest names first."""
    for key in sorted(numbers, key=len, reverse=True):
        text = text.replace(key, f"{numbers[key]:g}" if isinstance(numbers[key], float)
                            else str(numbers[key]))
    return text


def dynamics() -> dict[str, int | float | str]:
    data = load("dynamics.json")
    rows = {(t["model"], t["mechanism"]): t for t in data["table"]}
    tb, sup = rows[("bidirectional", "two_block")], rows[("causal", "theorem3_superposed")]
    mass = rows[("causal", "theorem3_two_block_mass")]
    faithful = [t["faithful before drop"].split("/") for t in data["table"]]
    after = [t["β progress 0.5 at or after leaving"].split("/") for t in data["table"]]
    guard = ("L2 1 at (L1.x, pos.Y)", "L2 1 at (L1.x, L1.pos.P)")
    mass_runs = [r for r in data["runs"] if r["mechanism"] == "theorem3_two_block_mass"]
    guard_first = sum(max(r["cells_formed"][c] for c in guard)
                      < min(v for c, v in r["cells_formed"].items() if c not in guard)
                      for r in mass_runs)

    def of(pairs):
        return f"{sum(int(k) for k, _ in pairs)} of {sum(int(n) for _, n in pairs)}"

    assert all(k == "0" for k, _ in faithful)
    return {"FAITHFUL_RUNS": sum(int(n) for _, n in faithful), "TB_RUNS": tb["runs"],
            "TB_LEAVE": tb["median leave plateau"], "TB_DROP": tb["median drop"],
            "TB_FAITHFUL": tb["median faithful"],
            "TB_SAME": tb["runs with that order"].replace("/", " of "),
            "TB_AFTER": tb["β progress 0.5 at or after leaving"].replace("/", " of "),
            "ALL_AFTER": of(after), "TB_LEAD": tb["β progress 0.5: lead on drop (median)"],
            "TB_LEADS": tb["β lead > 0"].replace("/", " of "),
            "SUP_SPREAD": sup["cells' formation spread (median)"], "SUP_RUNS": sup["runs"],
            "MASS_SPREAD": mass["cells' formation spread (median)"], "MASS_RUNS": mass["runs"],
            "MASS_FIRST": -mass["first cell formed - drop (median)"],
            "MASS_GUARD": f"{guard_first} of {len(mass_runs)}",
            "SUP_ORDER": sup["runs with that order"].replace("/", " of ")}


def discovery() -> dict[str, str]:
    """The discovery report's numbers (assets/discovery.json), recounted from its per-run rows."""
    data = load("discovery.json")
    per_run = data["census"]["per_run"].values()
    forms = data["census"]
    out = {"D_NONE": str(forms["runs"]), "D_FORMS": str(forms["forms"]),
           "D_SHARED": str(forms["forms_held_by_several"]),
           "D_SHARED_RUNS": str(forms["runs_in_shared_forms"]),
           "D_HOLD7": str(sum(v["superposed_cells_held"] >= 7 for v in per_run)),
           "D_XP": str(sum("(x, pos.P)" in v["layer1_content_query"] for v in per_run)),
           "D_XY": str(sum("(x, pos.Y)" in v["layer1_content_query"] for v in per_run))}
    none = [r for r in data["runs"] if r["census_names"]["zero"] == "none"]
    out["R_NONE"], out["R_ALL"] = str(len(none)), str(len(data["runs"]))
    for style in ("zero", "mean", "resample", "scrub"):
        key = style.upper()[:3]
        named = [r for r in none if r["names"][style][1]]
        out[f"R_{key}_NOW"] = f"{len(named)} of {len(none)}"
        out[f"R_{key}_GUARDED"] = str(sum(r["names"][style][1].endswith("_guarded")
                                          and not r["names"][style][2] for r in named))
        out[f"R_{key}_TIES"] = str(sum(bool(r["names"][style][2]) for r in named))
        if style != "scrub":
            before = sum(r["census_names"][style] not in ("none", "borderline") for r in none)
            out[f"R_{key}_BEFORE"] = f"{before} of {len(none)}"
        left = sorted(r["completeness"][style] for r in data["runs"])
        out[f"R_{key}_WITHOUT"] = f"{(left[(len(left) - 1) // 2] + left[len(left) // 2]) / 2:.3f}"
    unnamed = sum(r["names"]["resample"][1] is None for r in none)
    guarded = int(out["R_RES_GUARDED"])
    out["R_RES_LEFT"] = f"{unnamed} unnamed ({unnamed / len(none):.0%}, Wilson {wilson(unnamed, len(none))})"
    out["R_RES_WILSON"] = f"{guarded} of the {len(none)} (Wilson {wilson(guarded, len(none))})"
    out["R_RES_BEFORE_LEFT"] = str(len(none) - int(out["R_RES_BEFORE"].split()[0]))
    rows = data["runs"]
    widest = max(rows, key=lambda r: len(data["behaviour"][r["run"]]))
    d, seed = widest["run"].removeprefix("scratch_d").split("_seed")
    out["B_WIDEST"] = f"d = {d} seed {seed}"
    out["B_WIDE"] = f"{len(data['behaviour'][widest['run']])} of {len(rows)}"
    out["B_SETS"] = str(len({frozenset(v) for v in data["behaviour"].values()}))
    return out


def wilson(k: int, n: int, z: float = 1.96) -> str:
    """The Wilson 95% interval of ``k / n`` as ``"55%–93%"`` (an independent formula)."""
    p, z2 = k / n, z * z
    centre, half = (p + z2 / (2 * n)) / (1 + z2 / n), z * (p * (1 - p) / n + z2 / (4 * n * n)) ** 0.5 / (
        1 + z2 / n)
    return f"{max(0.0, centre - half):.0%}–{min(1.0, centre + half):.0%}"
