"""Sweep grids: a TOML file expanded into named training jobs.

A grid has a ``[model]`` table (any ``ModelConfig`` field, plus ``layout`` = "plain" | "scratch" |
"code", ``d`` and ``n_scratch``), a ``[train]`` table (any ``TrainConfig`` field but ``out_dir``)
and ``seeds`` (see ``seeds``: a count, a range, a list, or lists per axis value such as
``{default = 16, "d=10" = 64}``). A list is an axis: the jobs are the product of every axis (write a
per-layer ``n_heads`` as a list inside the list, ``n_heads = [[2, 1]]``). Optional ``[[variants]]``
tables, each with a ``name`` (a plain name: it starts the run folders' names) and its own ``model``
/ ``train`` tables and ``seeds``, are expanded one after another over the base tables (use them for
models that differ in several fields at once). ``name`` (a plain name; default: the file's name,
which must then be one) names the sweep folder, ``runs/<name>``. ``solve_mse`` (default 1e-3) is
the MSE a run must go below to count as solved; ``mechanism = true`` (or a table of
``DEFAULT_ANALYSIS``'s keys) analyses each finished run (its mechanism, faithfulness and minimal
circuit; a run the analyses cannot read is recorded as refused, with why); ``[slurm]`` holds
``partition``, ``time`` (minutes, at least 4: Slurm's checkpoint signal may come 150 s before the
limit), ``gpus``, ``cpus_per_task``, ``jobs_per_task`` and ``array_parallelism`` (tasks running at
once).

Every value is checked before any job starts; a malformed grid is one ``ValueError`` naming the key.
For ``--executor slurm`` a run on ``device = "cuda"`` needs ``[slurm] gpus`` (a task gets no GPU
without it, so every run would fail).
A grid with no ``[model]`` or ``[train]`` value (top level or in a variant) is refused (it would
train default runs), and one of more than ``MAX_RUNS`` runs needs ``allow_large`` (``invperm sweep --yes``).
"""

from __future__ import annotations

import itertools
import math
import re
import sys
from dataclasses import dataclass, fields
from pathlib import Path

from ..errors import ConfigError, check_seed
from .seeds import SeedError, Seeds

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LAYOUT_KEYS = ("layout", "d", "n_scratch")
LAYOUT_FIELDS = ("segments", "scratch", "specs")  # a Layout's errors the grid reports at its `layout`
TOP_KEYS = ("name", "seeds", "model", "train", "variants", "solve_mse", "mechanism", "slurm")
VARIANT_KEYS = ("name", "model", "train", "seeds")
SLURM_KEYS = ("partition", "time", "gpus", "cpus_per_task", "jobs_per_task", "array_parallelism")
SIGNAL_LEAD_S = 90  # submitit asks Slurm for USR2 this long before a task's time limit
SLURM_TICK_S = 60  # Slurm sends that signal on its once-a-minute check: up to this much earlier
MIN_TASK_S = 60  # the least a task must be sure of before the signal (a run's start, a checkpoint)
MAX_RUNS = 10_000  # a grid with more runs needs allow_large (--yes)
HARD_MAX_RUNS = 200_000  # refused even then: split the grid
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
#: ``mechanism = {...}``: a verdict's samples and generator seed, the evaluation batches the name is
#: measured on (seeds ``seed``, ``seed + 1``, …: is it stable?) and whether it is also named under
#: mean ablation and under resample ablation.
DEFAULT_ANALYSIS = {"samples": 4096, "seed": 0, "batches": 1, "mean_ablation": False,
                    "resample_ablation": False}
_ANALYSIS_HINT = ("must be true, false or {samples = n >= 2, seed = s in [0, 2^62), batches = k >= 1, "
                  "mean_ablation = true/false, resample_ablation = true/false}")


@dataclass(frozen=True)
class Job:
    """One run of a sweep: its directory name under the sweep's folder and its configurations."""

    name: str
    model_cfg: object  # ModelConfig (imported lazily: this module loads without torch)
    train_cfg: object  # TrainConfig
    variant: str = ""


