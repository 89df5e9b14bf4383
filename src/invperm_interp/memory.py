"""The memory budget: peak bytes of a model, a construction check, an evaluation and a training
step, computed from the configuration before anything is allocated, and checked against the memory
this process can still get; and how the process keeps the memory it frees (``keep_freed_memory``).

Estimates count the tensors the code allocates. Per layer ``l`` with ``H`` heads and width
``D = D_l``, a chunk of ``b`` samples of length ``T`` and element size ``e``:

- the stream ``h_l``: ``b·T·D``; queries ``q_l`` and the head outputs ``z_l``: ``b·H·T·D`` each;
  scores and patterns: ``b·H·T·T`` each; the next stream ``h_{l+1}``: ``b·T·D·(1 + H)``.
- Hooked forward without gradients (evaluation, a construction's check): the peak is the largest
  of ``h + 2q + 2·scores`` (inside attention) and ``h + 2q + h_{l+1}`` (the concatenation) over the
  layers, plus the final stream and its read-out rows.
- Analysis: the largest of its phases: the forwards on the whole batch (one at a time, or the
  gauge check's two together); the circuit searches' variants held at once with either the largest
  circuit fit or a chunk of them running (bounded by ``MAX_ELEMENTS``), both counted from the
  model's own cells (``analysis.budget``); the comparison with constructions at several β. Plus
  the fits the tester keeps and their float64 gauge factors, a few ``(D_l, D_l)`` per layer.
- Training step: counted from the code itself (``training.footprint``: the tensors autograd saves
  in one real step's forward, scaled from a few samples). Weights, their gradients and Adam's two
  moments are four copies of the parameters (two for SGD), plus the optimizer step's temporaries.

On top of the tensors, the allocator keeps freed blocks for reuse (glibc's heap on the CPU, with
the thresholds ``keep_freed_memory`` sets; PyTorch's cache on a GPU): the process's peak RSS measured
1.1-2.4 times the peak of live tensor bytes. ``SLACK`` (half the activations) is added for it.

The check is arithmetic only (microseconds) and runs before every ``train``, ``constructions.build``
and ``constructions.verify``. The limit is the smallest of ``MemAvailable`` in ``/proc/meminfo``, the
process's cgroup limit (minus its use) and ``RLIMIT_AS`` (minus the address space in use, at least
the first check's plus ``ADDRESS_SPACE_RESERVE``: what a command maps after it besides its tensors,
numpy's OpenBLAS buffer (OpenBLAS exits where it cannot map it), matplotlib, threads' stacks and
arenas, 136-155 MiB measured; ``cli.address_space`` checks ``ulimit -v`` first), or free GPU memory
for a CUDA device; ``max_memory`` replaces it. tests/test_memory.py holds the estimates to within 2x
of measured peaks (peak RSS growth of a fresh process).
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import resource
import sys
from dataclasses import dataclass, field

import torch

from .architecture import WIDTHS_HINT
from .config import ModelConfig

KEEP_FREED_MEMORY = True  # CPU work on Linux: tune glibc malloc once, see keep_freed_memory
_malloc = {"tried": False, "tuned": False}
MALLOC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")  # glibc's own settings: left alone


def keep_freed_memory() -> bool:
    """Ask glibc malloc to keep freed blocks (mmap threshold 32 MiB, trim threshold 256 MiB); True
    once done in this process.

    Training steps and an analysis's circuits free and re-allocate their tensors; glibc's defaults
    hand large blocks back to the OS to be page-faulted in again (``benchmarks/train_speed.py``; an
    analysis of theorem3 at d = 6 faulted ~5× less, tested). Process-wide, so done once, on Linux
    with glibc, unless the environment sets glibc's thresholds (the user's choice;
    ``benchmarks/memory_estimate.py`` sets one to measure live peaks)."""
    if _malloc["tried"] or not KEEP_FREED_MEMORY or not sys.platform.startswith("linux"):
        return _malloc["tuned"]
    _malloc["tried"] = True  # once, whether or not this libc can
    if any(n in os.environ for n in MALLOC_ENV) or "glibc.malloc." in os.getenv("GLIBC_TUNABLES", ""):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        _malloc["tuned"] = (libc.mallopt(-3, 32 << 20) == 1  # M_MMAP_THRESHOLD
                            and libc.mallopt(-1, 256 << 20) == 1)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass
    return _malloc["tuned"]


GB = 1e9
SLACK = 0.5  # allocator slack, as a share of the activations (see the module docstring)
ADDRESS_SPACE_RESERVE = 160 * 2**20  # mapped after a first check besides tensors (module docstring)
_FIRST_CHECK: dict[str, int] = {}  # the address space in use at the process's first check
#: The analysis's records, Python objects and kernel workspaces, which do not scale with the model:
#: the smallest analysis (d = 3, two layers of one head, 16 samples) grew the process by 1-5 MB in
#: ten fresh processes; the allocator's slack on what scales is ``SLACK``.
ANALYSIS_OVERHEAD = 8 * 2**20
CIRCUITS_HELD = 64  # analysis.faithfulness.CIRCUITS_HELD (tests/test_memory.py holds them equal)
_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "ki": 2**10, "mi": 2**20, "gi": 2**30,
          "ti": 2**40}


class MemoryBudgetError(ValueError):
    """The estimated peak does not fit the memory limit; the message says what to lower."""


@dataclass(frozen=True)
class Estimate:
    """Estimated peak bytes of a job, by part (``parts`` add up to ``total``); ``lower`` names
    the settings that would shrink the largest part."""

    what: str  # "this training run", "the construction check", …
    parts: dict[str, int] = field(default_factory=dict)
    lower: str = ""

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def describe(self) -> str:
        parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in self.parts.items() if v)
        return f"about {format_bytes(self.total)} ({parts})"


def format_bytes(n: float) -> str:
    if n >= 1e6 * GB:
        return f"{n / GB:.2g} GB"
    if n >= 0.1 * GB:
        return f"{n / GB:.2f} GB"
    return f"{n / 1e6:.1f} MB"


def parse_size(text: str | int | float) -> int:
    """``"8G"``, ``"1.5GB"``, ``"500MiB"``, ``"2e9"`` or a number of bytes → bytes (``ValueError``
    naming ``max_memory`` otherwise)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    elif isinstance(text, str) and (m := re.fullmatch(r"\s*([0-9.eE+]+)\s*([kKmMgGtT]i?)?[bB]?\s*",
                                                       text)):
        try:
            value = float(m.group(1)) * _UNITS[(m.group(2) or "").lower()]
        except ValueError:
            value = float("nan")
    else:
        value = float("nan")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"max_memory must be a positive size such as 8G, 500M or 2e9 (bytes), "
                         f"got {text!r}")
    return int(value)


