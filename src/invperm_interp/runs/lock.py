"""One writer per run directory: ``RunLock``, an ``flock`` on the directory's lock file, held for the
life of the training process, with the holder's pid, host, start time and command inside.

It refuses a second writer, ``train --resume`` of a run that is still training included; the
kernel drops the lock when its process dies, so a lock file left by a killed process is reported
as stale and taken over. ``train`` and ``train_many`` (one lock per run) take it; so should any
other trainer that writes a run directory.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
import warnings
from pathlib import Path

from .directory import RunDir, RunWarning

__all__ = ["RunLock", "RunLocked"]


class RunLocked(ValueError):
    """Another live process holds the run directory's lock."""


def _holder(fd: int) -> dict:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = json.loads(os.read(fd, 65536) or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _who(holder: dict) -> str:
    return (f"process {holder.get('pid', '?')} on {holder.get('host', '?')} (since "
            f"{holder.get('started', '?')}: {holder.get('command', '?')})")


class RunLock:
    """Exclusive ownership of ``run_dir`` for the life of a training process (see the module
    docstring); a context manager, or :meth:`acquire` / :meth:`release`. ``run_dir`` must exist.

    :meth:`acquire` raises :class:`RunLocked` naming the holder while another process holds it,
    and warns (:class:`RunWarning`) when it takes over a lock file whose process has died.
    ``flock`` works between processes of one machine and on most network file systems that
    support locks; the file's contents are only what the messages report.
    """

    def __init__(self, run_dir: str | Path | RunDir):
        self.dir = RunDir(run_dir).path
        self.path = RunDir(run_dir).lock_file
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise RunLocked(f"{self.dir} is being written by {_who(holder)}; wait for it to end "
                                "or stop it (two writers would interleave its metrics and "
                                "checkpoints)") from None
            except BaseException:
                os.close(fd)
                raise
            try:  # the holder may have released and removed the file between our open and flock
                if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        stale = _holder(fd)
        if stale:
            warnings.warn(f"{self.dir}: took over the lock of {_who(stale)}, which ended without "
                          "releasing it (killed?); its last checkpoint is where this run goes on",
                          RunWarning, stacklevel=2)
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv)[:300]}
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps(me).encode())
        self._fd = fd
        return self

    def release(self) -> None:
        """Remove the lock file, then drop the lock (waiting openers notice the removal)."""
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
