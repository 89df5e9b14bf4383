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
                          ("COMP", "theorem3_superposed_complement"),
                          ("SUPG", "theorem3_superposed_guarded"),
                          ("COMPG", "theorem3_superposed_complement_guarded")):
            out[f"{prefix}_{key}"] = names[name]
        out[f"{prefix}_TIED"] = sum(n for name, n in names.items() if " = " in name)
    for key, name in (("TB", "two_block"), ("COMP", "theorem3_superposed_complement"),
                      ("SUP", "theorem3_superposed"), ("MASS", "theorem3_two_block_mass"),
                      ("APPB", "appendix_b"), ("SUPG", "theorem3_superposed_guarded"),
                      ("COMPG", "theorem3_superposed_complement_guarded")):
        mine = [r for r in solved if r["mechanism"] == name]
        out[f"{key}_RUNS"] = len(mine)
        for style, field in (("MEAN", "name_mean_ablation"), ("RES", "name_resample_ablation")):
            out[f"{key}_{style}"] = sum(r[field] == name for r in mine)
            # named there by a tie holding it, or by its guarded twin alone
            out[f"{key}_TIE_{style}"] = sum(" = " in r[field] and name in r[field].split(" = ")
                                            for r in mine)
            out[f"{key}_TO_G_{style}"] = sum(r[field] == f"{name}_guarded" for r in mine)
    out["SUP_NOT"] = out["SUP_RUNS"] - out["SUP_RES"]
    scratch = [r for r in solved if r["kind"] == "scratch"]
    for style, field in (("MEAN", "name_mean_ablation"), ("RES", "name_resample_ablation")):
        none = sum(r[field] == "none" for r in scratch)
        out[f"SC_NONE_{style}"] = (f"{none} of {len(scratch)} ({none / len(scratch):.0%}, "
                                   f"Wilson {wilson(none, len(scratch))})")
    out["BATCH_TIES"] = sum(len(set(r["names_by_batch"])) > 1 and all(
        set(a.split(" = ")) & set(b.split(" = ")) for a in r["names_by_batch"] for b in r["names_by_batch"])
        for r in solved)
    tie_counts = [sum(" = " in n for n in r["names_by_batch"]) for r in solved
                  if len(set(r["names_by_batch"])) > 1 and "borderline" not in r["names_by_batch"]]
    out["TIES_TWO"], out["TIES_ONE"] = tie_counts.count(2), tie_counts.count(1)
    out.update(ties(solved))
    return out


def guarded() -> dict[str, str]:
    """What the guarded forms add (census.json's recount with and without them, checked against the
    per-run names where it can be), completeness ranges per style from the summary, and the
    guarded form's margin over the plain one where zero ablation names the plain one."""
    data = load("census.json")
    out = {}
    solved = [r for r in data["runs"] if r["kind"] == "scratch" and r["steps_to_target"] is not None]
    for line in data["guarded_recount"]:
        key, field = {"zero": ("ZER", "mechanism"), "mean": ("MEA", "name_mean_ablation"),
                      "resample": ("RES", "name_resample_ablation")}[line["style"]]
        with_, without = (line[f"{label}: named / borderline / none"]
                          for label in ("with the guarded forms", "without them"))
        names = Counter(r[field] for r in solved)
        assert with_ == (f"{len(solved) - names['none'] - names['borderline']} / {names['borderline']}"
                         f" / {names['none']}")  # the recount with them is the recorded names
        out[f"G_{key}_WITH"], out[f"G_{key}_WITHOUT"] = with_, without
    out["G_ZER_WITHOUT_NAMED"], _, out["G_ZER_WITHOUT_NONE"] = out["G_ZER_WITHOUT"].split(" / ")
    out["G_RES_WITHOUT_NONE"] = out["G_RES_WITHOUT"].split(" / ")[2]
    col = "named circuit removed: median loss recovered (zero / mean / resample ablation)"
    parts = [[float(v) for v in s[col].split(" / ")] for s in data["summary"]]
    kept = [v for p in parts for v in p[:2]]
    out["KEEP_LO"], out["KEEP_HI"] = f"{min(kept):.2f}", f"{max(kept):.2f}"
    out["RES_HI"], out["RES_LO"] = f"{max(p[2] for p in parts):.2f}", f"{min(p[2] for p in parts):.2f}"
    for style, key in (("MEAN", "tested_mean"), ("RES", "tested_resample")):
        gain = []
        for r in solved:
            if r["mechanism"] == "theorem3_superposed":
                by = {t["name"]: t["loss_recovered"] for t in r[key]}
                gain.append(by["theorem3_superposed_guarded"] - by["theorem3_superposed"])
        gain.sort()
        out[f"GAIN_{style}_MED"] = f"{(gain[(len(gain) - 1) // 2] + gain[len(gain) // 2]) / 2:.1g}"
        out[f"GAIN_{style}_MAX"] = f"{gain[-1]:.2g}"
    return out


