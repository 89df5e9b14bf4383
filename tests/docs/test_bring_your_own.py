"""Every block of "Bring your own TransformerLens model" runs as written, in the page's order: the
Python blocks in one namespace, each command line through ``invperm``'s ``main``, in a fresh
directory (the page trains 500 steps: a few seconds)."""

import json
import re
import shlex

import pytest
from helpers import REPO

from invperm_interp.cli import main

PAGE = REPO / "docs" / "guide" / "bring_your_own.md"
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)


def test_the_page_has_the_steps_and_is_linked():
    langs = [lang for lang, _ in BLOCKS]
    assert langs.count("python") >= 4 and langs.count("bash") == 1
    commands = [line for lang, body in BLOCKS if lang == "bash" for line in body.splitlines()]
    assert [c.split()[1] for c in commands] == ["import", "analyze"]
    assert "bring_your_own.md" in (REPO / "docs" / "guide" / "transformer_lens.md").read_text()


@pytest.mark.slow
def test_every_block_of_the_page_runs_in_order(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    for lang, body in BLOCKS:
        if lang == "python":
            exec(compile(body, str(PAGE), "exec"), namespace)
        elif lang == "bash":
            for line in body.splitlines():
                argv = shlex.split(line)[1:] + (["--n", "64"] if "analyze" in line else [])
                assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    record = json.loads((tmp_path / "runs" / "mine" / "import.json").read_text())
    assert record["max_relative_error_float64"] <= 1e-10, record
    assert record["max_relative_error_through_map_float64"] <= 1e-10, record
    assert record["biases_folded"] and not record["approximate"]
    assert (tmp_path / "runs" / "mine" / "analysis.json").is_file()
    assert "imported model.safetensors exactly into runs/mine" in out
    assert "not linear in the task's rows" in out and "off by" in out
