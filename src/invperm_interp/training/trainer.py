"""One run's state and its loop: the model, optimizer, data stream, counters and run directory.

``single.train`` drives one :class:`Trainer`; ``many.train_many`` steps several, each writing its run
directory through the same methods (``begin``, ``after_step``, ``flush``, ``checkpoint``,
``finish``). Every step draws a fresh batch from the run's seeded data stream on the training
device; a loss is read back every ``FLUSH_EVERY`` steps (one device sync), when the NaN check runs.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import replace
from pathlib import Path

import torch
from torch import Tensor

from ..config import ModelConfig, TrainConfig
from ..maths.floors import causal_floor
from ..memory import keep_freed_memory
from ..model.build import forward, plain_model
from ..runs import checkpoint as ckpt
from ..runs.config_file import config_diffs, config_hash
from ..runs.directory import RunDir, RunWarning
from ..runs.environment import describe
from ..runs.evaluation import Evaluation
from ..runs.lock import RunLock
from ..task import mse, sample_batch
from .metrics import Scores, evaluate, evaluation_chunk
from .optim import load_optimizer_tensors, make_optimizer, optimizer_tensors
from .progress import progress_bar
from .run import Run, resolve_device
from .schedule import learning_rate
from .signals import StopRequest
from .stopping import stop_reason

FLUSH_EVERY = 32  # steps between reading losses back (one device sync) for the bar and NaN check


def seed_streams(seed: int) -> dict[str, int]:
    """Separate streams for the init, the training data and the eval batch: seed s uses 4s, 4s+1,
    4s+2, so no two seeds share one."""
    return {"init": 4 * seed, "data": 4 * seed + 1, "eval": 4 * seed + 2}


def solved_before(cfg: TrainConfig, metrics: list[Evaluation], step: int) -> bool:
    """Whether an evaluation before ``step`` had MSE < ``cfg.checkpoint_dense_until``: from then on
    a run writes no dense checkpoints (``TrainConfig.checkpoint_due``)."""
    return any(m.mse < cfg.checkpoint_dense_until for m in metrics if m.step < step)


def on_schedule(run_dir: str | Path | RunDir, cfg: TrainConfig) -> set[int]:
    """The checkpoint steps of a run that its schedule asked for (``checkpoint_due``): what a
    pruning of checkpoints kept for resuming keeps, so dense checkpoints survive it."""
    run_dir = RunDir(run_dir)
    metrics = run_dir.read_metrics()
    return {s for s, _ in run_dir.checkpoints()
            if cfg.checkpoint_due(s, solved_before(cfg, metrics, s))}


class Diverged(ValueError):
    """A run's loss, evaluation MSE or weights became non-finite at ``step`` (nothing of that step
    or later is checkpointed)."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step


