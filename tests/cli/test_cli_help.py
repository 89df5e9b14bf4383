"""The command line as a newcomer meets it: every --help says what the command does, shows its
defaults and gives an example to copy."""

import json
import re

import pytest

from invperm_interp.cli import main
from invperm_interp.cli.main import build_parser

COMMANDS = ["demo", "construct", "train", "analyze", "report", "sweep", "sweep-report", "discover",
            "timeline", "import"]


def _help(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as done:
        main(argv + ["--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def _option(text: str, flag: str) -> str:
    """The help of ``--flag`` in the options section, on one line."""
    options = text.split("options:\n")[1].split("\n\n")[0]
    found = re.search(rf"^  --{flag}\b.*?(?=^  -|\Z)", options, re.M | re.S)
    return " ".join(found.group(0).split())


def test_every_command_is_covered():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert sorted(sub.choices) == sorted(COMMANDS)


def test_top_level_help_is_a_description_with_examples(capsys):
    text = _help([], capsys)
    description = text.split("\n\n")[1]
    assert len(description.split()) > 40 and description.rstrip().endswith(".")
    assert "invperm demo" in description and "causal floor" in description
    assert re.search(r"^examples:\n  invperm ", text, re.M)


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_help_has_an_example_and_shows_its_defaults(command, capsys):
    text = _help([command], capsys)
    examples = text.split("examples:\n")[1].splitlines()
    assert examples and all(line.startswith(f"  invperm {command}") for line in examples if line)
    assert "default: None" not in text and "default: False" not in text


def test_defaults_are_shown_where_the_flag_is_optional(capsys):
    train = _help(["train"], capsys)
    from invperm_interp.config import TrainConfig

    t = TrainConfig()
    for flag, value in (("steps", t.steps), ("eval-every", t.eval_every),
                        ("eval-size", t.eval_size), ("checkpoint-every", t.checkpoint_every),
                        ("seed", t.seed)):
        assert f"default {value})" in _option(train, flag), flag
    assert "(default: 1500)" in _help(["demo"], capsys)
    assert "(default: 512)" in _help(["analyze"], capsys)


def test_threads_is_described_one_way(capsys):
    texts = [_option(_help([c], capsys), "threads") for c in ("demo", "train", "analyze")]
    assert len(set(texts)) == 1 and "1 on the CPU" in texts[0]


def test_scratch_layout_reads_the_scratch_rows_by_default(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--layout", "scratch", "--d", "3", "--steps", "2", "--eval-every", "1",
                 "--eval-size", "8", "--batch-size", "8", "--threads", "1", "--no-progress",
                 "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["readout"] == "S"
    assert "MSE on the eval batch" in capsys.readouterr().out