@dataclass(frozen=True)
class Grid:
    """A grid file, checked and expanded (:func:`load_grid`): its name, one :class:`Job` per run,
    the MSE a run counts as solved below, the analysis settings and the ``[slurm]`` table."""

    name: str
    jobs: tuple[Job, ...]
    solve_mse: float
    analysis: dict | None  # {"samples", "seed"} when each finished run is analysed, else None
    slurm: dict

    @property
    def mechanism(self) -> bool:
        return self.analysis is not None


def _error(path: Path, key: str, message: str) -> ValueError:
    return ValueError(f"grid {path}: {key}: {message}")


def _axis(path: Path, key: str, value) -> list:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise _error(path, key, "is an empty axis (give at least one value)")
    return values


def _model_cfg(values: dict):
    from ..config import ModelConfig
    from ..task import DEFAULT_READOUT, Layout

    values = dict(values)
    kind, d, n_scratch = (values.pop(k, None) for k in LAYOUT_KEYS)
    kind, d = kind or "plain", 10 if d is None else d
    if n_scratch is not None and kind != "scratch":
        raise ConfigError("n_scratch", "n_scratch needs layout = 'scratch'")
    layout = Layout.named(kind, d, n_scratch)
    if kind in DEFAULT_READOUT:  # the command line's default read-out for this layout
        values.setdefault("readout", DEFAULT_READOUT[kind])
    if isinstance(values.get("n_heads"), list):
        values["n_heads"] = tuple(values["n_heads"])
    return ModelConfig(layout, **values)


def _label(value) -> str:
    text = "-".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return re.sub(r"[^A-Za-z0-9.+-]", "", text)


