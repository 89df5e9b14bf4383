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

#: CPU seconds of one training step (one thread, Adam), ``fixed + per_unit * units``, per family
#: (``step_model``): "note", the disentangled model, priced by batch·T·(T·ΣD + ΣD²) (attention
#: scores and projections over its widths D); "standard", a standard model trained through its map,
#: by the same count for the widths it is read as; "direct", a standard model in ``d_model`` (with
#: LayerNorm or an MLP, or where that is cheaper), by batch·T·(multiplications per row,
#: ``architecture.row_costs``). Fitted by benchmarks/step_cost.py on 18 runs of the census grids
#: and the standard floor grid, each step timed alone on a quiet core: "note" and "standard" refitted
#: when the training forward stopped multiplying the stream's I_T block (within 0.91-1.12 of the
#: measured step for "note", 0.73-1.22 for "standard"; the count still prices the whole stream, and
#: fits the kept one as well), "direct" as first fitted (0.92-1.07; 0.87-1.15 when measured again).
#: Runs that share a machine's cores and memory take longer than this.
STEP_COST = {"note": (2.52e-3, 20.0e-12), "standard": (7.47e-3, 29.5e-12), "direct": (13.7e-3, 129e-12)}
#: One run's analysis (mechanism on 4,096 samples, 3 batches, mean and resample ablation, minimal
#: circuit): seconds per census run, the mean over a whole ``make census`` (each run's analysis
#: timed from its final weights to its record, two workers on 2 cores): 0.86 s for the plain
#: layout, 3.8 s with scratch rows (their minimal circuits run to 6-23 cells, and the exact search
#: tries every 1-2-cell set).
ANALYSIS_S = {"plain": 0.86, "scratch": 3.8}
RESUME_HINT = "rerun the same command to resume"
MAX_CPU_HOURS = 500  # a sweep estimated above this needs allow_large (--yes)


def job_done(run_dir: Path, analysis: dict | None = None) -> bool:
    """Nothing left to do for this run: it diverged, or it has final weights (and, when the grid
    analyses its runs with the settings ``analysis``, a mechanism record of those weights with all
    they ask, or a model the analyses cannot read: ``training.run.unanalysable``)."""
    run = RunDir(run_dir)
    if run.is_diverged:
        return True
    if not run.is_finished:
        return False
    if analysis is None:
        return True
    from ..analysis.sweep_record import SweepRecord

    record = SweepRecord.of_run(run_dir)  # None: analyse again
    if record is not None and record.lacks(analysis, run.read_config()[0]) == []:
        return True
    from ..training.run import unanalysable

    return unanalysable(run.read_config()[0]) is not None  # its sweep line says why


def _runs(n: int) -> str:
    """``"1 run"``, ``"1,024 runs"``."""
    return f"{n:,} run" + ("" if n == 1 else "s")


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


def step_model(job: Job) -> tuple[str, float, float, float]:
    """How one training step of ``job`` is priced: ``(family, units, fixed, per_unit)``, the step
    costing ``fixed + per_unit * units`` CPU seconds (see ``STEP_COST``)."""
    m, t = job.model_cfg, job.train_cfg.resolved()
    family, per_sample = m.architecture.step_units(m)
    return (family, t.batch_size * per_sample, *STEP_COST[family])


def train_seconds(job: Job) -> float:
    """A rough estimate of one run's training CPU time if it runs all ``steps`` (early stopping
    ends many runs sooner)."""
    _, units, fixed, per_unit = step_model(job)
    t = job.train_cfg.resolved()
    evals = t.steps // t.eval_every * max(1, t.eval_size // t.batch_size)
    return (t.steps + evals) * (fixed + per_unit * units)


def run_memory(job: Job, analysis: dict | None = None) -> int:
    """The estimated peak bytes of one run: its training (``training.footprint.training_estimate``)
    or, where the grid names mechanisms (``analysis``: the grid's settings), its analysis on
    ``samples`` samples (``memory.analysis_estimate`` of the disentangled model it is read as, plus
    what the mean or resample stand-ins hold, ``memory.standin_bytes``), whichever is larger."""
    from .. import memory
    from ..training.footprint import training_estimate
    from ..training.run import unanalysable
    from ..training.single import effective_configs

    m, t, _ = effective_configs(job.model_cfg, job.train_cfg)
    training = training_estimate(m, t.optimizer, t.batch_size, t.eval_size).total
    if analysis is None or unanalysable(m) is not None:  # a run trained, not analysed
        return training
    from ..model.build import analysis_config

    cfg = analysis_config(m)
    n = analysis["samples"]
    standins = [memory.standin_bytes(cfg, n, per_sample) for per_sample, on in
                ((False, analysis.get("mean_ablation")), (True, analysis.get("resample_ablation")))
                if on]
    return max(training, memory.analysis_estimate(cfg, n).total + max(standins, default=0))


