"""A folder holding a run the mechanism analyses cannot read (a standard model with LayerNorm: its
map to the disentangled model is not exact) beside one they can: ``discover`` skips it with a note,
``report DIR`` writes its behaviour page as ``analyze`` does, and neither stops at it."""

import json
import shutil
from dataclasses import replace

import pytest
from helpers import run, small

from invperm_interp.cli import main

REFUSED = "mechanism analysis refused: the map to the disentangled model is exact only without LayerNorm"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed")
    model_cfg, train_cfg = small(d=3, attention_dir="causal", steps=4)
    run(model_cfg, replace(train_cfg, out_dir=str(root / "plain")))
    run(replace(model_cfg, arch="standard", init_scale=None, d_model=8, layernorm=True),
        replace(train_cfg, out_dir=str(root / "ln")))
    return root


def test_discover_skips_the_run_with_a_note_and_a_reason(folder, tmp_path, capsys):
    found = tmp_path / "found.json"
    assert main(["discover", str(folder), "--n", "64", "--json", str(found)]) == 0
    printed = capsys.readouterr().out
    assert f"ln: skipped, {REFUSED}" in printed, printed
    reasons = json.loads(found.read_text())["reasons"]
    assert set(reasons) == {"plain", "ln"} and reasons["ln"].startswith(REFUSED), reasons


def test_report_of_the_folder_writes_the_behaviour_page_as_analyze_does(folder, tmp_path, capsys):
    root = tmp_path / "copy"
    shutil.copytree(folder, root)
    assert main(["report", str(root), "--n", "64", "--workers", "1"]) == 0
    page = (root / "ln" / "report.html").read_text()
    assert REFUSED in page and "the same weights bidirectional: MSE" in page and "<figure" in page
    assert (root / "plain" / "report.html").is_file()
    assert '<a href="ln/report.html">' in (root / "index.html").read_text()
    capsys.readouterr()
    (root / "ln" / "report.html").unlink()
    assert main(["analyze", str(root / "ln"), "--n", "64"]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[1].startswith(REFUSED) and shown[2] == f"wrote {root / 'ln' / 'report.html'}"
    assert REFUSED in (root / "ln" / "report.html").read_text()
