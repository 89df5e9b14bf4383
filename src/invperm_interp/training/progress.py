"""Progress bars that suit where they are written.

A terminal (or a notebook) redraws a bar in place, so it can redraw often. A log file cannot: every
redraw is appended, and a sweep polling its workers five times a second wrote about 1.4 MB an hour
of one carriage-return "line" into ``nohup invperm sweep … > log`` or a Slurm job's output. Written
to anything but a terminal or a notebook kernel, a bar redraws at most once a minute (and when it
closes).
"""

from __future__ import annotations

import sys
from typing import IO

#: Seconds between a bar's redraws on a terminal or in a notebook, and written to a file or pipe.
INTERACTIVE_S = 0.5
LOG_S = 60.0


def interactive(stream: IO | None = None) -> bool:
    """Whether a bar written to ``stream`` (default ``sys.stderr``, tqdm's) redraws in place: a
    terminal, or any stream inside a notebook (a widget, or text a notebook redraws on ``\\r``)."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        return in_notebook() or bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (tqdm's own test, ``tqdm.autonotebook``)."""
    ipython = sys.modules.get("IPython")
    try:
        return ipython is not None and "IPKernelApp" in ipython.get_ipython().config
    except Exception:  # IPython imported but no shell running
        return False


def progress_bar(*args, file: IO | None = None, **kwargs):
    """``tqdm.auto.tqdm(*args, file=file, **kwargs)`` redrawing every ``INTERACTIVE_S`` seconds
    where it redraws in place and every ``LOG_S`` written to a file (``mininterval``, unless given)."""
    from tqdm.auto import tqdm

    every = INTERACTIVE_S if interactive(file) else LOG_S
    kwargs.setdefault("mininterval", every)
    kwargs.setdefault("maxinterval", max(every, 10.0))  # tqdm's monitor forces a redraw after this
    return tqdm(*args, file=file, **kwargs)
