"""The training engine: ``train(model_cfg, train_cfg) -> Run``, checkpointed and resumable.

Every step draws a fresh batch on the training device from a seeded generator, so a run of N steps
is a prefix of a run of 2N steps with the same seed (except a cosine schedule, whose horizon is
``schedule_steps``). A run directory holds ``config.json`` (model + train), ``metrics.jsonl`` (one
line per evaluation, appended and flushed), ``checkpoints/step_N.safetensors`` (weights, optimizer
state, generator state) and ``final.safetensors`` (the trained weights). Resuming from the last
checkpoint ends bit-identical to an uninterrupted run on the CPU with the same thread count.
The CPU kernels a run uses are deterministic without ``torch.use_deterministic_algorithms``: a run
under that mode has the same bits (tests/test_faults.py checks it); another thread count may not.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import Tensor
from tqdm.auto import tqdm

from . import checkpoint as ckpt
from .config import RESUMABLE_FIELDS, ModelConfig, TrainConfig
from .model import HookedDisentangledTransformer
from .readout import evaluate, readout_forward
from .task import mse, sample_batch
from .theory import causal_floor

FLUSH_EVERY = 32  # steps between reading losses back (one device sync) for the bar and NaN check
KEEP_FREED_MEMORY = True  # CPU runs on Linux: tune glibc malloc once, see _keep_freed_memory
_malloc_tuned = False


def _keep_freed_memory() -> None:
    """Ask glibc malloc to keep freed blocks (mmap threshold 32 MiB, trim threshold 256 MiB).

    Each CPU step frees and re-allocates ~5 MB activations at d = 10; by default glibc hands them
    back to the OS and the next step page-faults them in again: ~2 ms of a ~22 ms step (measured).
    Process-wide and permanent, so done once, and only on Linux with glibc.
    """
    global _malloc_tuned
    if _malloc_tuned or not KEEP_FREED_MEMORY or not sys.platform.startswith("linux"):
        return
    _malloc_tuned = True
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass


# -- configuration ------------------------------------------------------------------------------
def resolve_device(spec: str = "auto") -> torch.device:
    """``"auto"`` → CUDA when available, else CPU; anything else as given (and checked)."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={spec!r} was asked for but CUDA is not available; use 'auto'")
    return device


def effective_configs(
    model_cfg: ModelConfig, train_cfg: TrainConfig
) -> tuple[ModelConfig, TrainConfig, list[str]]:
    """The configurations a run actually uses (recipe values filled in, ``init``/``dtype``
    overrides applied to the model config) and notes on what was overridden."""
    if not isinstance(model_cfg, ModelConfig):
        raise ValueError(f"model_cfg must be a ModelConfig, got {type(model_cfg).__name__}")
    if not isinstance(train_cfg, TrainConfig):
        raise ValueError(f"train_cfg must be a TrainConfig, got {type(train_cfg).__name__}")
    cfg = train_cfg.resolved()
    changes, notes = {}, []
    if cfg.init is not None and cfg.init != model_cfg.init:
        changes["init"] = cfg.init
        why = "the note's recipe starts from zeros" if cfg.recipe == "paper" else "train_cfg.init"
        notes.append(f"init={cfg.init!r} instead of the model config's {model_cfg.init!r} ({why})")
    if cfg.dtype is not None and cfg.dtype != model_cfg.dtype:
        changes["dtype"] = cfg.dtype
    return replace(model_cfg, **changes), cfg, notes


