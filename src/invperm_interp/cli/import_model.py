"""The ``invperm import`` subcommand: a user's TransformerLens model, saved as a safetensors state
dict and its configuration as JSON (``model.standard_import``), written as a run directory
(the layout ``invperm train`` writes: ``config.json``, ``metrics.jsonl``, ``final.safetensors``) so
that ``invperm analyze``, ``report``, ``discover`` … read it as a trained run.

The command takes the models whose map to the note's blocks is exact: attention only, no
normalisation, an output of width ``d`` and a context of at least ``T``; the token embedding has
``d`` rows (fed ``X W_E`` as ``inputs_embeds``) or one per token of the task's vocabulary, linear
in the rows (a free one only with ``--approximate``, read as its least-squares ``W_E``). It states
how exact the import is, the largest error of the imported model's output against TransformerLens's
own forward relative to its scale, in float64 on a batch, and writes it into the run
(``import.json`` and the final weights' metadata).
"""

from __future__ import annotations

import argparse
import json

from .args import HelpFormatter, describe, examples, seed

__all__ = ["IMPORT_RECORD", "add_import_parser", "import_run"]

IMPORT_RECORD = "import.json"  # in the run directory: where the model came from, how exact it is
SUPPORTED = ("attention only (attn_only=true), no normalisation (normalization_type=null), "
             "d_vocab = d_vocab_out = d (or d_vocab the task's token vocabulary) and n_ctx >= T")


def check_form(tl_cfg: dict, layout, config) -> None:
    """One ``ValueError`` unless the configuration ``tl_cfg`` (read from ``config``) is of the form
    whose map to the note's blocks is exact (:data:`SUPPORTED`)."""
    norm = tl_cfg.get("normalization_type")
    if norm is not None:
        raise ValueError(f"config {config} has normalization_type={norm!r}: invperm import takes "
                         f"{SUPPORTED}, since LayerNorm divides each row by its own norm, which no "
                         f"fixed bilinear form of the note's blocks reproduces")
    if tl_cfg.get("attn_only") is not True:
        raise ValueError(f"config {config} has MLPs (attn_only={tl_cfg.get('attn_only')!r}): invperm "
                         f"import takes {SUPPORTED}, since an MLP is not linear in the stream")
    if tl_cfg.get("d_vocab_out", tl_cfg.get("d_vocab")) != layout.d:
        raise ValueError(f"config {config} has d_vocab_out={tl_cfg.get('d_vocab_out')!r}, the task "
                         f"has d = {layout.d} (--d): invperm import takes {SUPPORTED}")
    if tl_cfg["n_ctx"] < layout.T:
        raise ValueError(f"config {config} has n_ctx={tl_cfg['n_ctx']}, the task's layout "
                         f"{layout} has T = {layout.T} rows: invperm import takes {SUPPORTED}")


def _errors(bridge64, model64, X) -> tuple[float, float]:
    """``model64``'s error against ``bridge64`` (``standard_import.import_error``) and that of the
    disentangled model it maps to, both float64."""
    import torch

    from ..model.note_map import to_disentangled
    from ..model.standard_import import import_error, native_output

    cfg = model64.cfg
    theirs = native_output(bridge64, cfg.layout, cfg.readout, X)
    with torch.no_grad():
        mapped = to_disentangled(model64)(X)
    return (import_error(bridge64, model64, X),
            (mapped - theirs).abs().max().item() / max(1.0, theirs.abs().max().item()))


