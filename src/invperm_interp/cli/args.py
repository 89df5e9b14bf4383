"""What the ``invperm`` subcommands share: argument types (every ``--seed``, ``--threads`` and
``--max-memory`` is read by one of them), help texts and the help formatter."""

from __future__ import annotations

import argparse

MAX_MEMORY_HELP = "memory limit for the size check, e.g. 8G (default: what the machine has left)"
THREADS_HELP = ("torch threads (default: 1 on the CPU, the fastest on shared cores; run models side "
                "by side instead; torch's own choice on a GPU)")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows each option's default, except where there is none to show (``None``, a flag's
    ``False``: the help says what happens then), and keeps the examples' line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False or "default" in (action.help or ""):
            return action.help or ""
        return super()._get_help_string(action)


def describe(about: str) -> str:
    """A subcommand's description from its one-line help: a sentence, wrapped."""
    import textwrap

    return textwrap.fill(about[0].upper() + about[1:] + ".", 96)


def examples(*lines: str) -> str:
    """A subcommand's epilog: ``examples:`` and one command per line."""
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def add_command(sub, name: str, about: str, *example: str) -> argparse.ArgumentParser:
    """A subcommand of ``sub`` with its one-line help, a description from it, shown defaults and
    an ``examples:`` epilog."""
    return sub.add_parser(name, help=about, description=describe(about),
                          formatter_class=HelpFormatter, epilog=examples(*example))


def size(text: str) -> int:
    """``--max-memory``: ``8G``, ``500M``, ``2e9`` → bytes (argparse reports a bad one)."""
    from ..memory import parse_size

    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _checked(text: str, check, field: str) -> int:
    """``text`` as an integer that passes ``check(field, value)`` (an ``errors`` check), else
    argparse's error with the check's message."""
    try:
        value = int(text)
    except ValueError:
        value = text
    try:
        check(field, value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return value


def seed(text: str) -> int:
    """``--seed``: an integer in [0, 2^62), the bound of a run's and a grid's seeds."""
    from ..errors import check_seed

    return _checked(text, check_seed, "seed")


def threads(text: str) -> int:
    """``--threads``: an integer in [1, ``errors.MAX_THREADS``], the bound of a run's and a grid's."""
    from ..errors import check_threads

    return _checked(text, check_threads, "threads")
