"""Helpers shared by the tests: small configurations, quiet training, batches, weight checks."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

from invperm_interp import Layout, ModelConfig, sample_batch
from invperm_interp.config import TrainConfig
from invperm_interp.training.single import train

REPO = Path(__file__).resolve().parent.parent  # the repository, whatever folder a test sits in
SMALL_TRAIN = dict(steps=6, batch_size=32, eval_every=3, eval_size=64, device="cpu")


def small(d: int = 4, attention_dir: str = "bidirectional", layout: Layout | None = None,
          readout: str = "P", **train_kw) -> tuple[ModelConfig, TrainConfig]:
    """A 2-layer model on ``layout`` (default ``[P; Y_P]`` of size ``d``) and a few-step CPU run;
    ``train_kw`` override :data:`SMALL_TRAIN`."""
    model_cfg = ModelConfig(layout or Layout.plain(d), attention_dir=attention_dir, readout=readout)
    return model_cfg, TrainConfig(**{**SMALL_TRAIN, **train_kw})


def run(model_cfg: ModelConfig, train_cfg: TrainConfig, **kw):
    """``train`` without a progress bar."""
    return train(model_cfg, train_cfg, progress=False, **kw)


def strip(metrics: list) -> list:
    """Evaluations (records, or lines of ``metrics.jsonl`` read as JSON) without the wall-clock
    time, the only entry that may differ between equal runs."""
    from invperm_interp.runs.evaluation import Evaluation

    return [(m if isinstance(m, Evaluation) else Evaluation.from_dict(m)).without_wall_clock()
            for m in metrics]


def weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of the model's state (to compare with its state later)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same_weights(a: nn.Module | dict, b: nn.Module | dict) -> None:
    """Bit-identical weights; ``a``/``b`` are models or state dicts."""
    sa = a.state_dict() if isinstance(a, nn.Module) else a
    sb = b.state_dict() if isinstance(b, nn.Module) else b
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def add_cells(model, cells, beta):
    """``model`` with ``beta`` times each cell (a ``Cell``, or ``(layer, query, key, template)`` on
    head 0) added to ``A``."""
    from invperm_interp.maths.cells import Cell, cell_template

    with torch.no_grad():
        for layer, head, query, key, kind in map(Cell.of, cells):
            view = model.stream.split(model.blocks[layer].attn.A.data[head], layer)[(query, key)]
            view += beta * cell_template(kind, *view.shape, dtype=view.dtype)
    return model


def batch_for(model, n: int = 64, seed: int = 0, dtype: torch.dtype | None = None):
    """``n`` samples of the model's layout from generator seed ``seed``, in ``dtype`` (default: the
    model's)."""
    return sample_batch(model.cfg.layout, n, torch.Generator().manual_seed(seed),
                        dtype=dtype or model.cfg.torch_dtype)


_TRAIN_CLI = [sys.executable, "-m", "invperm_interp.cli", "train"]


