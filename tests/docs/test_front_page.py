"""The docs' front page and the README say the same about what lies beyond the note's model: one
table (experiment, what was asked, the answer with its counts and intervals, where to read more),
whose numbers tests/docs/test_results.py and test_shapes_results.py recompute from assets/, and one
committed figure."""

import re

from helpers import REPO

HEADER = "| experiment | what was asked | the answer | read |"


def beyond(path: str) -> str:
    text = (REPO / path).read_text()
    return text.split("## Beyond the note's model\n")[1].split("\n## ")[0]


def rows(section: str) -> list[str]:
    return [line for line in section.splitlines() if line.startswith("| ")]


def test_the_front_page_and_the_readme_hold_the_same_table():
    readme, front = rows(beyond("README.md")), rows(beyond("docs/index.md"))
    assert readme[0] == HEADER and len(readme) >= 8
    # the same rows, each link written from where its page sits
    assert front == [row.replace("](docs/", "](") for row in readme]
    for row in front[2:]:
        experiment, asked, answer, read = [c.strip() for c in row.strip("|").split(" | ")]
        assert experiment and asked.endswith("?") and re.search(r"\d+ of \d+|\d×", answer), row
        (link,) = re.findall(r"\]\(([^)]+\.md)\)", read)
        assert (REPO / "docs" / link).is_file(), link


def test_the_front_page_shows_one_committed_figure():
    figures = re.findall(r"!\[[^\]]+\]\((assets/[^)]+\.png)\)", beyond("docs/index.md"))
    assert len(figures) == 1 and (REPO / figures[0]).is_file()
