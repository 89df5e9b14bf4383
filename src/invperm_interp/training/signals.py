"""Stopping a training process without losing work: SIGINT (Ctrl-C), SIGTERM (how Slurm,
Kubernetes, systemd and ``kill`` stop or pre-empt a job), SIGHUP (a closed terminal or ssh session)
and SIGUSR2 (what submitit asks Slurm to send before a task's time limit) are handled alike.

The first signal only sets a flag: the training loop (``train`` and ``train_many``) finishes the
step it is in, writes a checkpoint and raises :class:`Interrupted`; resuming from that checkpoint
ends bit-identical to an uninterrupted run on the same machine. A second signal stops at once
(the checkpoint before is kept). ``invperm`` exits with ``128 + signal`` (130 for SIGINT, 143 for
SIGTERM, 129 for SIGHUP), as shells and schedulers expect. A scheduler's grace period (Slurm's
``KillWait``, 30 s by default) must cover one training step and one checkpoint.
"""

from __future__ import annotations

import signal
import threading

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM) + tuple(
    getattr(signal, name) for name in ("SIGHUP", "SIGUSR2") if hasattr(signal, name))


class Interrupted(KeyboardInterrupt):
    """Training stopped on a signal; ``signum`` is the signal, ``exit_code`` ``128 + signum``."""

    def __init__(self, message: str = "", signum: int = signal.SIGINT):
        super().__init__(message)
        self.signum = int(signum)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name


class StopRequest:
    """While entered (in the main thread), ``STOP_SIGNALS`` ask the loop to stop: ``requested``
    turns True and ``signum`` records the signal; a second signal raises :class:`Interrupted`.
    The previous handlers come back on exit."""

    def __enter__(self) -> StopRequest:
        self.requested, self.signum, self._old = False, None, {}
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise Interrupted(f"stopped at once by a second {signal.Signals(signum).name}", signum)
        self.requested, self.signum = True, signum

    def interrupted(self, message: str) -> Interrupted:
        """The exception that reports the stop this request saw."""
        return Interrupted(message, self.signum or signal.SIGINT)

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
