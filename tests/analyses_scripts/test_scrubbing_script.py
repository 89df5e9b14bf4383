"""analyses/scrubbing.py refuses a folder without analysed runs before writing anything, and writes
its table next to the runs unless asked to update the checkout's assets/."""

import json
import shutil

import pytest
from helpers import REPO, files_in, run_analyses_script

COMMITTED = json.loads((REPO / "assets" / "scrubbing.json").read_text())


@pytest.mark.parametrize("given", ["missing", "empty", "unanalysed"])
def test_a_folder_without_analysed_runs_is_one_line_and_nothing_is_written(
        given, tmp_path, assets, script, capsys):
    folder = tmp_path / "runs"
    if given != "missing":
        folder.mkdir()
    if given == "unanalysed":  # a run trained but not analysed: no mechanism.json
        (folder / "scratch_d10_seed0").mkdir()
    scrubbing = script("scrubbing")
    assert run_analyses_script(scrubbing, folder) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "runs" in err[0] and str(folder) in err[0] and "scrubbing.toml" in err[0]
    assert files_in(assets) == {}
    assert folder.is_dir() == (given != "missing")
    assert not any(p.name.startswith("scrubbing") for p in tmp_path.rglob("*"))


def kept_runs(folder, rows):
    """A sweep folder whose analysed runs each kept their row (scrubbing.json): the script reads
    the rows and loads no model."""
    for row in rows:
        run = folder / row["run"]
        run.mkdir(parents=True)
        (run / "mechanism.json").write_text("{}")
        (run / "scrubbing.json").write_text(json.dumps(row))


def test_the_table_is_written_next_to_the_runs_or_into_assets_when_asked(tmp_path, assets, script):
    folder = tmp_path / "runs"
    kept_runs(folder, COMMITTED)
    scrubbing = script("scrubbing")
    assert run_analyses_script(scrubbing, folder) == 0
    assert files_in(assets) == {}
    assert json.loads((folder / "scrubbing.json").read_text()) == COMMITTED
    assert (folder / "scrubbing.md").read_text() == (REPO / "assets" / "scrubbing.md").read_text()
    shutil.rmtree(folder / COMMITTED[0]["run"])  # one run fewer: a table of its own
    assert run_analyses_script(scrubbing, folder, "--out", tmp_path / "elsewhere") == 0
    assert json.loads((tmp_path / "elsewhere" / "scrubbing.json").read_text()) == COMMITTED[1:]
    assert files_in(assets) == {}
    assert run_analyses_script(scrubbing, folder, "--update-assets") == 0
    assert set(files_in(assets)) == {"scrubbing.json", "scrubbing.md"}
    assert json.loads((assets / "scrubbing.json").read_text()) == COMMITTED[1:]
