"""Many models at once: ``train_many(jobs)``, each job a ``(ModelConfig, TrainConfig)``.

Every job is the run ``train`` would make of it: its own init, data and eval streams, run directory
(same files, loadable with ``from_run``, resumable by ``train`` or ``train_many``), metrics and
early stopping. Jobs whose shapes agree (:func:`bucket_key`) can be trained as one vectorised model:
every parameter and Adam moment gains a leading instance axis, one ``vmap`` of the training forward
(the same forward ``train`` calls) computes all losses, and each instance's
model and optimizer keep views into the stacked tensors, so evaluation, checkpoints and the final
weights are written by the very code ``train`` uses. Learning rates, schedules, lengths, seeds and
stopping rules may differ inside a bucket; an instance that stops, finishes or diverges leaves it
and the others go on.

Vectorising pays on a GPU. On the CPU it does not (an instance axis only adds work to a step that
is already compute-bound: benchmarks/train_many.py), so there ``train_many`` trains the jobs one
after another with ``train``; run several processes for parallelism (``invperm sweep``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from .. import memory
from ..config import ModelConfig, TrainConfig
from ..runs.directory import RunDir
from ..task import mse, sample_batch
from .cpu import threads_for
from .footprint import training_estimate
from .optim import ADAM_BETAS, ADAM_EPS
from .progress import progress_bar
from .run import Run, resolve_device
from .schedule import learning_rate
from .signals import StopRequest
from .single import effective_configs, train
from .trainer import Diverged, Trainer


@dataclass
class Failed:
    """A job that diverged: the step and the error ``train`` would have raised."""

    model_cfg: ModelConfig
    train_cfg: TrainConfig
    step: int
    error: str
    dir: Path | None = None


def bucket_key(model_cfg: ModelConfig, train_cfg: TrainConfig) -> tuple:
    """Jobs with equal keys can share one vectorised step: same shapes, mask, read-out, dtype,
    batch size, device and update rule (init, seeds, lr, schedule, steps and stopping may differ)."""
    m, t, _ = effective_configs(model_cfg, train_cfg)
    return (m.layout, m.heads, m.attention_dir, m.readout, m.dtype, m.arch, m.d_model, m.d_head,
            m.layernorm, m.d_mlp, t.batch_size,
            resolve_device(t.device).type, t.optimizer, t.recipe == "paper")


def train_many(
    jobs: Sequence[tuple[ModelConfig, TrainConfig]], *, resume: bool = False,
    vectorize: bool | None = None, progress: bool = True,
) -> list[Run | Failed]:
    """Train every job; return one :class:`Run` (or :class:`Failed`) per job, in order.

    ``resume=True`` continues every job whose ``out_dir`` already holds a run (a finished one is
    returned as it is, a diverged one as its :class:`Failed` record) and starts the others.
    ``vectorize``: train each bucket of same-shape jobs as one model (None: on a GPU only, where
    it pays; on the CPU the jobs run one after another). A job that diverges stops alone: it is
    returned as :class:`Failed` and its run directory gets ``diverged.json``.
    """
    jobs = list(jobs)
    if not jobs:
        return []
    for i, job in enumerate(jobs):
        if not (isinstance(job, tuple) and len(job) == 2):
            raise ValueError(f"jobs[{i}] must be a (ModelConfig, TrainConfig) pair, got {job!r}")
        effective_configs(*job)  # a bad config fails here, before any training
    dirs = [str(Path(t.out_dir).resolve()) for _, t in jobs if t.out_dir is not None]
    if len(set(dirs)) != len(dirs):
        repeated = sorted({d for d in dirs if dirs.count(d) > 1})
        raise ValueError(f"jobs must have distinct out_dir, got {repeated} more than once")
    results: list[Run | Failed | None] = [None] * len(jobs)
    todo = []
    for i, (model_cfg, train_cfg) in enumerate(jobs):
        record = _diverged_record(train_cfg) if resume else None
        if record is not None:
            results[i] = Failed(model_cfg, train_cfg, record["step"], record["error"],
                                Path(train_cfg.out_dir))
        else:
            todo.append(i)
    if vectorize is None:
        vectorize = any(resolve_device(jobs[i][1].device).type == "cuda" for i in todo)
    buckets: dict[tuple, list[int]] = {}
    for i in todo:
        buckets.setdefault(bucket_key(*jobs[i]) if vectorize else (i,), []).append(i)
    for members in buckets.values():
        if len(members) == 1 or not vectorize:
            for i in members:
                results[i] = _train_one(*jobs[i], resume=resume, progress=progress)
        else:
            runs = _train_bucket([jobs[i] for i in members], resume=resume, progress=progress)
            for i, r in zip(members, runs):
                results[i] = r
    return results


def _holds_run(train_cfg: TrainConfig) -> bool:
    return train_cfg.out_dir is not None and RunDir(train_cfg.out_dir).config.is_file()


def _diverged_record(train_cfg: TrainConfig) -> dict | None:
    if train_cfg.out_dir is None:
        return None
    return RunDir(train_cfg.out_dir).read_diverged()


def _record_failure(model_cfg: ModelConfig, train_cfg: TrainConfig, err: Diverged) -> Failed:
    """The job's :class:`Failed` (its run directory's ``diverged.json`` is the trainer's)."""
    return Failed(model_cfg, train_cfg, err.step, str(err),
                  None if train_cfg.out_dir is None else Path(train_cfg.out_dir))


