"""The analyses scripts' tests run each script in this process with the checkout's ``assets/``
replaced by an empty folder of the test's own (``analyses/common.py``'s ``ASSETS``, which every
script writes through): a script that writes there unasked fills that folder, where the test sees
it, not the checkout. The checkout's ``assets/`` is checked unchanged after each test too."""

from pathlib import Path

import pytest
from helpers import REPO, analyses_script, files_in


@pytest.fixture
def assets(tmp_path, monkeypatch):
    """The stand-in for ``assets/``: ``tmp_path/assets``, empty, patched into ``analyses/common.py``
    (import scripts afterwards, through :func:`script`)."""
    monkeypatch.syspath_prepend(str(REPO / "analyses"))
    import common

    assert Path(common.__file__).resolve() == REPO / "analyses" / "common.py"
    fake = tmp_path / "assets"
    fake.mkdir()
    monkeypatch.setattr(common, "ASSETS", fake)
    before = files_in(REPO / "assets")
    yield fake
    assert files_in(REPO / "assets") == before, "a script wrote into the checkout's assets/"


@pytest.fixture
def script(assets, monkeypatch):
    """``script(name)``: ``analyses/{name}.py`` imported afresh, after :func:`assets` (a script that
    imports ``ASSETS`` binds the stand-in)."""
    return lambda name: analyses_script(monkeypatch, name)
