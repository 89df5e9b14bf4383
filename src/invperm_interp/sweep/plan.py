"""What a sweep will do before it does it: which runs are left, how they are grouped into units of
work, and a rough estimate of the CPU time and memory they need (``invperm sweep --dry-run``).

Units: on a CPU one run each (vectorising does not pay there), or ``jobs_per_task`` runs each on
Slurm (trained one after another in one task, which then pays start-up once); on a GPU one bucket
of same-shape runs (``bucket_key``), cut into ``jobs_per_task`` pieces on Slurm. Whether runs go to
a GPU is read off the grid (``device = "cuda"`` or ``[slurm] gpus``), not off the submitting host.
"""

from __future__ import annotations

from pathlib import Path

from ..runs.directory import RunDir
from .grid import MAX_RUNS, Grid, Job

# CPU time of one training step, fitted on the census's runs (one thread, Adam): a fixed cost plus
# one proportional to batch·T·(T·ΣD + ΣD²) (attention scores and projections over the widths D).
STEP_FIXED_S = 1.4e-3
STEP_PER_UNIT_S = 22.8e-12
#: One run's analysis (mechanism on 4,096 samples, 3 batches, mean and resample ablation, minimal
#: circuit): CPU seconds per census run, weighted as the census's d = 6, 8, 10, 12 (10 runs
#: re-analysed in one process at load ~1.3): 1.8 s for the plain layout, 10.0 s with scratch rows
#: (their minimal circuits run to 6-23 cells, and the exact search tries every 1-2-cell set).
ANALYSIS_S = {"plain": 1.8, "scratch": 10.0}
#: A standard model's step in ``d_model`` (its direct forward, ``model.standard.row_costs``): CPU
#: seconds per unit of batch·T·(multiplications per row), measured beside the disentangled model's
#: unit above on one machine (one thread, batch 128 and 1,024): 2.5 times its cost per unit. A
#: standard model that runs through its map costs what the disentangled model of its widths does.
STANDARD_PER_UNIT_S = 57e-12
MAX_CPU_HOURS = 500  # a sweep estimated above this needs allow_large (--yes)


def job_done(run_dir: Path, analysis: dict | None = None) -> bool:
    """Nothing left to do for this run: it diverged, or it has final weights (and, when the grid
    analyses its runs with the settings ``analysis``, a mechanism record with all they ask)."""
    run = RunDir(run_dir)
    if run.is_diverged:
        return True
    if not run.is_finished:
        return False
    if analysis is None:
        return True
    from ..analysis.sweep_record import SweepRecord

    try:
        return run.mechanism.is_file() and SweepRecord.read(run.mechanism).lacks(analysis) == []
    except ValueError:  # cut short, or of another version: analyse again
        return False


def uses_gpu(grid: Grid, job: Job, executor: str) -> bool:
    """Whether the run trains on a GPU where it runs (decided from the grid, not from this host)."""
    device = job.train_cfg.device
    if device.startswith("cuda"):
        return True
    if device != "auto":
        return False
    if executor == "local":
        import torch

        return torch.cuda.is_available()
    return grid.slurm.get("gpus", 0) > 0


def _bucket(job: Job) -> tuple:
    """Runs with equal keys share one vectorised step (``training.many.bucket_key`` without the
    device, which is resolved where the runs train)."""
    from ..training.single import effective_configs

    m, t, _ = effective_configs(job.model_cfg, job.train_cfg)
    return (m.layout, m.heads, m.attention_dir, m.readout, m.dtype, t.batch_size, t.optimizer,
            t.recipe == "paper")


def units(grid: Grid, out: Path, executor: str = "local") -> list[list[int]]:
    """Indices of the runs with work left, grouped into units (see the module docstring),
    longest first."""
    todo = [i for i, job in enumerate(grid.jobs) if not job_done(out / job.name, grid.analysis)]
    per = grid.slurm.get("jobs_per_task") if executor != "local" else None
    groups: dict[tuple, list[int]] = {}
    for i in todo:
        job = grid.jobs[i]
        key = ("gpu", _bucket(job)) if uses_gpu(grid, job, executor) else ("cpu",) if per else (i,)
        groups.setdefault(key, []).append(i)
    result = []
    for members in groups.values():
        size = per or len(members)
        result += [members[k:k + size] for k in range(0, len(members), size)]
    return sorted(result, key=lambda u: -sum(train_seconds(grid.jobs[i]) for i in u))


def train_seconds(job: Job) -> float:
    """A rough upper bound on one run's training CPU time (all ``steps``; early stopping ends
    many runs sooner)."""
    m, t = job.model_cfg, job.train_cfg.resolved()
    widths = m.widths
    work = t.batch_size * m.T * (m.T * sum(widths) + sum(w * w for w in widths))
    per_unit = STEP_PER_UNIT_S
    if m.arch == "standard":
        from ..model.standard import note_is_cheaper, row_costs

        if not note_is_cheaper(m):
            work, per_unit = t.batch_size * m.T * row_costs(m)[1], STANDARD_PER_UNIT_S
    evals = t.steps // t.eval_every * max(1, t.eval_size // t.batch_size)
    return (t.steps + evals) * (STEP_FIXED_S + per_unit * work)


