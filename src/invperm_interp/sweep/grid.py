"""Sweep grids: a TOML file expanded into named training jobs.

A grid has a ``[model]`` table (any ``ModelConfig`` field, plus ``layout`` = "plain" | "scratch" |
"code", ``d`` and ``n_scratch``), a ``[train]`` table (any ``TrainConfig`` field but ``out_dir``)
and ``seeds`` (an integer n for 0 … n−1, ``{start = a, stop = b}``, or a list). A list is an axis:
the jobs are the product of every axis (write a per-layer ``n_heads`` as a list inside the list,
``n_heads = [[2, 1]]``). Optional ``[[variants]]`` tables, each with a ``name`` and its own ``model``
/ ``train`` tables, are expanded one after another over the base tables (use them for models that
differ in several fields at once). ``solve_mse`` (default 1e-3) is the MSE a run must go below to
count as solved, ``mechanism = true`` names each finished run's mechanism, and ``[slurm]`` holds
``partition``, ``time`` (minutes), ``gpus``, ``cpus_per_task`` and ``jobs_per_task``.

Every value is checked before any job starts; a malformed grid is one ``ValueError`` naming the key.
"""

from __future__ import annotations

import itertools
import re
import sys
from dataclasses import dataclass, fields
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LAYOUT_KEYS = ("layout", "d", "n_scratch")
TOP_KEYS = ("name", "seeds", "model", "train", "variants", "solve_mse", "mechanism", "slurm")
SLURM_KEYS = ("partition", "time", "gpus", "cpus_per_task", "jobs_per_task")


@dataclass(frozen=True)
class Job:
    """One run of a sweep: its directory name under the sweep's folder and its configurations."""

    name: str
    model_cfg: object  # ModelConfig (imported lazily: this module loads without torch)
    train_cfg: object  # TrainConfig


@dataclass(frozen=True)
class Grid:
    name: str
    jobs: tuple[Job, ...]
    solve_mse: float
    mechanism: bool
    slurm: dict


def _error(path: Path, key: str, message: str) -> ValueError:
    return ValueError(f"grid {path}: {key}: {message}")


def _axis(path: Path, key: str, value) -> list:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise _error(path, key, "is an empty axis (give at least one value)")
    return values


def _seeds(path: Path, value) -> list[int]:
    if isinstance(value, dict):
        if set(value) != {"start", "stop"}:
            raise _error(path, "seeds", f"a range is {{start = a, stop = b}}, got keys {sorted(value)}")
        value = list(range(value["start"], value["stop"])) if all(
            isinstance(v, int) and not isinstance(v, bool) for v in value.values()) else None
    elif isinstance(value, int) and not isinstance(value, bool):
        value = list(range(value)) if value >= 1 else []
    if not isinstance(value, list) or not value or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value):
        raise _error(path, "seeds", "must be a count n >= 1, {start = a, stop = b} with a < b, or a "
                                    "non-empty list of integers >= 0")
    if len(set(value)) != len(value):
        raise _error(path, "seeds", f"lists a seed twice: {value}")
    return value


def _model_cfg(values: dict):
    from ..config import ModelConfig
    from ..task import DEFAULT_READOUT, Layout

    values = dict(values)
    kind, d, n_scratch = (values.pop(k, None) for k in LAYOUT_KEYS)
    kind, d = kind or "plain", 10 if d is None else d
    if n_scratch is not None and kind != "scratch":
        raise ValueError("n_scratch needs layout = 'scratch'")
    layout = Layout.named(kind, d, n_scratch)
    if kind in DEFAULT_READOUT:  # the command line's default read-out for this layout
        values.setdefault("readout", DEFAULT_READOUT[kind])
    if isinstance(values.get("n_heads"), list):
        values["n_heads"] = tuple(values["n_heads"])
    return ModelConfig(layout, **values)


def _label(value) -> str:
    text = "-".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return re.sub(r"[^A-Za-z0-9.+-]", "", text)


