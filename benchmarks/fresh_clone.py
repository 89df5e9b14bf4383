"""The README's two commands, timed as a new user meets them: a fresh clone of this repository's
``HEAD``, then ``make setup`` (the set-up both commands start with), ``make test`` and ``make demo``,
each timed apart (wall seconds), with the machine's cores, CPU and load average before each step.
Writes ``assets/timings.{json,md}``, which the README quotes (tests/docs/test_results.py).

The set-up's time depends on the network and on what pip has cached (it downloads torch and the
other packages); the other two do not download anything.

    python benchmarks/fresh_clone.py [--keep]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("setup", "test", "demo")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def timed(step: str, cwd: Path) -> dict:
    """``make STEP`` in ``cwd``: its wall seconds and the load average before it; raises on failure."""
    load = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(["make", step], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        sys.stderr.write(done.stdout[-4000:])
        raise SystemExit(f"make {step} failed ({done.returncode}) in {cwd}")
    tail = [line for line in done.stdout.splitlines() if line.strip()][-1:]
    return {"step": f"make {step}", "wall_s": round(wall, 1), "load_before": round(load, 2),
            "last_line": tail[0] if tail else ""}


def write(record: dict, folder: Path) -> None:
    (folder / "timings.json").write_text(json.dumps(record, indent=1) + "\n")
    lines = ["# The two commands, timed from a fresh clone", "",
             f"A fresh clone of commit {record['commit']} on {record['date']}: {record['cores']} "
             f"cores ({record['cpu']}), Python {record['python']}. "
             "Produced by `python benchmarks/fresh_clone.py`. The set-up is what the first `make` "
             "of either command does (it downloads and installs the packages, so its time depends on "
             "the network); `make test` and "
             "`make demo` then run on the installed set-up.", "",
             "| step | wall | load average before | last line |", "| --- | --- | --- | --- |"]
    for t in record["steps"]:
        minutes, seconds = divmod(round(t["wall_s"]), 60)
        lines.append(f"| `{t['step']}` | {minutes} min {seconds:02d} s | {t['load_before']} | "
                     f"{t['last_line'].replace('|', '/')} |")
    (folder / "timings.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "assets")
    parser.add_argument("--keep", action="store_true", help="keep the clone (its path is printed)")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    tmp = Path(tempfile.mkdtemp(prefix="invperm-fresh-"))
    clone = tmp / "invperm-interp"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    record = {"commit": commit, "date": datetime.date.today().isoformat(), "cores": os.cpu_count(),
              "cpu": cpu_name(), "python": platform.python_version(),
              "steps": []}
    try:
        for step in STEPS:
            record["steps"].append(timed(step, clone))
            print(f"make {step}: {record['steps'][-1]['wall_s']} s", flush=True)
    finally:
        if args.keep:
            print(f"kept {clone}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    write(record, args.out)
    print(f"wrote {args.out / 'timings.json'} and {args.out / 'timings.md'}")


if __name__ == "__main__":
    main()