class Trainer:
    """The state of one run: model, optimizer, data stream, counters and its directory."""

    def __init__(self, model_cfg: ModelConfig, cfg: TrainConfig, resume: bool, force: bool = False):
        self.model_cfg, self.cfg = model_cfg, cfg
        self.device = resolve_device(cfg.device)
        if cfg.out_dir is not None:
            RunDir(cfg.out_dir).check_writable(model_cfg, cfg, resume)
        if self.device.type == "cpu":
            keep_freed_memory()
        self.hash = config_hash(model_cfg, cfg)
        seeds = seed_streams(cfg.seed)
        self.model = plain_model(model_cfg, seed=seeds["init"]).to(self.device)
        self.names = {id(p): n for n, p in self.model.named_parameters()}
        self.optimizer = make_optimizer(cfg.optimizer, self.model.parameters(),
                                        learning_rate(cfg, 0))
        self.generator = torch.Generator(self.device).manual_seed(seeds["data"])
        dtype = model_cfg.torch_dtype
        eval_gen = torch.Generator(self.device).manual_seed(seeds["eval"])
        self.eval_batch = sample_batch(model_cfg.layout, cfg.eval_size, eval_gen, dtype=dtype)
        self.floor = causal_floor(model_cfg.layout, model_cfg.readout)
        self.stopped: str | None = None  # why the run ended before cfg.steps (stop_reason)
        self.step, self.metrics, self.loss_sum, self.loss_count, self.elapsed = 0, [], 0.0, 0, 0.0
        self.dir = Path(cfg.out_dir) if cfg.out_dir is not None else None
        self.run_dir = RunDir(self.dir) if self.dir is not None else None
        self.pending: list[Tensor] = []
        self.lock = RunLock(self.dir).acquire() if self.dir is not None and self.dir.is_dir() else None
        try:
            if self.dir is not None:
                self._open_dir(resume, force)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Release the run directory's lock (taken when the trainer was made; idempotent)."""
        if self.lock is not None:
            self.lock.release()

    # -- run directory ---------------------------------------------------------------------------
    def _open_dir(self, resume: bool, force: bool) -> None:
        """Check the directory, restore the last checkpoint; write only after every check passed."""
        run_dir, cfg = self.run_dir, self.cfg
        if not resume:
            run_dir.check_new(force)
        else:
            diffs = config_diffs(run_dir.read_config(), self.model_cfg, cfg)
            if diffs:
                raise ValueError(f"cannot resume {run_dir}: the configuration differs from its "
                                 f"{run_dir.CONFIG} in {'; '.join(diffs)}")
            # a step-0 checkpoint (an older version's stop before the first step) holds no
            # optimizer state: the run starts again from its seed, which makes the same start
            found = [(s, p) for s, p in run_dir.checkpoints() if s > 0]
            if not found:
                run_dir.check_restart()
            run_dir.check_final()
            if found:
                self._restore(*found[-1])
        run_dir.write_config(self.model_cfg, cfg)
        run_dir.write_metrics(self.metrics)
        run_dir.append_environment(describe(self.device, self.step))

    def _restore(self, step: int, path: Path) -> None:
        meta = self.load_state(step, path)
        self.metrics = self._metrics_until(step)
        self.step, self.elapsed = step, meta.elapsed
        self.loss_sum, self.loss_count = meta.loss_sum, meta.loss_count

    def load_state(self, step: int, path: Path) -> ckpt.CheckpointMeta:
        """Load checkpoint ``path`` of step ``step`` of this run (its weights, optimizer and data
        stream state; checked to be this configuration's) and return its metadata; the counters
        are left to the caller."""
        tensors, written = ckpt.load(path)
        ckpt.check_meta(written, path, ckpt.TRAINING_META)
        meta = ckpt.CheckpointMeta.from_dict(written)
        if meta.config_hash != self.hash or meta.step != step:
            raise ValueError(f"checkpoint {path} belongs to another run or step (config hash "
                             f"{meta.config_hash}, this run's {self.hash})")
        if meta.device != self.device.type:
            raise ValueError(f"checkpoint {path} was written on {meta.device}; resume it "
                             f"with device={meta.device!r} (its data stream lives there)")
        if step > self.cfg.steps:
            raise ValueError(f"steps must be >= the last checkpoint's step {step}, "
                             f"got {self.cfg.steps}")
        ckpt.load_model_tensors(self.model, tensors, path)
        load_optimizer_tensors(self.optimizer, self.cfg.optimizer, self.names, tensors,
                                    meta.optimizer, path)
        rng = tensors.get("rng.data")
        if rng is None or rng.dtype != torch.uint8:
            raise ValueError(f"checkpoint {path} lacks the data generator's state rng.data")
        try:
            self.generator.set_state(rng)
        except RuntimeError as err:
            raise ValueError(f"checkpoint {path}: rng.data is not a generator state: {err}") from None
        return meta

    def _metrics_until(self, step: int) -> list[Evaluation]:
        """The evaluation records up to ``step``; a record cut from the end of ``metrics.jsonl``
        (a torn line) is taken back from the final weights' metadata where they hold it, else
        the evaluations lost are named in a warning."""
        metrics = [m for m in self.run_dir.read_metrics() if m.step <= step]
        last = metrics[-1].step if metrics else -1
        if last == step:
            return metrics
        final = self.run_dir.final
        if final.is_file():
            try:
                kept = ckpt.CheckpointMeta.from_dict(ckpt.load(final)[1]).evaluation
            except ValueError:
                kept = None
            if kept is not None and kept.step == step:
                return metrics + [kept]
        lost = [s for s in range(last + 1, step + 1) if s % self.cfg.eval_every == 0]
        if lost:
            warnings.warn(f"{self.run_dir.metrics} lacks the evaluations at steps {lost} (cut "
                          f"short); the resumed run's metrics go on from step {last} without them",
                          RunWarning, stacklevel=3)
        return metrics

    def checkpoint(self) -> None:
        tensors = ckpt.model_tensors(self.model)
        opt_tensors, scalars = optimizer_tensors(self.optimizer, self.names)
        tensors.update(opt_tensors)
        tensors["rng.data"] = self.generator.get_state()
        meta = ckpt.CheckpointMeta(self.step, self.hash, device=self.device.type, optimizer=scalars,
                                   elapsed=self.elapsed, loss_sum=self.loss_sum,
                                   loss_count=self.loss_count)
        path = self.run_dir.checkpoint(self.step)
        try:
            ckpt.save(path, tensors, meta.to_dict())
        except OSError as err:
            raise self._write_error(path, err) from err

    def _last_good(self, before: int) -> str:
        """Where the last checkpoint from before step ``before`` is, in words."""
        found = [p for s, p in self.run_dir.checkpoints() if s < before]
        return f"the last good checkpoint is {found[-1]}" if found else "no checkpoint before it"

    def _write_error(self, path: Path, err: OSError) -> OSError:
        return OSError(err.errno, f"cannot write {path} at step {self.step} "
                                  f"({err.strerror or err}); {self._last_good(self.step + 1)}")

    def _diverged(self, what: str, step: int) -> Diverged:
        """A non-finite loss (of the weights after ``step`` updates) or weights: checkpoints of
        ``step`` or later are not good, earlier ones gave finite losses. The run directory records
        it (``diverged.json``): the run is done, and what reads it says so."""
        kept = f"; {self._last_good(step)}" if self.dir is not None else ""
        err = Diverged(f"training diverged: {what} at step {step}{kept}", step)
        if self.run_dir is not None:
            self.run_dir.write_diverged(step, str(err))
        return err

    # -- the loop --------------------------------------------------------------------------------
    def run(self, end: int, interrupt: StopRequest, progress: bool) -> Run:
        cfg = self.cfg
        self.begin()
        bar = progress_bar(total=cfg.steps, initial=self.step, unit="step", disable=not progress,
                           desc=self.dir.name if self.dir else "train")
        started, start = time.perf_counter() - self.elapsed, self.step
        with bar:
            while self.step < end and not interrupt.requested and self.stopped is None:
                lr = learning_rate(cfg, self.step)
                loss = self.update(lr)
                bar.update()
                self.after_step(loss, lr, end, interrupt.requested, bar, started)
            self.flush(bar)
        if interrupt.requested and self.step < end:
            # the signal came after this step's checkpoint was decided; before the first step
            # there is nothing to keep (the seed makes the same start again)
            if self.run_dir is not None and self.step > 0 \
                    and not self.run_dir.checkpoint(self.step).exists():
                self.checkpoint()
            raise interrupt.interrupted(f"training stopped at step {self.step}"
                                        + (f"; resume with --resume {self.dir}" if self.dir else ""))
        return self.finish(stepped=self.step > start)

    def update(self, lr: float) -> Tensor:
        """One training step at learning rate ``lr`` on the next batch of the run's data stream
        (the counters are :meth:`after_step`'s): returns the loss, not read back."""
        cfg, opt = self.cfg, self.optimizer
        for group in opt.param_groups:
            group["lr"] = lr
        batch = sample_batch(self.model_cfg.layout, cfg.batch_size, self.generator,
                             dtype=self.model_cfg.torch_dtype)
        loss = mse(forward(self.model, batch.X), batch.Y)  # the note's loss, on (B, d, d)
        opt.zero_grad()
        loss.backward()
        if cfg.recipe == "paper":  # the note's clipping of every gradient entry to ±1
            for p in self.model.parameters():
                p.grad.clamp_(-1.0, 1.0)
        opt.step()
        return loss.detach()

    def begin(self) -> None:
        """Evaluate the initial weights of a fresh run; decide whether the run is already over."""
        if self.step == 0 and not self.metrics:
            self._evaluate(learning_rate(self.cfg, 0))
        self.stopped = stop_reason(self.cfg, self.metrics, self.model_cfg.causal)

    def after_step(self, loss: Tensor, lr: float, end: int, interrupted: bool, bar,
                   started: float) -> None:
        """Count the update whose (still unread) ``loss`` was just taken, then evaluate, read the
        losses back and checkpoint when due (a stop also checkpoints)."""
        cfg = self.cfg
        self.pending.append(loss)
        self.step += 1
        evals = self.step % cfg.eval_every == 0 or self.step == cfg.steps
        saves = self.dir is not None and (
            cfg.checkpoint_due(self.step, self.solved) or self.step in (end, cfg.steps)
            or interrupted)
        if evals or saves or len(self.pending) >= FLUSH_EVERY:
            self.flush(bar)
        self.elapsed = time.perf_counter() - started
        if evals:
            self._evaluate(lr)
        if saves or self.stopped is not None and self.dir is not None:
            self.checkpoint()

    @property
    def solved(self) -> bool:
        """Whether an evaluation so far had MSE < ``checkpoint_dense_until`` (dense checkpoints
        stop then); read off the metrics, so a resumed run decides as an uninterrupted one."""
        return solved_before(self.cfg, self.metrics, self.step)

    def finish(self, stepped: bool) -> Run:
        """Write the final weights of a run that reached ``steps`` or stopped early (again only if
        it ``stepped`` in this call or has none yet) and return it."""
        cfg, model = self.cfg, self.model
        final = self.run_dir.final if self.run_dir is not None else None
        done = self.step == cfg.steps or self.stopped is not None
        if final is not None and done and (stepped or not final.exists()):
            meta = ckpt.CheckpointMeta(self.step, self.hash, metrics=self.metrics[-1].to_dict(),
                                       stopped=self.stopped)
            try:
                ckpt.save(final, ckpt.model_tensors(model), meta.to_dict())
            except OSError as err:
                raise self._write_error(final, err) from err
        return Run(self.model_cfg, cfg, model, self.metrics, self.step, self.dir)

    def flush(self, bar) -> None:
        """Read the pending losses back: stop on a non-finite one, feed the bar and the mean."""
        if not self.pending:
            return
        values = torch.stack(self.pending).tolist()
        first = self.step - len(values)
        self.pending.clear()
        for i, v in enumerate(values):
            if not math.isfinite(v):
                raise self._diverged(f"the loss is {v}", first + i)
            self.loss_sum += v
        # An update can overflow the weights while every loss so far was finite: never evaluate
        # or checkpoint them (one more read-back, of a single flag).
        if not bool(torch.stack([p.isfinite().all() for p in self.model.parameters()]).all()):
            raise self._diverged("the weights are not finite", self.step)
        self.loss_count += len(values)
        bar.set_postfix(loss=f"{values[-1]:.4g}", refresh=False)

    def scores(self) -> Scores:
        """The model's scores on the run's held-out batch, as its evaluations take them."""
        return evaluate(self.model, self.eval_batch,
                        evaluation_chunk(self.cfg.batch_size, self.cfg.eval_size))

    def _evaluate(self, lr: float) -> None:
        scores = self.scores()
        if not math.isfinite(scores.mse):  # finite weights, overflowing scores
            raise self._diverged(f"the evaluation MSE is {scores.mse}", self.step)
        train_mse = self.loss_sum / self.loss_count if self.loss_count else None
        metrics = Evaluation(self.step, **scores._asdict(), train_mse=train_mse, lr=lr,
                             causal_floor=self.floor, wall_time=self.elapsed)
        self.loss_sum, self.loss_count = 0.0, 0
        self.stopped = stop_reason(self.cfg, self.metrics + [metrics], self.model_cfg.causal)
        if self.stopped is not None:
            metrics = replace(metrics, stopped=self.stopped)
        self.metrics.append(metrics)
        if self.dir is not None:
            try:
                self.run_dir.append_metrics(metrics)
            except OSError as err:
                raise self._write_error(self.run_dir.metrics, err) from err