def load_grid(path: str | Path) -> Grid:
    """Read and check a grid file; every job is built (and so checked) here, nothing is trained."""
    from ..config import ModelConfig, TrainConfig

    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"grid {path} does not exist") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"grid {path} is not TOML: {err}") from None
    for key in data:
        if key not in TOP_KEYS:
            raise _error(path, key, f"unknown key (known: {', '.join(TOP_KEYS)})")
    model_keys = tuple(f.name for f in fields(ModelConfig) if f.name != "layout")
    train_keys = tuple(f.name for f in fields(TrainConfig) if f.name != "out_dir")
    sections = {"model": model_keys + LAYOUT_KEYS, "train": train_keys}
    variants = data.get("variants", [{"name": ""}])
    if not isinstance(variants, list) or not variants or not all(isinstance(v, dict) for v in variants):
        raise _error(path, "variants", "must be a list of tables ([[variants]])")
    seeds = _seeds(path, data.get("seeds", 1))
    jobs, names = [], set()
    for n, variant in enumerate(variants):
        where = f"variants[{n}]." if "variants" in data else ""
        unknown = sorted(set(variant) - {"name", "model", "train"})
        if unknown:
            raise _error(path, f"{where}{unknown[0]}", "unknown key (known: name, model, train)")
        axes: dict[tuple[str, str], list] = {}
        for section, known in sections.items():
            for source, prefix in ((data, ""), (variant, where)):
                table = source.get(section, {})
                if not isinstance(table, dict):
                    raise _error(path, f"{prefix}{section}", "must be a table")
                for key, value in table.items():
                    if key not in known:
                        raise _error(path, f"{prefix}{section}.{key}",
                                     f"unknown field (known: {', '.join(known)})")
                    if section == "train" and key == "seed":
                        raise _error(path, f"{prefix}train.seed", "give seeds at the top level")
                    axes[(section, key)] = _axis(path, f"{prefix}{section}.{key}", value)
        keys = list(axes)
        varying = [k for k in keys if len(axes[k]) > 1]
        label = variant.get("name", "") or ""
        for combo in itertools.product(*(axes[k] for k in keys)):
            chosen = dict(zip(keys, combo))
            for seed in seeds:
                try:
                    model_cfg, train_cfg = _build(chosen, seed)
                except (ValueError, TypeError) as err:
                    raise _error(path, _culprit(where, chosen, str(err)), str(err)) from None
                parts = [f"{k}{_label(chosen[(s, k)])}" for s, k in varying] + [f"seed{seed}"]
                name = "_".join(([label] if label else []) + parts)
                if name in names:
                    raise _error(path, "variants", f"two jobs are both named {name!r} (give each "
                                                   "variant a distinct name)")
                names.add(name)
                jobs.append(Job(name, model_cfg, train_cfg))
    solve = data.get("solve_mse", 1e-3)
    if not isinstance(solve, (int, float)) or isinstance(solve, bool) or not solve > 0:
        raise _error(path, "solve_mse", f"must be a number > 0, got {solve!r}")
    mechanism = data.get("mechanism", False)
    if not isinstance(mechanism, bool):
        raise _error(path, "mechanism", f"must be true or false, got {mechanism!r}")
    slurm = data.get("slurm", {})
    if not isinstance(slurm, dict):
        raise _error(path, "slurm", "must be a table")
    for key, value in slurm.items():
        if key not in SLURM_KEYS:
            raise _error(path, f"slurm.{key}", f"unknown key (known: {', '.join(SLURM_KEYS)})")
        ok = isinstance(value, str) if key == "partition" else (
            isinstance(value, int) and not isinstance(value, bool) and value >= (key == "gpus" and 0 or 1))
        if not ok:
            raise _error(path, f"slurm.{key}", f"bad value {value!r} (partition: a name; time: "
                                               "minutes; gpus, cpus_per_task, jobs_per_task: integers)")
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name:
        raise _error(path, "name", f"must be a non-empty string, got {name!r}")
    return Grid(name, tuple(jobs), float(solve), mechanism, slurm)


def _build(chosen: dict, seed: int):
    """The configurations for one point of the grid."""
    from ..config import TrainConfig

    model_cfg = _model_cfg({k: v for (s, k), v in chosen.items() if s == "model"})
    return model_cfg, TrainConfig(**{k: v for (s, k), v in chosen.items() if s == "train"}, seed=seed)


def _culprit(where: str, chosen: dict, message: str) -> str:
    """The grid key (and value) a config error is about: the configs' messages start with the
    field's name ("readout must …"); layout errors belong to the layout keys."""
    first = message.split(" ", 1)[0].strip("'\"")
    for (section, key), value in chosen.items():
        if key == first or key == "layout" and first in ("segment", "scratch", "layout"):
            return f"{where}{section}.{key} = {value!r}"
    return where + (", ".join(f"{s}.{k} = {v!r}" for (s, k), v in chosen.items()) or "model/train")