def _train_one(model_cfg: ModelConfig, train_cfg: TrainConfig, *, resume: bool,
               progress: bool) -> Run | Failed:
    try:
        return train(model_cfg, train_cfg, resume=resume and _holds_run(train_cfg),
                     progress=progress)
    except Diverged as err:
        return _record_failure(model_cfg, train_cfg, err)


# -- the vectorised bucket ----------------------------------------------------------------------
class _NoBar:
    """What ``Trainer`` reports its losses to inside a bucket (the bucket has one bar)."""

    def set_postfix(self, *args, **kwargs) -> None:
        pass


class _Stack:
    """The bucket's live instances: parameters ``(N, …)`` (leaves), Adam moments ``(N, …)`` and
    step counts ``(N,)``, with every instance's model parameters and optimizer state pointed at
    its slice, so that anything reading one instance's model sees the current weights."""

    def __init__(self, trainers: list[Trainer]):
        self.trainers = trainers
        first = trainers[0]
        self.names = [n for n, _ in first.model.named_parameters()]
        per = [dict(t.model.named_parameters()) for t in trainers]
        self.params = {n: torch.stack([p[n].detach() for p in per]).requires_grad_() for n in self.names}
        self.adam = first.cfg.optimizer == "adam"
        if self.adam:
            self.exp_avg, self.exp_avg_sq = {}, {}
            for n in self.names:
                states = [t.optimizer.state.get(p[n], {}) for t, p in zip(trainers, per)]
                for key, into in (("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)):
                    into[n] = torch.stack([s[key].detach() if key in s else torch.zeros_like(p[n])
                                           for s, p in zip(states, per)])
            # One step-count vector per parameter, as torch keeps one count per parameter.
            self.counts = {n: torch.tensor([float(t.optimizer.state.get(p[n], {}).get("step", 0))
                                            for t, p in zip(trainers, per)], device=first.device)
                           for n in self.names}
        with torch.no_grad():
            for i, (t, p) in enumerate(zip(trainers, per)):
                for n in self.names:
                    p[n].data = self.params[n].detach()[i]
                    if self.adam:
                        t.optimizer.state[p[n]] = {"step": self.counts[n][i],
                                                   "exp_avg": self.exp_avg[n][i],
                                                   "exp_avg_sq": self.exp_avg_sq[n][i]}

    def update(self, lrs: Tensor, clip: bool) -> None:
        """One optimizer step of every instance at its own lr ``lrs (N,)``: torch's Adam (or SGD)
        formula, elementwise, on the stacked tensors."""
        with torch.no_grad():
            b1, b2 = ADAM_BETAS
            for n, P in self.params.items():
                g = P.grad
                if clip:  # the note's clipping of every gradient entry to ±1
                    g.clamp_(-1.0, 1.0)
                shape = (-1,) + (1,) * (P.ndim - 1)
                if self.adam:
                    self.counts[n] += 1
                    counts = self.counts[n].double()
                    step_size = (lrs.double() / (1 - b1**counts)).to(lrs.dtype)
                    bc2_sqrt = (1 - b2**counts).sqrt().to(lrs.dtype)
                    m, v = self.exp_avg[n], self.exp_avg_sq[n]
                    m.lerp_(g, 1 - b1)
                    v.mul_(b2).addcmul_(g, g, value=1 - b2)
                    denom = (v.sqrt() / bc2_sqrt.to(v).view(shape)).add_(ADAM_EPS)
                    P.add_(m / denom * -step_size.to(P).view(shape))
                else:
                    P.add_(g * -lrs.to(P).view(shape))
                P.grad = None


def _train_bucket(jobs: list[tuple[ModelConfig, TrainConfig]], *, resume: bool,
                  progress: bool) -> list[Run | Failed]:
    """Train same-shape jobs as one vectorised model (see the module docstring)."""
    configs = [effective_configs(*job)[:2] for job in jobs]
    memory.check(memory.combined([training_estimate(m, t.optimizer, t.batch_size, t.eval_size)
                                  for m, t in configs], f"a bucket of {len(jobs)} runs trained together"),
                 device=resolve_device(configs[0][1].device))
    threads = threads_for(configs[0][1])
    old_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    trainers: list[Trainer] = []
    try:
        for m, t in configs:  # each takes its run directory's lock
            trainers.append(Trainer(m, t, resume and _holds_run(t)))
        with StopRequest() as interrupt:
            return _run_bucket(jobs, trainers, interrupt, progress)
    finally:
        for trainer in trainers:
            trainer.close()
        torch.set_num_threads(old_threads)


def _run_bucket(jobs, trainers: list[Trainer], interrupt: StopRequest,
                progress: bool) -> list[Run | Failed]:
    results: list[Run | Failed | None] = [None] * len(trainers)

    def leave(i: int, outcome) -> None:
        results[i] = outcome

    live = []
    for i, t in enumerate(trainers):
        try:
            t.begin()
        except Diverged as err:
            leave(i, _record_failure(*jobs[i], err))
            continue
        if t.step < t.cfg.steps and t.stopped is None:
            live.append(i)
        else:
            leave(i, t.finish(stepped=False))
    first = trainers[0]
    layout, dtype, batch = first.model_cfg.layout, first.model_cfg.torch_dtype, first.cfg.batch_size
    clip = first.cfg.recipe == "paper"
    total = sum(t.cfg.steps for t in trainers)
    bar = progress_bar(total=total, initial=sum(t.step for t in trainers), unit="step",
                       disable=not progress, desc=f"{len(trainers)} models")
    now = time.perf_counter()
    started = [now - t.elapsed for t in trainers]
    no_bar = _NoBar()
    with bar:
        while live and not interrupt.requested:
            stack = _Stack([trainers[i] for i in live])
            forward = torch.func.vmap(_instance_forward(trainers[live[0]].model))
            changed = False
            while not changed and not interrupt.requested:
                active = [trainers[i] for i in live]
                lrs = [learning_rate(t.cfg, t.step) for t in active]
                batches = [sample_batch(layout, batch, t.generator, dtype=dtype) for t in active]
                X = torch.stack([b.X for b in batches])  # (N, B, T, d)
                Y = torch.stack([b.Y for b in batches])  # (N, B, d, d)
                losses = torch.func.vmap(mse)(forward(stack.params, X), Y)  # (N,)
                losses.sum().backward()
                stack.update(torch.tensor(lrs, dtype=dtype, device=X.device), clip)
                bar.update(len(active))
                losses = losses.detach()
                for j, (i, t) in enumerate(zip(list(live), active)):
                    try:
                        t.after_step(losses[j], lrs[j], t.cfg.steps, interrupt.requested, no_bar,
                                     started[i])
                    except Diverged as err:
                        leave(i, _record_failure(*jobs[i], err))
                        live.remove(i)
                        changed = True
                        continue
                    if t.step >= t.cfg.steps or t.stopped is not None:
                        t.flush(no_bar)
                        leave(i, t.finish(stepped=True))
                        live.remove(i)
                        changed = True
            for i in live:  # re-stacking (or an interrupt) reads every instance's current state
                trainers[i].flush(no_bar)
    if interrupt.requested and live:
        for i in live:  # those that had not seen the request at their last step (none before
            if trainers[i].dir is not None and trainers[i].step > 0:  # the first: the seed redoes it)
                trainers[i].checkpoint()
        where = ", ".join(str(trainers[i].dir) for i in live if trainers[i].dir is not None)
        raise interrupt.interrupted(f"training stopped with {len(live)} of {len(trainers)} runs "
                                f"unfinished" + (f"; resume them: {where}" if where else ""))
    return results


def _instance_forward(model: nn.Module):
    """``(params, X (B, T, d)) → (B, d, d)`` for one instance, to be vmapped over the stack."""
    def forward(params: dict[str, Tensor], X: Tensor) -> Tensor:
        return torch.func.functional_call(model, params, (X,), {"check_input": False})

    return forward