def run_memory(job: Job, analysis: dict | None = None) -> int:
    """The estimated peak bytes of one run: its training (``training.footprint.training_estimate``)
    or, where the grid names mechanisms (``analysis``: the grid's settings), its analysis on
    ``samples`` samples (``memory.analysis_estimate`` of the disentangled model it is read as, plus
    what the mean or resample stand-ins hold, ``memory.standin_bytes``), whichever is larger."""
    from .. import memory
    from ..training.footprint import training_estimate
    from ..training.single import effective_configs

    m, t, _ = effective_configs(job.model_cfg, job.train_cfg)
    training = training_estimate(m, t.optimizer, t.batch_size, t.eval_size).total
    if analysis is None:
        return training
    cfg = m
    if m.arch == "standard":
        from ..model.note_map import disentangled_config

        cfg = disentangled_config(m)
    n = analysis["samples"]
    standins = [memory.standin_bytes(cfg, n, per_sample) for per_sample, on in
                ((False, analysis.get("mean_ablation")), (True, analysis.get("resample_ablation")))
                if on]
    return max(training, memory.analysis_estimate(cfg, n).total + max(standins, default=0))


def cpu_hours(grid: Grid, indices: list[int]) -> float:
    def analysis(job: Job) -> float:
        if not grid.mechanism:
            return 0.0
        scratch = any(s.kind == "S" for s in job.model_cfg.layout.segments)
        return ANALYSIS_S["scratch" if scratch else "plain"]

    return sum(train_seconds(grid.jobs[i]) + analysis(grid.jobs[i]) for i in indices) / 3600


def check_size(grid: Grid, allow_large: bool) -> None:
    """A sweep estimated over ``MAX_CPU_HOURS`` of CPU needs ``allow_large`` (``--yes``)."""
    hours = cpu_hours(grid, list(range(len(grid.jobs))))
    if hours > MAX_CPU_HOURS and not allow_large:
        raise ValueError(f"grid {grid.name}: about {hours:,.0f} CPU hours at most (over "
                         f"{MAX_CPU_HOURS}): check it with --dry-run, then pass --yes")


def _duration(hours: float, what: str = "") -> str:
    """``hours`` in the unit that shows it: "12.5 CPU hours", "40 CPU minutes", "9 CPU seconds"
    (a small grid is not "0.0 CPU hours")."""
    if hours >= 1:
        return f"{hours:,.1f} {what}hours"
    if hours * 60 >= 1:
        return f"{hours * 60:,.0f} {what}minutes"
    return f"{max(hours * 3600, 1):,.0f} {what}seconds"


def dry_run(grid: Grid, out: Path, executor: str, workers: int) -> str:
    """What ``invperm sweep`` would do, in words: runs (done and left, per variant), units of
    work, CPU time and memory. Nothing is written."""
    from ..memory import format_bytes

    todo = units(grid, out, executor)
    left = sorted(i for u in todo for i in u)
    lines = [f"grid {grid.name}: {len(grid.jobs):,} runs, {len(grid.jobs) - len(left):,} done, "
             f"{len(left):,} to train or analyse -> {out}"]
    variants: dict[str, list[int]] = {}
    for i, job in enumerate(grid.jobs):
        variants.setdefault(job.variant or grid.name, []).append(i)
    for name, members in variants.items():
        first = grid.jobs[members[0]]
        t = first.train_cfg
        lines.append(f"  {name}: {len(members):,} runs (d = "
                     f"{', '.join(map(str, sorted({grid.jobs[i].model_cfg.d for i in members})))}, "
                     f"up to {max(grid.jobs[i].train_cfg.steps for i in members):,} steps, "
                     f"batch {t.resolved().batch_size}"
                     + (f", stop at MSE < {t.stop_at_mse:g}" if t.stop_at_mse else "") + ")")
    gpu = sum(uses_gpu(grid, grid.jobs[u[0]], executor) for u in todo)
    lines.append(f"units of work: {len(todo):,} ({gpu:,} GPU buckets, {len(todo) - gpu:,} CPU units"
                 + (f", up to {grid.slurm['jobs_per_task']} runs per task"
                    if executor != "local" and "jobs_per_task" in grid.slurm else "") + ")")
    hours = cpu_hours(grid, left)
    parallel = workers if executor == "local" else max(1, len(todo))
    lines.append(f"CPU time: at most about {_duration(hours, 'CPU ')} "
                 f"({'with' if grid.mechanism else 'no'} analysis; early stopping ends runs sooner)"
                 + (f", {_duration(hours / parallel)} of wall time on {parallel} workers"
                    if executor == "local" else ""))
    peak = max((run_memory(grid.jobs[i], grid.analysis) for i in left), default=0)
    lines.append(f"memory: about {format_bytes(peak)} per run at most"
                 + (f", {format_bytes(peak * min(workers, max(1, len(todo))))} for {workers} workers"
                    if executor == "local" else ""))
    if hours > MAX_CPU_HOURS:
        lines.append(f"over {MAX_CPU_HOURS} CPU hours: the sweep needs --yes")
    if len(grid.jobs) > MAX_RUNS:
        lines.append(f"over {MAX_RUNS:,} runs: the sweep needs --yes")
    return "\n".join(lines)