def _read(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"grid {path} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"grid {path} is a directory, not a TOML file") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"grid {path} is not TOML: {err}") from None


def _variant_name(path: Path, where: str, variant: dict) -> str:
    name = variant.get("name", "")
    if not isinstance(name, str) or name and not NAME.fullmatch(name):
        raise _error(path, f"{where}name", "must be a plain name (letters, digits, '.', '_', '+', "
                                           f"'-'; no '/' or leading '.'), got {name!r}")
    return name


def load_grid(path: str | Path, allow_large: bool = False, executor: str | None = None) -> Grid:
    """Read and check a grid file (for ``executor``, when given); every job is built (and so
    checked) here, nothing is trained."""
    from ..config import ModelConfig, TrainConfig

    path = Path(path)
    data = _read(path)
    for key in data:
        if key not in TOP_KEYS:
            raise _error(path, key, f"unknown key (known: {', '.join(TOP_KEYS)})")
    model_keys = tuple(f.name for f in fields(ModelConfig) if f.name != "layout")
    train_keys = tuple(f.name for f in fields(TrainConfig) if f.name != "out_dir")
    sections = {"model": model_keys + LAYOUT_KEYS, "train": train_keys}
    variants = data.get("variants", [{"name": ""}])
    if not isinstance(variants, list) or not variants or not all(isinstance(v, dict) for v in variants):
        raise _error(path, "variants", "must be a list of tables ([[variants]])")
    top_seeds = _seeds(path, "seeds", data.get("seeds", 1), sections)
    plans = []
    for n, variant in enumerate(variants):
        where = f"variants[{n}]." if "variants" in data else ""
        unknown = sorted(set(variant) - set(VARIANT_KEYS))
        if unknown:
            raise _error(path, f"{where}{unknown[0]}", f"unknown key (known: {', '.join(VARIANT_KEYS)})")
        label = _variant_name(path, where, variant)
        seeds = _seeds(path, f"{where}seeds", variant["seeds"], sections) if "seeds" in variant \
            else top_seeds
        plans.append((where, label, _axes(path, data, variant, where, sections), seeds))
    settings = (_name(path, data), _solve(path, data), _analysis(path, data), _slurm(path, data))
    tables = [data, *(variants if "variants" in data else [])]
    if not any(t.get(s) for t in tables for s in ("model", "train")):
        raise _error(path, "model/train/variants", "the grid is empty (it would train default "
                                                   "runs); give a [model], [train] or [[variants]] value")
    total = sum(math.prod(len(v) for v in axes.values()) * seeds.most for _, _, axes, seeds in plans)
    if total > HARD_MAX_RUNS or total > MAX_RUNS and not allow_large:
        hint = "split it into several grids" if total > HARD_MAX_RUNS else \
            "check it with --dry-run, then pass --yes"
        raise _error(path, "seeds/axes", f"the grid has up to {total:,} runs, over "
                                         f"{HARD_MAX_RUNS if total > HARD_MAX_RUNS else MAX_RUNS:,}: "
                                         f"{hint}")
    jobs, names = [], set()
    for where, label, axes, seeds in plans:
        jobs += _expand(path, where, label, axes, seeds, names)
    for seeds in {id(s): s for *_, s in plans}.values():
        try:
            seeds.check_used()
        except SeedError as err:
            raise _error(path, err.key, str(err)) from None
    name, solve, analysis, slurm = settings
    if executor == "slurm" and not slurm.get("gpus"):
        _no_cuda_without_gpus(path, data, jobs)
    return Grid(name, tuple(jobs), solve, analysis, slurm)


def _no_cuda_without_gpus(path: Path, data: dict, jobs: list[Job]) -> None:
    """Refuse runs on CUDA in Slurm tasks that ask for no GPU (Slurm gives them none), naming the
    ``train.device`` that asks for it."""
    cuda = next((j.train_cfg.device for j in jobs if j.train_cfg.device.startswith("cuda")), None)
    if cuda is None:
        return
    where = ""  # the first table (top level, then each variant) that gives it
    for prefix, table in [("", data)] + [(f"variants[{n}].", v)
                                          for n, v in enumerate(data.get("variants", []))]:
        device = table.get("train", {}).get("device")
        if cuda in (device if isinstance(device, list) else [device]):
            where = prefix
            break
    raise _error(path, f"{where}train.device", f"device = {cuda!r} on Slurm needs [slurm] gpus = N: "
                                               "a task that asks for no GPU gets none; give gpus, or "
                                               "device = \"auto\" to train on the task's CPUs")


class _SeedPlan:
    """``Seeds`` with the grid's file for its errors and the longest list (for counting runs)."""

    def __init__(self, path: Path, seeds: Seeds):
        self.path, self.seeds = path, seeds
        self.most = max([len(s) for s in seeds.by_value.values()]
                        + ([len(seeds.default)] if seeds.default else []))

    def for_point(self, values: dict) -> list[int]:
        try:
            return self.seeds.for_point(values)
        except SeedError as err:
            raise _error(self.path, err.key, str(err)) from None

    def check_used(self) -> None:
        self.seeds.check_used()


def _seeds(path: Path, key: str, value, sections: dict) -> _SeedPlan:
    try:
        return _SeedPlan(path, Seeds(key, value, sections["model"] + sections["train"]))
    except SeedError as err:
        raise _error(path, err.key, str(err)) from None


def _axes(path: Path, data: dict, variant: dict, where: str, sections: dict) -> dict:
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
                    raise _error(path, f"{prefix}train.seed", "give seeds at the top level or in "
                                                              "[[variants]] (seeds = ...)")
                axes[(section, key)] = _axis(path, f"{prefix}{section}.{key}", value)
    return axes


def _expand(path: Path, where: str, label: str, axes: dict, seeds: _SeedPlan, names: set) -> list[Job]:
    keys = list(axes)
    varying = [k for k in keys if len(axes[k]) > 1]
    jobs = []
    for combo in itertools.product(*(axes[k] for k in keys)):
        chosen = dict(zip(keys, combo))
        values = {"d": 10} | {k: v for (_, k), v in chosen.items()}
        for seed in seeds.for_point(values):
            model_cfg, train_cfg = _build(path, where, chosen, seed)
            parts = [f"{k}{_label(chosen[(s, k)])}" for s, k in varying] + [f"seed{seed}"]
            name = "_".join(([label] if label else []) + parts)
            if name in names:
                raise _error(path, "variants", f"two jobs are both named {name!r} (give each "
                                               "variant a distinct name)")
            names.add(name)
            jobs.append(Job(name, model_cfg, train_cfg, label))
    return jobs


def _solve(path: Path, data: dict) -> float:
    solve = data.get("solve_mse", 1e-3)
    if not isinstance(solve, (int, float)) or isinstance(solve, bool) or not solve > 0:
        raise _error(path, "solve_mse", f"must be a number > 0, got {solve!r}")
    return float(solve)


def _analysis(path: Path, data: dict) -> dict | None:
    value = data.get("mechanism", False)
    if isinstance(value, bool):
        return dict(DEFAULT_ANALYSIS) if value else None
    least = {"samples": 2, "batches": 1}

    def valid(key, v) -> bool:
        if key.endswith("_ablation"):
            return isinstance(v, bool)
        return isinstance(v, int) and not isinstance(v, bool) and v >= least[key]

    if not isinstance(value, dict):
        raise _error(path, "mechanism", f"{_ANALYSIS_HINT}, got {value!r}")
    for key, v in value.items():
        if key == "seed":  # the bound of every seed: --seed's, the runs'
            try:
                check_seed("seed", v)
            except ConfigError as err:
                raise _error(path, "mechanism.seed", str(err)) from None
        elif key not in DEFAULT_ANALYSIS or not valid(key, v):
            raise _error(path, f"mechanism.{key}", f"{_ANALYSIS_HINT}, got {key} = {v!r}")
    return DEFAULT_ANALYSIS | value


def _slurm(path: Path, data: dict) -> dict:
    slurm = data.get("slurm", {})
    if not isinstance(slurm, dict):
        raise _error(path, "slurm", "must be a table")
    for key, value in slurm.items():
        if key not in SLURM_KEYS:
            raise _error(path, f"slurm.{key}", f"unknown key (known: {', '.join(SLURM_KEYS)})")
        ok = isinstance(value, str) and bool(value) if key == "partition" else (
            isinstance(value, int) and not isinstance(value, bool) and value >= (0 if key == "gpus" else 1))
        if not ok:
            raise _error(path, f"slurm.{key}", f"bad value {value!r} (partition: a name; time: "
                                               "minutes; gpus, cpus_per_task, jobs_per_task, "
                                               "array_parallelism: integers)")
    sure = slurm.get("time", 60) * 60 - SIGNAL_LEAD_S - SLURM_TICK_S
    if sure < MIN_TASK_S:
        least = math.ceil((MIN_TASK_S + SIGNAL_LEAD_S + SLURM_TICK_S) / 60)
        raise _error(path, "slurm.time", f"{slurm['time']} minute(s) leaves a task {max(sure, 0)} s "
                                         f"for sure: Slurm tells it to checkpoint {SIGNAL_LEAD_S} s "
                                         f"before its end, on a once-a-minute check, so up to "
                                         f"{SIGNAL_LEAD_S + SLURM_TICK_S} s before; give at least "
                                         f"{least}")
    return slurm


def _name(path: Path, data: dict) -> str:
    """The grid's ``name`` (its sweep folder's), else its file's stem; a stem that is not a plain
    name is refused, not mended: two files (``my grid``, ``my_grid``) would share one folder."""
    plain = "a plain name (letters, digits, '.', '_', '+', '-')"
    if "name" not in data:
        if not NAME.fullmatch(path.stem):
            raise _error(path, "name", f"the grid's name defaults to its file name {path.stem!r}, "
                                       f"which is not {plain}: add name = \"...\" to the grid")
        return path.stem
    name = data["name"]
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise _error(path, "name", f"must be {plain}, got {name!r}")
    return name


def _build(path: Path, where: str, chosen: dict, seed: int) -> tuple:
    """The (model, train) configurations for one point of the grid; a bad value is one error
    naming its key in the section whose configuration refused it (both have ``dtype``, ``init``)."""
    from ..config import TrainConfig

    build = {"model": _model_cfg, "train": lambda values: TrainConfig(**values, seed=seed)}
    configs = []
    for section, make in build.items():
        try:
            configs.append(make({k: v for (s, k), v in chosen.items() if s == section}))
        except (ValueError, TypeError) as err:
            raise _error(path, _culprit(where, chosen, section, err), str(err)) from None
    return tuple(configs)


def _culprit(where: str, chosen: dict, section: str, err: Exception) -> str:
    """The grid key (and value) a config error is about: a :class:`ConfigError`'s ``field`` in
    ``section``; the layout's own fields belong to the ``layout`` key."""
    name = getattr(err, "field", None)
    name = "layout" if name in LAYOUT_FIELDS else name
    if (section, name) in chosen:
        return f"{where}{section}.{name} = {chosen[(section, name)]!r}"
    return where + (", ".join(f"{s}.{k} = {v!r}" for (s, k), v in chosen.items()) or "model/train")
