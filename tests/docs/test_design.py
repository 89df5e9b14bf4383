"""docs/design.md held to the code where it states a fact the code can check: the modules its
section 8 names, and that every ablation style runs batched (no hooked forward per variant)."""

import re

import pytest
import torch
from helpers import REPO

from invperm_interp import HookedDisentangledTransformer
from invperm_interp.analysis import faithfulness
from invperm_interp.maths import constructions
from invperm_interp.task import sample_batch

DESIGN = (REPO / "docs" / "design.md").read_text()
PACKAGE = REPO / "src" / "invperm_interp"
#: Folders whose section-8 row names every module (viz/ and cli/ are described in words).
NAMED_IN_FULL = ("model", "maths", "runs", "training", "sweep", "analysis")


def section_8_rows() -> dict[str, str]:
    table = DESIGN.split("## 8. Architecture")[1].split("###")[0]
    rows = re.findall(r"^\| `(\w+)/` \| (.*) \|$", table, flags=re.M)
    return dict(rows)


def test_every_module_section_8_names_exists_and_each_listed_folder_names_all_of_its_modules():
    rows = section_8_rows()
    assert set(NAMED_IN_FULL) <= set(rows)
    for folder in NAMED_IN_FULL:
        # modules are the backticked names outside parentheses (inside: what a module holds)
        row = rows[folder]
        while re.search(r"\([^()]*\)", row):
            row = re.sub(r"\([^()]*\)", "", row)
        named = set(re.findall(r"`(\w+)`", row))
        modules = {p.stem for p in (PACKAGE / folder).glob("*.py") if p.stem != "__init__"}
        assert named - modules == set(), f"{folder}/: design.md names modules that do not exist"
        assert modules - named == set(), f"{folder}/: modules design.md section 8 does not name"


def test_the_design_does_not_say_mean_ablation_runs_one_at_a_time():
    assert "one at a time through the" not in DESIGN
    assert re.search(r"Under every ablation style\s+\(zero, mean and resample\)", DESIGN)


@pytest.mark.parametrize("ablation", ["zero", "mean", "resample"])
def test_every_ablation_style_runs_its_variants_batched(ablation, monkeypatch):
    """The circuit alone, the model without it and the circuit less each atom (4 variants of a
    two-cell circuit) cost the hooked model only its clean run: no hooked forward per variant."""
    model = constructions.build("two_block", 3)
    batch = sample_batch(model.cfg.layout, 32, generator=torch.Generator().manual_seed(0))
    hooked = HookedDisentangledTransformer.forward
    calls = []

    def counted(self, *args, **kwargs):
        calls.append(1)
        return hooked(self, *args, **kwargs)

    monkeypatch.setattr(HookedDisentangledTransformer, "forward", counted)
    f = faithfulness(model, "two_block", batch, ablation=ablation)
    assert f.circuit.rows_exact == 1.0 and len(f.minimality) == 2
    assert len(calls) <= 2  # the clean run (and the reference batch's, for mean and resample)


def test_the_architecture_tests_limits_are_the_ones_section_8_states():
    """Section 8 says what the architecture test fails on; its size cap is the test's."""
    test = (REPO / "tests" / "test_architecture.py").read_text()
    (cap,) = re.findall(r"^MAX_LINES = (\d+)$", test, flags=re.M)
    (stated,) = re.findall(r"on a module over (\d+) lines", " ".join(DESIGN.split()))
    assert stated == cap
    for check in ("def test_no_import_cycle_in_the_package",
                  "def test_nothing_under_training_imports_transformer_lens",
                  "assert doc and len(doc.split()) >= 8"):  # every subpackage has a docstring
        assert check in test, check
