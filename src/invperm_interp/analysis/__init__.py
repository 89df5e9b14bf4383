"""Analyses of learned and analytic weights: the gauge, template matching, comparison, ablations
and activation patching. The public surface is listed here explicitly."""

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
from .gauge import gauge_check, gauge_fix, gauge_fixed, key_gauge_basis, perturb, random_gauge
from .patch import (
    LabelledTensor,
    mse_to,
    patch,
    patch_block_positions,
    patch_blocks,
    patch_positions,
)
from .templates import (
    Atom,
    CellMatch,
    Circuit,
    default_templates,
    explain,
    match_templates,
)

__all__ = [
    "AblationResult",
    "Atom",
    "CellMatch",
    "CellSimilarity",
    "Circuit",
    "Comparison",
    "ConstructionMatch",
    "HeadComparison",
    "LabelledTensor",
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