def import_run(weights, config, out, layout, readout: str, *, approximate: bool = False,
               n: int = 256, seed: int = 0) -> dict:
    """Import the TransformerLens model saved as ``weights`` (safetensors) and ``config`` (JSON)
    on ``layout``, reading ``readout``'s rows, into the new run directory ``out``; returns the
    import record (also ``out/import.json``): its exactness on ``n`` samples from ``seed``."""
    from pathlib import Path

    import torch

    from .. import sample_batch
    from ..model.standard_import import (
        LINEAR_TOL,
        embedding_residual,
        import_error,
        standard_from_transformer_lens,
    )
    from ..model.transformer_lens_files import load_native, read_native_config
    from ..runs.directory import RunDir, check_writable

    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n (--n) must be an integer >= 1, got {n!r}")
    run = RunDir(out)
    check_writable(run.path, "choose another --out")
    run.check_new()
    tl_cfg = read_native_config(config)
    check_form(tl_cfg, layout, config)
    stored = tl_cfg["dtype"] if tl_cfg["dtype"] in (torch.float32, torch.float64) else torch.float32
    bridge, bridge64 = load_native(weights, config, stored), load_native(weights, config, torch.float64)
    X = sample_batch(layout, n, torch.Generator().manual_seed(seed), dtype=torch.float64).X
    residual = embedding_residual(bridge64, layout)
    free = residual > LINEAR_TOL
    if free and not approximate:
        guess = standard_from_transformer_lens(bridge64, layout, readout, approximate=True)
        error = _errors(bridge64, guess, X)[0]
        raise ValueError(f"the token embedding of {weights} is not linear in the task's rows (its "
                         f"least-squares W_E is off by {residual:.2g} of its scale): imported with "
                         f"--approximate, the model would be off by {error:.2g} of TransformerLens's "
                         f"output (float64, {n} samples); pass --approximate to import it so, or "
                         f"train with d_vocab = d fed X W_E as inputs_embeds "
                         f"(docs/guide/bring_your_own.md)")
    model = standard_from_transformer_lens(bridge, layout, readout, approximate=approximate)
    model64 = standard_from_transformer_lens(bridge64, layout, readout, approximate=approximate)
    error64, mapped64 = _errors(bridge64, model64, X)
    from importlib.metadata import version

    record = {
        "weights": str(Path(weights)), "config": str(Path(config)),
        "transformer_lens": version("transformer-lens"),
        "embedding": ("d rows, fed X W_E as inputs_embeds" if bridge.cfg.d_vocab == layout.d
                      else "the task's token vocabulary, " + ("its least-squares W_E (approximate)"
                                                              if free else "linear in the rows")),
        "embedding_residual": residual, "approximate": free,
        "biases_folded": model.cfg.d_model != bridge.cfg.d_model,
        "n_samples": n, "seed": seed,
        "max_relative_error_float64": error64,
        "max_relative_error_through_map_float64": mapped64,
        "max_relative_error_" + model.cfg.dtype: import_error(bridge, model, X),
    }
    _write(run, model, record, seed)
    return record


def _write(run, model, record: dict, seed: int) -> None:
    """``run``'s ``config.json``, ``metrics.jsonl`` (one evaluation at step 0 on the run's eval
    batch), ``final.safetensors`` (the record in its metadata) and ``import.json``."""
    import torch

    from .. import sample_batch
    from ..config import TrainConfig
    from ..maths.floors import causal_floor
    from ..runs import checkpoint as ckpt
    from ..runs.config_file import config_hash
    from ..runs.evaluation import Evaluation
    from ..runs.lock import RunLock
    from ..training.metrics import evaluate
    from ..training.trainer import seed_streams

    cfg = model.cfg
    train_cfg = TrainConfig(steps=1, seed=seed, device="cpu", out_dir=str(run.path)).resolved()
    eval_gen = torch.Generator().manual_seed(seed_streams(seed)["eval"])
    batch = sample_batch(cfg.layout, train_cfg.eval_size, eval_gen, dtype=cfg.torch_dtype)
    scores = evaluate(model, batch)
    evaluation = Evaluation(0, **scores._asdict(), causal_floor=causal_floor(cfg.layout, cfg.readout))
    with RunLock(run.path):
        run.write_config(cfg, train_cfg)
        run.write_metrics([evaluation])
        ckpt.save(run.final, ckpt.model_tensors(model),
                  {"step": 0, "config_hash": config_hash(cfg, train_cfg),
                   "metrics": evaluation.to_dict(), "stopped": None, "imported": record})
        ckpt.atomic_write(run.path / IMPORT_RECORD, (json.dumps(record, indent=2) + "\n").encode())