def cpu_hours(grid: Grid, indices: list[int]) -> float:
    """The estimated CPU hours of the runs ``indices``: training all their steps, and their
    analysis where the grid names mechanisms."""
    from ..training.run import unanalysable

    def analysis(job: Job) -> float:
        if not grid.mechanism or unanalysable(job.model_cfg) is not None:
            return 0.0
        scratch = any(s.kind == "S" for s in job.model_cfg.layout.segments)
        return ANALYSIS_S["scratch" if scratch else "plain"]

    return sum(train_seconds(grid.jobs[i]) + analysis(grid.jobs[i]) for i in indices) / 3600


def check_size(grid: Grid, allow_large: bool) -> None:
    """A sweep estimated over ``MAX_CPU_HOURS`` of CPU needs ``allow_large`` (``--yes``)."""
    hours = cpu_hours(grid, list(range(len(grid.jobs))))
    if hours > MAX_CPU_HOURS and not allow_large:
        raise ValueError(f"grid {grid.name}: about {hours:,.0f} CPU hours (over "
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
    lines = [f"grid {grid.name}: {_runs(len(grid.jobs))}, {len(grid.jobs) - len(left):,} done, "
             f"{len(left):,} to train or analyse -> {out}"]
    variants: dict[str, list[int]] = {}
    for i, job in enumerate(grid.jobs):
        variants.setdefault(job.variant or grid.name, []).append(i)
    for name, members in variants.items():
        first = grid.jobs[members[0]]
        t = first.train_cfg
        lines.append(f"  {name}: {_runs(len(members))} (d = "
                     f"{', '.join(map(str, sorted({grid.jobs[i].model_cfg.d for i in members})))}, "
                     f"up to {max(grid.jobs[i].train_cfg.steps for i in members):,} steps, "
                     f"batch {t.resolved().batch_size}"
                     + (f", stop at MSE < {t.stop_at_mse:g}" if t.stop_at_mse else "") + ")")
    gpu = sum(uses_gpu(grid, grid.jobs[u[0]], executor) for u in todo)
    lines.append(f"units of work: {len(todo):,} ({gpu:,} GPU buckets, {len(todo) - gpu:,} CPU units"
                 + (f", up to {_runs(grid.slurm['jobs_per_task'])} per task"
                    if executor != "local" and "jobs_per_task" in grid.slurm else "") + ")")
    hours = cpu_hours(grid, left)
    parallel = workers if executor == "local" else max(1, len(todo))
    lines.append(f"CPU time: about {_duration(hours, 'CPU ')} ({'with' if grid.mechanism else 'no'} "
                 f"analysis; every step of every run as one quiet core runs it: early stopping "
                 f"makes it less, shared cores more)"
                 + (f", {_duration(hours / parallel)} of wall time on {parallel} workers"
                    if executor == "local" else ""))
    if executor != "local":
        limit = grid.slurm.get("time", 60) / 60
        over = [hours for hours in (cpu_hours(grid, u) for u in todo) if hours > limit]
        if over:
            lines.append(f"{len(over):,} of {len(todo):,} tasks may run past slurm.time "
                         f"({limit * 60:g} minutes; the longest about {_duration(max(over))}): "
                         f"they checkpoint at the limit, and {RESUME_HINT}")
    peak = max((run_memory(grid.jobs[i], grid.analysis) for i in left), default=0)
    lines.append(f"memory: about {format_bytes(peak)} per run at most"
                 + (f", {format_bytes(peak * min(workers, max(1, len(todo))))} for {workers} workers"
                    if executor == "local" else ""))
    if hours > MAX_CPU_HOURS:
        lines.append(f"over {MAX_CPU_HOURS} CPU hours: the sweep needs --yes")
    if len(grid.jobs) > MAX_RUNS:
        lines.append(f"over {MAX_RUNS:,} runs: the sweep needs --yes")
    return "\n".join(lines)