# -- what the machine allows ---------------------------------------------------------------------
def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_available() -> int | None:
    """Bytes the process's memory cgroup still allows (v2 or v1), None without a limit."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    best = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2
            candidates = [(f"/sys/fs/cgroup{path}", "memory.max", "memory.current", "inactive_file"),
                          ("/sys/fs/cgroup", "memory.max", "memory.current", "inactive_file")]
        elif "memory" in controllers.split(","):  # v1
            candidates = [(f"/sys/fs/cgroup/memory{path}", "memory.limit_in_bytes",
                           "memory.usage_in_bytes", "total_inactive_file"),
                          ("/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes",
                           "total_inactive_file")]
        else:
            continue
        for folder, limit_file, usage_file, inactive_key in candidates:
            limit, usage = _read_int(f"{folder}/{limit_file}"), _read_int(f"{folder}/{usage_file}")
            if limit is None or usage is None:
                continue
            if limit >= 2**60:  # "max" or the v1 unlimited sentinel
                break
            inactive = 0  # page cache the kernel reclaims before failing an allocation
            try:
                with open(f"{folder}/memory.stat") as f:
                    for stat in f:
                        key, _, value = stat.partition(" ")
                        if key == inactive_key:
                            inactive = int(value)
            except (OSError, ValueError):
                pass
            free = max(0, limit - usage + inactive)
            best = free if best is None else min(best, free)
            break
    return best


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _address_space_left() -> int | None:
    """``RLIMIT_AS`` minus the address space in use, at least the first check's plus the reserve."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/status") as f:
            used = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    except (OSError, StopIteration, ValueError):
        used = 0
    return max(0, soft - max(used, _FIRST_CHECK.setdefault("used", used) + ADDRESS_SPACE_RESERVE))


