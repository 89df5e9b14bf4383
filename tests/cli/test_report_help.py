"""``invperm report`` is ``invperm analyze`` under another name; its help says what it gives from
that side instead of repeating analyze's word for word."""

import pytest

from invperm_interp.cli import main


def _description(command: str, capsys) -> str:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    return " ".join(text.split("\n\n")[1].split())  # the paragraph after the usage


def test_report_and_analyze_have_their_own_descriptions(capsys):
    report, analyze = _description("report", capsys), _description("analyze", capsys)
    assert report != analyze
    assert "report.html" in report and "invperm analyze" in report and "index.html" in report
    with pytest.raises(SystemExit):
        main(["--help"])
    listing = capsys.readouterr().out
    lines = {w.split()[0]: " ".join(w.split()[1:]) for w in listing.splitlines()
             if w.startswith("    ") and len(w.split()) > 1}
    assert lines.get("report") != lines.get("analyze")
