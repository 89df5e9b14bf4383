"""Progress bars redraw in place on a terminal and rarely in a log file (``training.progress``)."""

from __future__ import annotations

import io
import sys
from types import SimpleNamespace

from invperm_interp.sweep import engine
from invperm_interp.training import progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_is_interactive_and_a_file_or_pipe_is_not(tmp_path):
    assert progress.interactive(Terminal())
    assert not progress.interactive(io.StringIO())
    with open(tmp_path / "log", "w") as log:
        assert not progress.interactive(log)
    closed = io.StringIO()
    closed.close()
    assert not progress.interactive(closed)


def test_any_stream_of_a_notebook_kernel_is_interactive(monkeypatch):
    # a notebook redraws text on "\r" (and tqdm.auto draws a widget there): no minute-long waits
    for config, expected in (({"IPKernelApp": {}}, True), ({"TerminalIPythonApp": {}}, False)):
        shell = SimpleNamespace(config=config)
        monkeypatch.setitem(sys.modules, "IPython", SimpleNamespace(get_ipython=lambda s=shell: s))
        assert progress.interactive(io.StringIO()) is expected
    monkeypatch.setitem(sys.modules, "IPython", SimpleNamespace(get_ipython=lambda: None))
    assert not progress.interactive(io.StringIO())  # IPython imported, no shell running


def test_a_bar_redraws_often_on_a_terminal_and_once_a_minute_in_a_file():
    for stream, every in ((Terminal(), progress.INTERACTIVE_S), (io.StringIO(), progress.LOG_S)):
        with progress.progress_bar(total=3, file=stream) as bar:
            assert (bar.mininterval, bar.maxinterval) == (every, max(every, 10.0))
    with progress.progress_bar(total=3, file=io.StringIO(), mininterval=2.0) as bar:
        assert bar.mininterval == 2.0  # what the caller asks for stands


class Runner:
    """A sweep's runner whose one run is still going for ``polls`` polls."""

    def __init__(self, polls: int):
        self.polls = polls

    def running(self) -> bool:
        self.polls -= 1
        return self.polls > 0

    def states(self) -> dict:
        return {"workers": 2}


def test_a_sweep_written_to_a_log_file_does_not_redraw_at_every_poll(tmp_path, monkeypatch, capsys):
    # before: the sweep redrew its bar at every poll (5 a second), 1.4 MB an hour of one "line"
    monkeypatch.setattr(engine, "POLL_S", 0.05)
    stop = SimpleNamespace(signum=None)
    grid = SimpleNamespace(analysis=None)
    engine._watch(grid, tmp_path, ["run_seed0"], Runner(polls=20), stop, progress=True)
    draws = capsys.readouterr().out.count("\r")
    assert draws <= 3, f"{draws} redraws over 20 polls of a sweep written to a file"