def available_memory(device: torch.device | str = "cpu") -> tuple[int | None, str]:
    """``(bytes this process can still allocate, where that figure comes from)``; ``None`` when
    nothing could be read (then nothing is refused)."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free, f"free memory of {device}"
    limits = [(v, why) for v, why in (
        (_meminfo_available(), "MemAvailable in /proc/meminfo"),
        (_cgroup_available(), "the memory cgroup's limit minus its use"),
        (_address_space_left(), "RLIMIT_AS (ulimit -v) minus the address space in use or reserved"),
    ) if v is not None]
    return min(limits) if limits else (None, "unknown")


def check(estimate: Estimate, max_memory: int | str | None = None,
          device: torch.device | str = "cpu") -> None:
    """Raise :class:`MemoryBudgetError` when ``estimate`` exceeds ``max_memory`` (bytes, or a size
    such as ``"8G"``) or, without it, the memory available to this process."""
    limit, source = available_memory(device) if max_memory is None else (parse_size(max_memory), "max_memory")
    if limit is None or estimate.total <= limit:
        return
    advice = f"lower {estimate.lower}" if estimate.lower else "use a smaller configuration"
    raise MemoryBudgetError(
        f"{estimate.what} needs {estimate.describe()} but {format_bytes(limit)} is available "
        f"({source}); {advice}, or set max_memory (--max-memory) if you know better")


# -- what a job needs -------------------------------------------------------------------------------
def elem(cfg: ModelConfig) -> int:
    """Bytes per element of the model's dtype."""
    return 8 if cfg.dtype == "float64" else 4


def batch_bytes(cfg: ModelConfig, n: int) -> int:
    """A ``Batch`` of ``n`` samples (``X``, ``P``, ``Y``, ``Y_P``, ``perm``) plus the int64 draw of
    ``Y`` that ``sample_batch`` converts."""
    d = cfg.d
    return n * ((cfg.T * d + 3 * d * d) * elem(cfg) + d * 8 + d * d * 8)


def forward_bytes(cfg: ModelConfig, b: int) -> int:
    """Peak bytes of the hooked forward on ``b`` samples without gradients, beyond the weights and
    the input (a standard model: its stream, queries, keys, values, scores and MLP; the
    disentangled model's widths ``D_l`` otherwise)."""
    return elem(cfg) * cfg.architecture.forward_elements(cfg, b)


def model_estimate(cfg: ModelConfig, what: str = "the model") -> Estimate:
    return Estimate(what, {"weights": cfg.n_params * elem(cfg)},
                    lower=WIDTHS_HINT)


def evaluation_estimate(cfg: ModelConfig, n: int, chunk: int | None = None,
                        what: str = "the evaluation") -> Estimate:
    """``n`` samples drawn and run through the hooked model ``chunk`` at a time (all at once when
    ``chunk`` is None), weights included."""
    b = n if chunk is None else min(n, chunk)
    activations = forward_bytes(cfg, b)
    return Estimate(what, {"weights": cfg.n_params * elem(cfg),
                           "samples": batch_bytes(cfg, n), "activations": activations,
                           "allocator slack": int(SLACK * activations)},
                    lower="the number of samples (n) or d")