def _cmd_import(args: argparse.Namespace) -> None:
    """Import the model, print what was imported and how exactly, and what to run next."""
    from ..task import DEFAULT_READOUT, Layout
    from .analyze import set_threads

    set_threads(args.threads)
    if args.n_scratch is not None and args.layout != "scratch":
        raise ValueError("--n-scratch sets the scratch rows of --layout scratch; add --layout "
                         "scratch or drop --n-scratch")
    d = args.d
    if d is None:
        from ..model.transformer_lens_files import read_native_config

        d = read_native_config(args.config).get("d_vocab_out")
        if not (type(d) is int and d > 0):
            raise ValueError(f"config {args.config} gives no d_vocab_out; give the task size --d")
    layout = Layout.named(args.layout, d, args.n_scratch)
    readout = args.readout or DEFAULT_READOUT[args.layout]
    record = import_run(args.weights, args.config, args.out, layout, readout,
                        approximate=args.approximate, n=args.n, seed=args.seed)
    from ..runs.directory import RunDir

    cfg = RunDir(args.out).read_config()[0]
    dtype = cfg.dtype
    how = ("approximately: its token embedding read as its least-squares W_E (off by "
           f"{record['embedding_residual']:.2g} of its scale)" if record["approximate"] else "exactly")
    print(f"imported {args.weights} {how} into {args.out}: a standard model, {cfg.attention_dir}, "
          f"heads per layer {list(cfg.heads)}, d_model {cfg.d_model}"
          + (" (its attention biases folded into one more coordinate)" if record["biases_folded"]
             else "") + f", reading the {readout} rows of {layout}")
    print(f"its output against TransformerLens's forward, largest error relative to the output's "
          f"scale, on {record['n_samples']} samples: {record['max_relative_error_float64']:.2g} in "
          f"float64 (through the map to the note's blocks "
          f"{record['max_relative_error_through_map_float64']:.2g}), "
          f"{record['max_relative_error_' + dtype]:.2g} in {dtype} as stored")
    print(f"next: invperm analyze {args.out}")


def add_import_parser(sub) -> None:
    from .args import THREADS_HELP, threads

    about = ("a TransformerLens model saved as safetensors weights and a JSON config, as a run "
             "directory that every command reads (attention only, no normalisation)")
    imp = sub.add_parser("import", help=about, description=describe(about),
                         formatter_class=HelpFormatter, epilog=examples(
                             "invperm import model.safetensors config.json --out runs/mine",
                             "invperm import model.safetensors config.json --layout scratch --out "
                             "runs/mine   (reads the S rows)",
                             "invperm import tokens.safetensors config.json --approximate --out "
                             "runs/mine   (a free token embedding, least squares)"))
    imp.add_argument("weights", help="the state dict, saved with safetensors.torch.save_file("
                                     "bridge.state_dict(), PATH); never a pickle")
    imp.add_argument("config", help="its configuration as JSON: json.dump(bridge.cfg.to_dict(), "
                                    "file, default=str)")
    imp.add_argument("--out", required=True, help="the run directory to write (new or empty)")
    imp.add_argument("--layout", choices=["plain", "scratch", "code"], default="plain",
                     help="the task's input the model was trained on: [P; Y_P], [P; Y_P; S] or "
                          "the note's code's [0; P; Y_P; 0]")
    imp.add_argument("--d", type=int, help="task size (default: the config's d_vocab_out)")
    imp.add_argument("--n-scratch", type=int, help="scratch rows of --layout scratch (default d)")
    imp.add_argument("--readout", help="segment the model reads out: P, Y, S, pad0, pad1 (default P; "
                                       "S for --layout scratch; pad0 for --layout code)")
    imp.add_argument("--approximate", action="store_true",
                     help="import a token embedding that is not linear in the task's rows as its "
                          "least-squares W_E, its error printed and recorded (default: refused, "
                          "with the error it would have)")
    imp.add_argument("--n", type=int, default=256, help="samples the import's exactness is measured on")
    imp.add_argument("--seed", type=seed, default=0, help="seeds those samples and the run's eval batch")
    imp.add_argument("--threads", type=threads, help=THREADS_HELP)
    imp.set_defaults(func=_cmd_import)