def ties(solved: list[dict]) -> dict[str, str]:
    """The ties recounted from each named run's recorded intervals under zero, mean and resample
    ablation, independently of the library: another faithful construction (signs agreeing) whose
    loss-recovered interval (± 1.96 standard errors) overlaps the named one's, or within 1e-4 of it."""
    out = {}
    styles = (("", "mechanism", "tested"), ("_MEAN", "name_mean_ablation", "tested_mean"),
              ("_RES", "name_resample_ablation", "tested_resample"))
    for kind, prefix in (("bidirectional", "BI"), ("scratch", "SC")):
        for suffix, field, key in styles:
            named = [r for r in solved if r["kind"] == kind and r[field] not in ("none", "borderline")]
            tied = 0
            for r in named:
                by = {t["name"]: t for t in r[key]}
                best = max((by[n] for n in r[field].split(" = ")), key=lambda t: t["loss_recovered"])
                lo, hi = (best["loss_recovered"] + s * 1.96 * best["recovered_se"] for s in (-1, 1))
                tied += any(t["verdict"] == "faithful" and t["name"] != best["name"] and (
                    abs(t["loss_recovered"] - best["loss_recovered"]) <= 1e-4
                    or (t["loss_recovered"] - 1.96 * t["recovered_se"] <= hi
                        and lo <= t["loss_recovered"] + 1.96 * t["recovered_se"])) for t in r[key])
            out[f"TIES_{prefix}{suffix}"] = f"{tied} of {len(named)}"
        named = [r for r in solved if r["kind"] == kind and r["mechanism"] not in ("none", "borderline")]
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
    supg = rows[("causal", "theorem3_superposed_guarded")]
    guarded = [r for r in data["runs"] if r["mechanism"] == "theorem3_superposed_guarded"]
    xx_first = [r["cells_formed"]["L1 -1 at (x, x)"] for r in guarded
                if r["cells_formed"]["L1 -1 at (x, x)"] < min(v for c, v in r["cells_formed"].items()
                                                             if c != "L1 -1 at (x, x)")]
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
            "SUP_ORDER": sup["runs with that order"].replace("/", " of "),
            "SUPG_SPREAD": supg["cells' formation spread (median)"], "SUPG_RUNS": supg["runs"],
            "SUPG_FIRST": -supg["first cell formed - drop (median)"],
            "XX_FIRST": f"{len(xx_first)} of {len(guarded)}",
            "XX_STEPS": f"{min(xx_first)} to {max(xx_first)}"}