def _one_thread_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def start_cli_training(out: Path, train_args: dict, **popen_kw) -> subprocess.Popen:
    """A real ``invperm train`` process of the bidirectional d = 4 model into ``out``, ``train_args``
    as its flags (one thread, no progress bar, stdout discarded, stderr piped), for tests that
    signal, kill or race it."""
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in train_args.items()]
    return subprocess.Popen(_TRAIN_CLI + ["--d=4", "--attention=bidirectional", "--device=cpu",
                                          "--threads=1", f"--out={out}", "--no-progress", *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_one_thread_env(),
                            **popen_kw)


def cli_resume(out: Path, timeout: float) -> subprocess.CompletedProcess:
    """``invperm train --resume out`` in a real process (one thread), its output captured as text."""
    return subprocess.run(_TRAIN_CLI + ["--resume", str(out), "--no-progress"], env=_one_thread_env(),
                          capture_output=True, text=True, timeout=timeout)


def tiny_grid_text(*, name: str = "tiny", seeds: str = "2", d: str = "2", steps: int = 20,
                   every: int = 10, eval_every: int = 5, head: str = "", tail: str = "") -> str:
    """A tiny sweep grid's TOML: bidirectional models of size ``d`` (a TOML value: ``"[2, 3]"`` is
    an axis), ``steps`` steps at batch 16 and lr 0.05 on the CPU, a checkpoint every ``every``;
    ``head`` goes before ``[model]`` (``mechanism = true``), ``tail`` after ``[train]`` (a
    ``[slurm]`` table)."""
    return (f'name = "{name}"\nseeds = {seeds}\n{head}\n[model]\nd = {d}\n'
            f'attention_dir = "bidirectional"\n[train]\nsteps = {steps}\nbatch_size = 16\n'
            f'eval_every = {eval_every}\neval_size = 32\ncheckpoint_every = {every}\n'
            f'device = "cpu"\nlr = 0.05\n{tail}')


def analyses_script(monkeypatch, name: str):
    """The script ``analyses/{name}.py``, imported afresh with ``analyses/`` on the path (as the
    scripts import their neighbours)."""
    import importlib

    monkeypatch.syspath_prepend(str(REPO / "analyses"))
    sys.modules.pop(name, None)
    return importlib.import_module(name)


def files_in(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` (its path relative to it): its size and modification time."""
    return {p.relative_to(folder).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


def run_analyses_script(module, *args) -> int:
    """``module.main()`` (an :func:`analyses_script`) with ``sys.argv`` set as ``python
    analyses/NAME.py ARGS`` sets it: the exit status the command would have (0 for ``None``, 1 for
    an exception's message)."""
    argv = sys.argv
    sys.argv = [module.__file__, *map(str, args)]
    try:
        code = module.main()
    except SystemExit as exit:
        code = exit.code
    finally:
        sys.argv = argv
    return 0 if code is None else code if isinstance(code, int) else 1


def run_with_weights(model, As, W_U, X):
    """``model`` run on ``X`` with its ``A`` s and ``W_U`` replaced (its weights untouched), through
    its hooks: the reference the batched circuit evaluator is tested against. ``(B, d, d)``."""
    params = {f"blocks.{layer}.attn.A": A.to(model.device, model.cfg.torch_dtype)
              for layer, A in enumerate(As)}
    params["unembed.W_U"] = W_U.to(model.device, model.cfg.torch_dtype)
    with torch.no_grad():
        return torch.func.functional_call(model, params, (X,), {"check_input": False})


def differences(want, got, rel: float, abs_tol: float, path: str = "") -> list[str]:
    """Where the record ``got`` (nested dicts and lists of numbers, strings and flags) differs from
    ``want``: numbers beyond ``rel`` relative (``abs_tol`` absolute near zero), anything else
    unequal (a flag is not a number). For one computation compared across summation orders:
    another CPU, thread count or chunk of variants (tests/README.md)."""
    if isinstance(want, dict) and isinstance(got, dict):
        if want.keys() != got.keys():
            return [f"{path}: keys {sorted(want)} != {sorted(got)}"]
        return [d for k in want for d in differences(want[k], got[k], rel, abs_tol, f"{path}.{k}")]
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{path}: length {len(want)} != {len(got)}"]
        return [d for i, (w, g) in enumerate(zip(want, got))
                for d in differences(w, g, rel, abs_tol, f"{path}[{i}]")]
    if isinstance(want, bool) or isinstance(got, bool):  # True == 1 in Python; not here
        return [] if type(want) is type(got) and want == got else [f"{path}: {want!r} != {got!r}"]
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        close = math.isclose(want, got, rel_tol=rel, abs_tol=abs_tol)
        return [] if close else [f"{path}: {want} != {got}"]
    return [] if want == got else [f"{path}: {want!r} != {got!r}"]


def scored(name="two_block", rows=1.0, rows_se=0.0, recovered=0.97, recovered_se=0.01,
           placement=None):
    """A construction's test: two cells, signs agreeing, its circuit-only model's scores;
    ``placement``: where it sits (then labelled by it)."""
    from invperm_interp.analysis.faithfulness import Faithfulness, Score

    cells = ((0, 0, "pos.Y", "pos.P", "I"), (1, 0, "pos.P", "L1.x", "-1"))
    return Faithfulness(str(placement) if placement else name, "cells", cells, ("L2.x",), (1.0, 1.0),
                        (1.0, 1.0), 0.5, 1.5, Score(1e-3, 1.0, 1.0, n=4096),
                        Score(0.01, rows, recovered, rows_se, recovered_se, 4096),
                        Score(2.0, 0.1, 0.0, n=4096), placement=placement)


def fake_mechanism(monkeypatch, name: str) -> list[tuple[int, int]]:
    """``analysis.mechanism.mechanism`` replaced by one that returns ``analysed(name)``'s mechanism
    at once; returns the list it appends ``(d, samples)`` to on each call."""
    import importlib

    calls = []

    def fake(model, batch, **kwargs):
        calls.append((model.cfg.d, batch.X.shape[0]))
        return analysed(name).mechanism

    monkeypatch.setattr(importlib.import_module("invperm_interp.analysis.mechanism"), "mechanism", fake)
    return calls


def analysed(mechanism, tests=None, names=None, mean=None, candidates=10, optimal=True,
             resample=None, also=(), samples=4096, seed=12345):
    """A sweep's record (``SweepRecord``) of a run the rule calls ``mechanism`` (a construction, or
    the verdict "none" or "borderline", or a ``Placement``): its first test the named (or
    straddling) one, the answers on 3 batches, under mean and resample ablation (default: the
    same), written as text, each style's tests the same ``tests``; ``also``: the other faithful
    constructions (names, or placements, each then tested too)."""
    from invperm_interp.analysis.faithfulness import Score
    from invperm_interp.analysis.mechanism import Mechanism
    from invperm_interp.analysis.minimal import MinimalCircuit
    from invperm_interp.analysis.sweep_record import SweepRecord
    from invperm_interp.analysis.verdict import BORDERLINE, NONE, Answer
    from invperm_interp.maths.placement import Placement

    placed = mechanism if isinstance(mechanism, Placement) else None
    mechanism = str(mechanism)
    tested = tuple(tests if tests is not None else [scored(mechanism, placement=placed)])
    tested += tuple(scored(placement=p) for p in also if isinstance(p, Placement))
    also = tuple(map(str, also))
    minimal = MinimalCircuit(tested[0].cells, ("L2.x",), True, Score(0.01, 1.0, 0.97, n=512), 0.9,
                             optimal, 100, candidates)
    answer = Answer.of_label(mechanism)
    chosen = None if answer.verdict == NONE else tested[0]
    borderline = (tested[0].hypothesis,) if answer.verdict == BORDERLINE else ()
    mech = Mechanism(answer.name, chosen, tested, minimal, also_faithful=tuple(also),
                     borderline=borderline, placement=placed if placed and not placed.trivial else None)
    under = {"mean": mechanism if mean is None else mean,
             "resample": mechanism if resample is None else resample}
    return SweepRecord(mech, samples, seed, tuple(map(Answer.of_label, names or [mechanism] * 3)),
                       {style: Answer.of_label(text) for style, text in under.items()},
                       {style: tested for style in under})


def svg_doc(drawing):
    """A ``viz.svg.Drawing`` parsed as XML (parsing also checks it is well-formed)."""
    import xml.dom.minidom

    return xml.dom.minidom.parseString(drawing.svg())


def svg_texts(doc) -> list[tuple[str, float, float]]:
    """Each ``<text>`` of ``doc``: its text and its ``x``, ``y``, in drawing order."""
    return [(t.firstChild.data, float(t.getAttribute("x")), float(t.getAttribute("y")))
            for t in doc.getElementsByTagName("text") if t.firstChild]


def svg_polylines(doc) -> list[tuple[str, list[tuple[float, float]]]]:
    """Each ``<polyline>`` of ``doc``: its stroke colour and its points."""
    return [(line.getAttribute("stroke"),
             [tuple(map(float, p.split(","))) for p in line.getAttribute("points").split()])
            for line in doc.getElementsByTagName("polyline")]


def svg_image(doc):
    """``doc``'s (first) raster image decoded by Pillow, ``(rows, cols, 4)`` uint8, and its box
    ``(x, y, width, height)``."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    node = doc.getElementsByTagName("image")[0]
    data = base64.b64decode(node.getAttribute("href").split(",", 1)[1])
    box = tuple(float(node.getAttribute(k)) for k in ("x", "y", "width", "height"))
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGBA")), box


def numpy_forward(As, W_U, X, causal: bool, rows: slice, silent=frozenset()) -> np.ndarray:
    """The disentangled transformer in numpy: ``h0 = [X, I]``, per head ``softmax(h A hᵀ) h``
    concatenated onto the stream, the read-out rows times ``W_U``; the ``silent`` heads
    ``(layer, head)`` write zeros instead."""
    B, T, _ = X.shape
    h = np.concatenate([X, np.broadcast_to(np.eye(T), (B, T, T))], axis=-1)
    hidden = np.triu(np.ones((T, T), dtype=bool), k=1)
    for layer, A in enumerate(As):
        outs = []
        for k, head in enumerate(A):
            if (layer, k) in silent:
                outs.append(np.zeros_like(h))
                continue
            s = np.einsum("bid,de,bje->bij", h, head, h)
            if causal:
                s = np.where(hidden, -np.inf, s)
            p = np.exp(s - s.max(-1, keepdims=True))
            outs.append(np.einsum("bij,bjd->bid", p / p.sum(-1, keepdims=True), h))
        h = np.concatenate([h, *outs], axis=-1)
    return h[:, rows] @ W_U


def numpy_run(cfg, As, W_U, X):
    """:func:`numpy_forward` of a config's weights ``As`` (per layer ``(H_l, D_l, D_l)``) and ``W_U``."""
    return numpy_forward([a.numpy() for a in As], W_U.numpy(), X, cfg.causal, cfg.readout_rows)


_NETWORK_LOADS = (
    r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=\s*[\"']?(?:https?:)?//",  # tags that fetch
    r"\bimport\b[^;\n]*\bfrom\s*[\"'](?:https?:)?//",  # ES module imports from a CDN
)


def loads_from_network(page: str) -> bool:
    """True if an HTML page would fetch anything: a remote script/link/img/iframe or a CDN import."""
    import re

    return any(re.search(pattern, page) for pattern in _NETWORK_LOADS)
