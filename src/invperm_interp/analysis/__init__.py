"""Analyses of learned and analytic weights: the gauge, template matching, comparison, circuits
tested by running them (faithfulness, the mechanism rule, minimal circuits, causal scrubbing and
cell-level path patching), ablations, activation patching and the whole-model record (``analyze``
→ ``ModelAnalysis``). The public surface is listed here explicitly."""

from .ablate import (
    AblationResult,
    ablate_block,
    ablate_mask,
    ablate_scratch,
    flip_mask,
    read_blocks,
    standard_ablations,
)
from .compare import (
    CellSimilarity,
    Comparison,
    ConstructionMatch,
    HeadComparison,
    closest_construction,
    compare,
)
from .faithfulness import Faithfulness, Score, faithfulness
from .gauge import gauge_check, gauge_fix, gauge_fixed, key_gauge_basis, perturb, random_gauge
from .hypothesis import Hypothesis
from .mechanism import Mechanism, mechanism
from .minimal import MinimalCircuit, minimal_circuit
from .patch import (
    LabelledTensor,
    Sites,
    mse_to,
    patch,
    patch_block_positions,
    patch_blocks,
    patch_positions,
)
from .record import ModelAnalysis, analyze
from .scrub import PathPatching, cell_patching, completeness, partner_input, scrub
from .templates import (
    Atom,
    CellMatch,
    Circuit,
    default_templates,
    explain,
    match_templates,
)
from .verdict import FAITHFUL_RECOVERED, FAITHFUL_ROWS, RULE, Rule, evaluation_batch, is_faithful, judge

__all__ = [
    "FAITHFUL_RECOVERED",
    "FAITHFUL_ROWS",
    "Faithfulness",
    "Hypothesis",
    "Mechanism",
    "MinimalCircuit",
    "ModelAnalysis",
    "RULE",
    "Rule",
    "Score",
    "analyze",
    "evaluation_batch",
    "faithfulness",
    "is_faithful",
    "judge",
    "mechanism",
    "minimal_circuit",
    "PathPatching",
    "cell_patching",
    "completeness",
    "partner_input",
    "scrub",
    "AblationResult",
    "Atom",
    "CellMatch",
    "CellSimilarity",
    "Circuit",
    "Comparison",
    "ConstructionMatch",
    "HeadComparison",
    "LabelledTensor",
    "Sites",
    "ablate_block",
    "ablate_mask",
    "ablate_scratch",
    "closest_construction",
    "compare",
    "default_templates",
    "explain",
    "flip_mask",
    "gauge_check",
    "gauge_fix",
    "gauge_fixed",
    "key_gauge_basis",
    "match_templates",
    "mse_to",
    "patch",
    "patch_block_positions",
    "patch_blocks",
    "patch_positions",
    "perturb",
    "random_gauge",
    "read_blocks",
    "standard_ablations",
]