def config_hash(model_cfg: ModelConfig, train_cfg: TrainConfig) -> str:
    """A digest of everything that fixes a run's trajectory (not steps, out_dir, threads, …)."""
    train = {k: v for k, v in train_cfg.to_dict().items() if k not in RESUMABLE_FIELDS}
    text = json.dumps({"model": model_cfg.to_dict(), "train": train}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_config(run_dir: str | Path) -> tuple[ModelConfig, TrainConfig]:
    """The ``(model, train)`` configurations stored in ``run_dir/config.json``."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise ValueError(f"run_dir must hold a run (config.json), found none at {path}")
    try:
        data = json.loads(path.read_text())
        return ModelConfig.from_dict(data["model"]), TrainConfig.from_dict(data["train"])
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise ValueError(f"{path} is not a run's config.json: {err}") from None


def checkpoint_bytes(model_cfg: ModelConfig, cfg: TrainConfig) -> int:
    """About the size of one checkpoint: weights, Adam's two moments, generator state, header."""
    widths, heads = model_cfg.widths, model_cfg.heads
    n = sum(h * w * w for h, w in zip(heads, widths)) + widths[-1] * model_cfg.d  # A's and W_U
    copies = 3 if cfg.optimizer == "adam" else 1
    return n * copies * torch.empty((), dtype=model_cfg.torch_dtype).element_size() + 16384


def check_out_dir(run_dir: Path, model_cfg: ModelConfig, cfg: TrainConfig, resume: bool) -> None:
    """Fail before any training work when ``run_dir`` cannot hold the run: it cannot be created
    or written (a path under a file, a read-only mount, no permission) or lacks the room for
    every checkpoint the run will write."""
    try:
        if not resume:  # a missing run to resume is read_config's error, not created here
            run_dir.mkdir(parents=True, exist_ok=True)
        if not run_dir.is_dir():
            return
        probe = run_dir / f".invperm-write-test{os.getpid()}"
        try:
            with open(probe, "wb") as f:
                f.write(bytes(4096))
                f.flush()
                os.fsync(f.fileno())
        finally:
            probe.unlink(missing_ok=True)
        free = shutil.disk_usage(run_dir).free
    except OSError as err:
        raise ValueError(f"out_dir {run_dir} cannot be written ({err.strerror or err}); "
                         "choose another out_dir") from None
    need = (cfg.steps // cfg.checkpoint_every + 2) * checkpoint_bytes(model_cfg, cfg)
    if free < need:
        raise ValueError(f"out_dir {run_dir} has {free} bytes free; this run's checkpoints need "
                         f"about {need} (steps={cfg.steps}, checkpoint_every={cfg.checkpoint_every})")


def learning_rate(cfg: TrainConfig, step: int) -> float:
    """The lr of update ``step`` (0-based). Cosine: decay to 0 over ``H = schedule_steps`` updates,
    ``lr·½(1 + cos(π·min(step, H)/H))``, the first update at the full lr (the note's code)."""
    if cfg.lr is None or cfg.schedule is None or cfg.schedule == "cosine" and not cfg.schedule_steps:
        cfg = cfg.resolved()
    if cfg.schedule == "constant":
        return float(cfg.lr)
    horizon = cfg.schedule_steps
    return float(cfg.lr) * 0.5 * (1.0 + math.cos(math.pi * min(step, horizon) / horizon))


# -- runs ---------------------------------------------------------------------------------------
@dataclass
class Run:
    """A trained model with its configurations and metrics; ``dir`` is None for a run kept in
    memory only (``out_dir=None``)."""

    model_cfg: ModelConfig
    train_cfg: TrainConfig
    model: HookedDisentangledTransformer
    metrics: list[dict]
    step: int
    dir: Path | None = None

    @property
    def final_metrics(self) -> dict:
        return self.metrics[-1] if self.metrics else {}

    @classmethod
    def load(cls, run_dir: str | Path, step: int | None = None, device: str = "cpu") -> Run:
        """A run from disk: the final weights, or checkpoint ``step``; safetensors only."""
        run_dir = Path(run_dir)
        model_cfg, train_cfg = read_config(run_dir)
        if step is None and (run_dir / "final.safetensors").is_file():
            path = run_dir / "final.safetensors"
        elif step is None:
            found = ckpt.list_checkpoints(run_dir)
            if not found:
                others = sorted(p.name for folder in (run_dir, run_dir / "checkpoints")
                                if folder.is_dir() for p in folder.iterdir()
                                if p.suffix in (".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".bin"))
                unread = (f"; not read: {others} (only safetensors and JSON are loaded, nothing is "
                          "unpickled)") if others else ""
                raise ValueError(f"run {run_dir} has neither final weights (final.safetensors) "
                                 f"nor a checkpoint yet{unread}")
            path = found[-1][1]
        else:
            path = ckpt.checkpoint_path(run_dir, step)
            if not path.is_file():
                steps = [s for s, _ in ckpt.list_checkpoints(run_dir)]
                raise ValueError(f"step must be one of the run's checkpoints {steps}, got {step!r}")
        tensors, meta = ckpt.load(path)
        if meta.get("config_hash") != config_hash(model_cfg, train_cfg):
            raise ValueError(f"{path} was written by another configuration than {run_dir}/config.json")
        model = HookedDisentangledTransformer(model_cfg, seed=0)
        ckpt.load_model_tensors(model, tensors, path)
        metrics = [m for m in _read_metrics(run_dir) if m["step"] <= meta["step"]]
        return cls(model_cfg, train_cfg, model.to(resolve_device(device)), metrics, meta["step"],
                   run_dir)


def _read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    metrics = []
    for i, line in enumerate(lines):
        try:
            metrics.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines) - 1:  # only the last line can be torn by a crash
                raise ValueError(f"{path} line {i + 1} is not JSON") from None
    return metrics


def _seeds(seed: int) -> dict[str, int]:
    """Separate streams for the init, the training data and the eval batch: seed s uses 4s, 4s+1,
    4s+2, so no two seeds share one."""
    return {"init": 4 * seed, "data": 4 * seed + 1, "eval": 4 * seed + 2}


class _Interrupt:
    """First Ctrl-C: finish the step, checkpoint, then stop; a second one stops at once."""

    def __enter__(self) -> _Interrupt:
        self.requested, self._old = False, None
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def train(
    model_cfg: ModelConfig, train_cfg: TrainConfig, *, resume: bool = False,
    stop_at: int | None = None, progress: bool = True,
) -> Run:
    """Train a ``HookedDisentangledTransformer`` and return the :class:`Run`.

    ``resume=True`` continues the run in ``train_cfg.out_dir`` from its last checkpoint (``steps``
    may be raised to extend it). ``stop_at`` stops after that many steps with a checkpoint, as an
    interruption would. A non-finite loss, evaluation MSE or weight raises ``ValueError`` naming
    the step and the last good checkpoint (non-finite weights are never checkpointed). An
    ``out_dir`` that cannot be written, or lacks room for the run's checkpoints, is a
    ``ValueError`` before any training work; a write that fails later (a full disk) is an
    ``OSError`` naming the file, the step and the last good checkpoint.
    """
    model_cfg, cfg, notes = effective_configs(model_cfg, train_cfg)
    end = cfg.steps if stop_at is None else stop_at
    if not isinstance(end, int) or isinstance(end, bool) or not 1 <= end <= cfg.steps:
        raise ValueError(f"stop_at must be an integer in [1, steps={cfg.steps}], got {stop_at!r}")
    if resume and cfg.out_dir is None:
        raise ValueError("resume=True needs train_cfg.out_dir, the run directory to continue")
    old_threads = torch.get_num_threads()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    try:
        trainer = _Trainer(model_cfg, cfg, resume)
        for note in notes if progress else ():
            tqdm.write(f"invperm train: {note}")
        with _Interrupt() as interrupt:
            return trainer.run(end, interrupt, progress)
    finally:
        torch.set_num_threads(old_threads)


def resume(run_dir: str | Path, *, steps: int | None = None, threads: int | None = None,
           stop_at: int | None = None, progress: bool = True) -> Run:
    """Continue the run in ``run_dir`` from its last checkpoint (to ``steps`` if given)."""
    model_cfg, train_cfg = read_config(run_dir)
    changes = {"out_dir": str(run_dir)}
    if steps is not None:
        changes["steps"] = steps
    if threads is not None:
        changes["threads"] = threads
    return train(model_cfg, replace(train_cfg, **changes), resume=True, stop_at=stop_at,
                 progress=progress)


class _Trainer:
    """The state of one run: model, optimizer, data stream, counters and its directory."""

    def __init__(self, model_cfg: ModelConfig, cfg: TrainConfig, resume: bool):
        self.model_cfg, self.cfg = model_cfg, cfg
        self.device = resolve_device(cfg.device)
        if cfg.out_dir is not None:
            check_out_dir(Path(cfg.out_dir), model_cfg, cfg, resume)
        if self.device.type == "cpu":
            _keep_freed_memory()
        self.hash = config_hash(model_cfg, cfg)
        seeds = _seeds(cfg.seed)
        self.model = HookedDisentangledTransformer(model_cfg, seed=seeds["init"]).to(self.device)
        self.names = {id(p): n for n, p in self.model.named_parameters()}
        params = list(self.model.parameters())
        lr = learning_rate(cfg, 0)
        self.optimizer = (torch.optim.Adam(params, lr=lr) if cfg.optimizer == "adam"
                          else torch.optim.SGD(params, lr=lr))
        self.generator = torch.Generator(self.device).manual_seed(seeds["data"])
        dtype = model_cfg.torch_dtype
        eval_gen = torch.Generator(self.device).manual_seed(seeds["eval"])
        self.eval_batch = sample_batch(model_cfg.layout, cfg.eval_size, eval_gen, dtype=dtype)
        self.floor = causal_floor(model_cfg.layout, model_cfg.readout)
        self.step, self.metrics, self.loss_sum, self.loss_count, self.elapsed = 0, [], 0.0, 0, 0.0
        self.dir = Path(cfg.out_dir) if cfg.out_dir is not None else None
        self.pending: list[Tensor] = []
        if self.dir is not None:
            self._open_dir(resume)

    # -- run directory ---------------------------------------------------------------------------
    def _open_dir(self, resume: bool) -> None:
        """Check the directory, restore the last checkpoint; write only after every check passed."""
        run_dir, cfg = self.dir, self.cfg
        config = {"model": self.model_cfg.to_dict(), "train": cfg.to_dict()}
        if not resume:
            taken = [n for n in ("config.json", "metrics.jsonl", "checkpoints")
                     if (run_dir / n).exists()]
            if taken:
                raise ValueError(f"out_dir {run_dir} already holds a run ({', '.join(taken)}); "
                                 "resume it or choose another out_dir")
        else:
            stored_model, stored_train = read_config(run_dir)
            stored = {"model": stored_model.to_dict(), "train": stored_train.to_dict()}
            diffs = [f"{part}.{k}: {stored[part].get(k)!r} -> {v!r}"
                     for part in ("model", "train") for k, v in config[part].items()
                     if k not in RESUMABLE_FIELDS and stored[part].get(k) != v]
            if diffs:
                raise ValueError(f"cannot resume {run_dir}: the configuration differs from its "
                                 f"config.json in {'; '.join(diffs)}")
            found = ckpt.list_checkpoints(run_dir)
            if found:
                self._restore(*found[-1])
        ckpt.atomic_write(run_dir / "config.json", (json.dumps(config, indent=2) + "\n").encode())
        lines = "".join(json.dumps(m) + "\n" for m in self.metrics)
        ckpt.atomic_write(run_dir / "metrics.jsonl", lines.encode())

    def _restore(self, step: int, path: Path) -> None:
        tensors, meta = ckpt.load(path)
        if meta.get("config_hash") != self.hash or meta.get("step") != step:
            raise ValueError(f"checkpoint {path} belongs to another run or step (config hash "
                             f"{meta.get('config_hash')}, this run's {self.hash})")
        if meta.get("device") != self.device.type:
            raise ValueError(f"checkpoint {path} was written on {meta.get('device')}; resume it "
                             f"with device={meta.get('device')!r} (its data stream lives there)")
        if step > self.cfg.steps:
            raise ValueError(f"steps must be >= the last checkpoint's step {step}, "
                             f"got {self.cfg.steps}")
        ckpt.load_model_tensors(self.model, tensors, path)
        ckpt.load_optimizer_tensors(self.optimizer, self.cfg.optimizer, self.names, tensors,
                                    meta.get("optimizer", {}), path)
        rng = tensors.get("rng.data")
        if rng is None or rng.dtype != torch.uint8:
            raise ValueError(f"checkpoint {path} lacks the data generator's state rng.data")
        try:
            self.generator.set_state(rng)
        except RuntimeError as err:
            raise ValueError(f"checkpoint {path}: rng.data is not a generator state: {err}") from None
        self.metrics = [m for m in _read_metrics(self.dir) if m["step"] <= step]
        self.step, self.elapsed = step, meta["elapsed"]
        self.loss_sum, self.loss_count = meta["loss_sum"], meta["loss_count"]

    def _checkpoint(self) -> None:
        tensors = ckpt.model_tensors(self.model)
        opt_tensors, scalars = ckpt.optimizer_tensors(self.optimizer, self.names)
        tensors.update(opt_tensors)
        tensors["rng.data"] = self.generator.get_state()
        meta = {"step": self.step, "config_hash": self.hash, "device": self.device.type,
                "optimizer": scalars, "elapsed": self.elapsed, "loss_sum": self.loss_sum,
                "loss_count": self.loss_count}
        path = ckpt.checkpoint_path(self.dir, self.step)
        try:
            ckpt.save(path, tensors, meta)
        except OSError as err:
            raise self._write_error(path, err) from err

    def _last_good(self, before: int) -> str:
        """Where the last checkpoint from before step ``before`` is, in words."""
        found = [p for s, p in ckpt.list_checkpoints(self.dir) if s < before]
        return f"the last good checkpoint is {found[-1]}" if found else "no checkpoint before it"

    def _write_error(self, path: Path, err: OSError) -> OSError:
        return OSError(err.errno, f"cannot write {path} at step {self.step} "
                                  f"({err.strerror or err}); {self._last_good(self.step + 1)}")

    def _diverged(self, what: str, step: int) -> ValueError:
        """A non-finite loss (of the weights after ``step`` updates) or weights: checkpoints of
        ``step`` or later are not good, earlier ones gave finite losses."""
        kept = f"; {self._last_good(step)}" if self.dir is not None else ""
        return ValueError(f"training diverged: {what} at step {step}{kept}")

    # -- the loop --------------------------------------------------------------------------------
    def run(self, end: int, interrupt: _Interrupt, progress: bool) -> Run:
        cfg, model, opt = self.cfg, self.model, self.optimizer
        params = list(model.parameters())
        layout, dtype = self.model_cfg.layout, self.model_cfg.torch_dtype
        if self.step == 0 and not self.metrics:
            self._evaluate(learning_rate(cfg, 0))
        bar = tqdm(total=cfg.steps, initial=self.step, unit="step", disable=not progress,
                   desc=self.dir.name if self.dir else "train", mininterval=0.5)
        started, start = time.perf_counter() - self.elapsed, self.step
        with bar:
            while self.step < end and not interrupt.requested:
                lr = learning_rate(cfg, self.step)
                for group in opt.param_groups:
                    group["lr"] = lr
                batch = sample_batch(layout, cfg.batch_size, self.generator, dtype=dtype)
                out = readout_forward(model, batch.X)  # (B, d, d)
                loss = mse(out, batch.Y)  # the note's loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if cfg.recipe == "paper":  # the note's clipping of every gradient entry to ±1
                    for p in params:
                        p.grad.clamp_(-1.0, 1.0)
                opt.step()
                self.pending.append(loss.detach())
                self.step += 1
                bar.update()
                evals = self.step % cfg.eval_every == 0 or self.step == cfg.steps
                saves = self.dir is not None and (
                    self.step % cfg.checkpoint_every == 0 or self.step in (end, cfg.steps)
                    or interrupt.requested)
                if evals or saves or len(self.pending) >= FLUSH_EVERY:
                    self._flush(bar)
                self.elapsed = time.perf_counter() - started
                if evals:
                    self._evaluate(lr)
                if saves:
                    self._checkpoint()
            self._flush(bar)
        if interrupt.requested and self.step < end:
            raise KeyboardInterrupt(f"training stopped at step {self.step}"
                                    + (f"; resume with --resume {self.dir}" if self.dir else ""))
        stepped = self.step > start
        final = self.dir / "final.safetensors" if self.dir is not None else None
        if final is not None and self.step == cfg.steps and (stepped or not final.exists()):
            meta = {"step": self.step, "config_hash": self.hash, "metrics": self.metrics[-1]}
            try:
                ckpt.save(final, ckpt.model_tensors(model), meta)
            except OSError as err:
                raise self._write_error(final, err) from err
        return Run(self.model_cfg, cfg, model, self.metrics, self.step, self.dir)

    def _flush(self, bar) -> None:
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

    def _evaluate(self, lr: float) -> None:
        metrics = {"step": self.step, **evaluate(self.model, self.eval_batch, self.cfg.batch_size)}
        if not math.isfinite(metrics["mse"]):  # finite weights, overflowing scores
            raise self._diverged(f"the evaluation MSE is {metrics['mse']}", self.step)
        train_mse = self.loss_sum / self.loss_count if self.loss_count else None
        metrics.update(train_mse=train_mse, lr=lr, causal_floor=self.floor,
                       attention_dir=self.model_cfg.attention_dir, wall_time=self.elapsed)
        self.loss_sum, self.loss_count = 0.0, 0
        self.metrics.append(metrics)
        if self.dir is not None:
            try:
                with open(self.dir / "metrics.jsonl", "a") as f:
                    f.write(json.dumps(metrics) + "\n")
                    f.flush()
            except OSError as err:
                raise self._write_error(self.dir / "metrics.jsonl", err) from err
