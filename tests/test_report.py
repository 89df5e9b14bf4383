"""The HTML report: every section present, self-contained, and the CLI writes it."""

import json

import torch
from conftest import loads_from_network

from invperm_interp import constructions, sample_batch
from invperm_interp.analysis.summary import headline, summarize
from invperm_interp.cli import main
from invperm_interp.viz.report import write_report


def test_report_of_a_causal_construction(tmp_path):
    model = constructions.build("theorem3", 3)
    batch = sample_batch(model.cfg.layout, 64, torch.Generator().manual_seed(0), dtype=torch.float64)
    summary = summarize(model, batch, "construction theorem3")
    metrics = [{"step": s, "mse": 2.0 / (s + 1), "train_mse": None, "causal_floor": 0.0}
               for s in (0, 10, 20)]
    page = write_report(model, summary, batch, tmp_path / "r.html", metrics).read_text()
    for section in ("Summary", "Training", "Circuit", "Weights, gauge-fixed", "Ablations",
                    "Lemma 1 certificate", "Attention on one sample"):
        assert f"<h2>{section}</h2>" in page or f"<h3>{section}</h3>" in page, section
    assert "Every dependence of a read-out row on a later input row is exactly 0" in page
    assert page.count("data:image/png;base64,") == 4  # training, raw, gauge-fixed, dependency
    assert not loads_from_network(page)
    # the circuit table names the construction's cells
    for _layer, query, key, template in constructions.REGISTRY["theorem3"].cells:
        assert f"{template} at ({query}, {key})" in headline(summary)


def test_cli_report_on_a_construction(tmp_path, capsys):
    assert main(["report", "--construction", "two_block", "--d", "3", "--n", "32",
                 "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "analysis.json").read_text())
    assert data["mse"] < 1e-6 and data["causal_floor"] == 0.75
    assert (tmp_path / "report.html").stat().st_size > 100_000  # the inlined bundle
    assert "I at (pos.Y, pos.P)" in capsys.readouterr().out