def dynamics_fine() -> dict[str, int | float | str]:
    """The 5-step dynamics (assets/dynamics_fine.json): per quoted measure, its median at 5 steps,
    the interval and the runs where it is > 0 or = 0."""
    data = load("dynamics_fine.json")
    rows = {(t["mechanism"], t["measure"]): t for t in data["table"]}
    runs = data["runs"]

    def at(name, measure, key="median at 5 steps"):
        value = rows[(name, measure)][key]
        return f"{value[0]:g}–{value[1]:g}" if isinstance(value, list) else value

    tb, mass, supg = "two_block", "theorem3_two_block_mass", "theorem3_superposed_guarded"
    lead, after = "β progress 0.5: lead on drop", "β progress 0.5 - leave plateau"
    early, spread = "β progress 0.1: lead on leaving", "cells' formation spread"
    faithful = [r for r in runs if r["faithful"] is not None and r["drop"] is not None]
    every = Counter(r["window"][2] for r in runs)
    # theorem3_two_block_mass: its three lookup cells (all but the two layer-2 guard cells), each
    # run's steps before its drop where each forms, and how far apart the three form
    guard = ("L2 1 at (L1.x, pos.Y)", "L2 1 at (L1.x, L1.pos.P)")
    lookups = [[v for c, v in r["cells_formed"].items() if c not in guard]
               for r in runs if r["mechanism"] == mass]
    assert all(len(cells) == 3 for cells in lookups)
    before = [r_drop - v for r_drop, cells in zip(
        (r["drop"] for r in runs if r["mechanism"] == mass), lookups) for v in cells]
    halves = [r["drop"] - r["beta_half_lead"] - r["leave"] for r in runs
              if r["beta_half_lead"] is not None and r["leave"] is not None]
    return {
        "FINE_ALL_AFTER": f"{sum(h >= 0 for h in halves)} of {len(halves)}",
        "FINE_RUNS": len(runs), "FINE_AT5": every[5],
        "MASS5_LOOKUP_FIRST": min(before), "MASS5_LOOKUP_LAST": max(before),
        "MASS5_LOOKUP_SPREAD": max(max(cells) - min(cells) for cells in lookups),
        "FINE_MET": f"{sum(r['replay']['identical'] for r in runs)} of "
                    f"{sum(r['replay']['compared'] for r in runs)}",
        "FINE_BEFORE": f"{sum(r['faithful'] < r['drop'] for r in faithful)} of {len(faithful)}",
        "FINE_AT_DROP": f"{sum(r['faithful'] == r['drop'] for r in faithful)}",
        "TB5_LEAD": at(tb, lead), "TB5_LEAD_CI": at(tb, lead, "95% interval"),
        "TB5_LEADS": at(tb, lead, "> 0").replace("/", " of "),
        "TB5_AFTER": at(tb, after), "TB5_AFTER_CI": at(tb, after, "95% interval"),
        "TB5_AFTERS": at(tb, after, "> 0").replace("/", " of "),
        "TB5_EARLY": at(tb, early), "TB5_EARLY_CI": at(tb, early, "95% interval"),
        "TB5_EARLIES": at(tb, early, "> 0").replace("/", " of "),
        "TB5_SPREAD": at(tb, spread), "TB5_SPREAD_CI": at(tb, spread, "95% interval"),
        "TB5_TOGETHER": at(tb, spread, "= 0").replace("/", " of "),
        "MASS5_LEAD": at(mass, lead), "MASS5_LEAD_CI": at(mass, lead, "95% interval"),
        "MASS5_SPREAD": at(mass, spread), "MASS5_SPREAD_CI": at(mass, spread, "95% interval"),
        "SUPG5_LEAD": at(supg, lead), "SUPG5_LEAD_CI": at(supg, lead, "95% interval"),
        "SUPG5_SPREAD": at(supg, spread), "SUPG5_SPREAD_CI": at(supg, spread, "95% interval"),
    }


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
    none = [r for r in data["runs"] if r["before"]["zero"][0] == "none"]
    out["R_NONE"], out["R_ALL"] = str(len(none)), str(len(data["runs"]))
    for style in ("zero", "mean", "resample", "scrub"):
        key = style.upper()[:3]
        named = [r for r in none if r["names"][style][1]]
        out[f"R_{key}_NOW"] = f"{len(named)} of {len(none)}"
        out[f"R_{key}_GUARDED"] = str(sum(r["names"][style][1].endswith("_guarded")
                                          and not r["names"][style][2] for r in named))
        out[f"R_{key}_TIES"] = str(sum(bool(r["names"][style][2]) for r in named))
        before = sum(r["before"][style][1] is not None for r in none)
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
