"""The engine's CPU cost of one action in instructions, counted by valgrind: the same
figure from run to run, whatever else the machine is doing.

    .venv/bin/python bench/instructions.py [--small 20] [--large 60] [--tree DIR ...]

Runs ``bench/hotpath.py`` (the engine alone, one thread, on PostgreSQL) under
``valgrind --tool=callgrind`` twice, with ``--small`` and ``--large`` trees, and prints
(instructions of the large run - instructions of the small run) / (actions between them):
start-up, imports and schema creation cancel out. CPU seconds on a shared 2-core machine
move by ±20% between runs; this moves by well under 1%, so two versions of the engine can
be compared one after the other (``--tree`` runs the script of another checkout, e.g. a
``git worktree`` of an older commit, with that checkout's code). Slow: valgrind runs
Python ~50 times slower, so each tree takes ~3 minutes at the defaults. PostgreSQL's own CPU is
not counted (another process): ``hotpath.py`` reports it.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import machine, say
from bench.figures import table
from bench.workload import ACTIONS_PER_TREE

ROOT = Path(__file__).resolve().parents[1]


def instructions(tree: Path, trees: int) -> int:
    """The instructions valgrind counted in one run of ``tree``'s hotpath.py."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "callgrind.out"
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            "bench/hotpath.py",
            "--trees",
            str(trees),
            "--warmup",
            "5",
        ]
        environment = {**os.environ, "PYTHONPATH": str(tree)}
        subprocess.run(command, cwd=tree, env=environment, check=True, capture_output=True)
        found = re.search(r"^summary:\s+(\d+)", out.read_text(), re.MULTILINE)
        if found is None:
            raise RuntimeError(f"no summary line in valgrind's output for {tree}")
        return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--small", type=int, default=20, help="trees in the first run (default 20)")
    parser.add_argument("--large", type=int, default=60, help="trees in the second run (default 60)")
    parser.add_argument(
        "--tree", action="append", type=Path, help="a checkout to measure (default: this one); repeatable"
    )
    options = parser.parse_args()
    if options.large <= options.small:
        parser.error("--large must be more than --small")
    rows = []
    for tree in options.tree or [ROOT]:
        say(f"{tree}: {options.small} trees, then {options.large}, under valgrind ...")
        small, large = instructions(tree, options.small), instructions(tree, options.large)
        actions = (options.large - options.small) * ACTIONS_PER_TREE
        rows.append(
            (str(tree), f"{(large - small) / actions / 1e6:.2f} M", f"{actions} actions between the runs")
        )
    table(f"Engine instructions per action, one thread ({machine()})", rows)


if __name__ == "__main__":
    main()