def combined(estimates: list[Estimate], what: str) -> Estimate:
    """Jobs that are alive together (``train_many``'s vectorised bucket): their parts add up."""
    parts: dict[str, int] = {}
    for estimate in estimates:
        for name, n in estimate.parts.items():
            parts[name] = parts.get(name, 0) + n
    lower = f"the number of runs trained together, or {estimates[0].lower}" if estimates else ""
    return Estimate(what, parts, lower=lower)


def gauge_factor_bytes(cfg: ModelConfig) -> int:
    """The circuit fits' gauge factors (``analysis.projection``), cached per layer: the two
    float64 ``(D_l, D_l)`` projectors and the bases ``U``, ``W``, ``V`` of their ranges (about two
    more ``(D_l, D_l)``). A fit on a circuit's cells forms a matrix of its entries (``|S|²`` or
    ``|S|·r``, at most ~25 MB at D = 162 in benchmarks/memory_estimate.py), left to the slack."""
    return sum(4 * D * D * 8 for D in cfg.widths)


#: Largest ``variants × batch × T × D_L`` entries in one ``forward_many`` chunk (16 MiB of float64):
#: on a CPU, chunks larger than the caches run slower than one variant at a time.
MAX_ELEMENTS = 1 << 21


def chunk_variants(cfg: ModelConfig, n: int) -> int:
    """Variants of ``n`` samples ``model.variants.forward_many`` runs in one chunk: ``V·n·T·D_L``
    at most ``MAX_ELEMENTS`` (one when a single one is larger)."""
    return max(1, MAX_ELEMENTS // max(n * cfg.T * cfg.widths[-1], 1))


def variant_bytes(cfg: ModelConfig, n: int, variants: int = CIRCUITS_HELD) -> int:
    """One chunk of circuit-only variants run together (``model.variants.forward_stacked``, as the
    circuit searches do): :func:`chunk_variants`, and no more than the ``variants`` run at
    once, ``b = V·n`` samples. Per layer, one head at a time: the stream ``h_l`` (``b·T·D``), the
    next stream's pieces and their concatenation (``b·R·D·(1 + H)`` each), and the head's query
    rows gathered, query, gathered keys and values, scores, pattern and output
    (``3·b·R·D + 2·b·T·D + 2·b·R·T``), beside the previous head's values until they are replaced
    (``b·T·D``), with ``R = T`` query rows but the read-out rows alone in the last layer; every
    column counted (a variant computes only those it reads). Beyond the first layer, one variant
    to a chunk also holds the first layer it shares with others (``model.variants.first_layer``,
    ``n·T·D_1``)."""
    b, e, T, peak = n * min(variants, chunk_variants(cfg, n)), elem(cfg), cfg.T, 0
    last = len(cfg.heads) - 1
    shared = n * T * cfg.widths[1] if last > 0 and b == n else 0
    for layer, (H, D) in enumerate(zip(cfg.heads, cfg.widths)):
        R = cfg.layout.segment(cfg.readout).n_rows if layer == last else T
        nxt = b * R * D * (1 + H)
        head = 3 * b * R * D + 2 * b * T * D + 2 * b * R * T + (b * T * D if H > 1 else 0)
        peak = max(peak, b * T * D + nxt + max(nxt, head) + (shared if layer else 0))
    return peak * e


def circuit_weights_bytes(cfg: ModelConfig, circuits: int = CIRCUITS_HELD) -> int:
    """``circuits`` circuit variants held at once (``analysis.faithfulness.CIRCUITS_HELD`` at
    most): per variant its circuit-only weights and the part it removed, ``(H_l, D_l, D_l)`` each
    per layer, float64."""
    return circuits * 2 * sum(H * D * D * 8 for H, D in zip(cfg.heads, cfg.widths))


def standin_bytes(cfg: ModelConfig, n: int, per_sample: bool) -> int:
    """What a tester under mean (``per_sample=False``) or resample ablation holds on ``n``
    samples beside the zero-ablation analysis (``analysis.standin.StandIn``), float64: the clean
    streams ``h^0 … h^{L-1}`` ``(n, T, D_l)``, their gauge coordinates (``2·D_l/D_0 - 1`` per row:
    a layer's query-null and key-gauge directions, one per copy of the position block), each
    layer's term of ``gauge_fix(A)`` (``(H_l, T, T)``, per sample ``(n, H_l, T, T)``), and the
    largest dense term being formed, ``h R`` ``(n, H_l, T, D_l)``."""
    T, widths = cfg.T, cfg.widths[:-1]
    streams = sum(n * T * (D + 2 * D // widths[0]) for D in widths)  # h, its gauge coordinates
    terms = sum(H * (n if per_sample else 1) * T * T for H in cfg.heads)
    forming = max(n * H * T * (D + (T if per_sample else 0)) for H, D in zip(cfg.heads, widths))
    return 8 * (streams + terms + forming)


def analysis_estimate(cfg: ModelConfig, n: int, *, circuits: int = CIRCUITS_HELD,
                      fits: int = 0, kept: int = 0, dense: bool = True, gauge: bool = True,
                      compared: tuple[int, int] = (0, 0)) -> Estimate:
    """``invperm analyze`` on ``n`` samples: the weights, the samples, the gauge factors
    (:func:`gauge_factor_bytes`) and the largest of its phases, each transient with its allocator
    slack (``SLACK``), plus ``kept`` bytes of fits the tester keeps for the whole analysis.

    - Forwards on the whole batch: one hooked forward's activations (:func:`forward_bytes`). The
      analysis runs ``model.variants``' forwards, which form the last layer on the read-out rows
      only; two of them together (the gauge check's two weights, when one chunk holds both) fit
      in it (3 layers of 2 heads at d = 4 on 256 samples at initialisation: 13.5 MB measured
      against 20.9 MB estimated, ``benchmarks/memory_estimate.py``).
    - Circuit tests and searches: the weights of ``circuits`` variants built before they run
      (:func:`circuit_weights_bytes`) and their outputs, and beside them either the largest fit
      (``fits`` bytes, made while the variants are built) or, with ``dense``, one chunk of them
      running (:func:`variant_bytes`; a placed construction's few cells compute a sliver of it).
    - ``compared``: ``(activations, held)`` of the comparison with the registry's constructions
      at several β (two layers of one head only), counted by ``analysis.budget``.

    What the searches hold depends on the weights: ``analysis.budget.analysis_estimate`` counts
    ``circuits``, ``fits``, ``kept``, ``dense`` and ``compared`` from the model (the defaults: a
    searched model, without its fits); ``gauge=False`` leaves out gauge factors already made.
    ``ANALYSIS_OVERHEAD`` is added for what does not scale with the model."""
    forwards = forward_bytes(cfg, n)
    chunk = variant_bytes(cfg, n, max(circuits, 1)) if dense else 0
    transient = max(chunk, fits)  # named for the larger: the variants running, or a fit
    weights = circuit_weights_bytes(cfg, circuits)
    weights += circuits * n * cfg.d * cfg.d * elem(cfg)  # their outputs, (n, d, d) each, scored last
    phases = [{"activations": forwards, "allocator slack": int(SLACK * forwards)},
              {"activations" if chunk >= fits else "largest circuit fit": transient,
               "allocator slack": int(SLACK * transient), "circuit weights": weights},
              {"activations": compared[0], "allocator slack": int(SLACK * compared[0]),
               "constructions compared": compared[1]}]
    phase = max(phases, key=lambda p: sum(p.values()))
    common = {"weights": cfg.n_params * elem(cfg), "samples": batch_bytes(cfg, n)}
    return Estimate(f"the analysis on n={n} samples",
                    {**common, **phase, "circuit fits": kept,
                     "gauge factors": gauge_factor_bytes(cfg) if gauge else 0,
                     "overhead": ANALYSIS_OVERHEAD},
                    lower="the number of samples (--n), d, n_layers or n_heads")
