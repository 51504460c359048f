"""The figures a benchmark prints: what SQLAlchemy sent in a window (from the counters the
workers write), percentiles, and the figure table.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar


class _Rated(Protocol):
    @property
    def ratio(self) -> float: ...


R = TypeVar("R", bound=_Rated)


@dataclass
class SqlCounts:
    """What SQLAlchemy sent in a window, from the workers' counters."""

    statements: Counter[str]
    commits: int
    rollbacks: int
    checkouts: int
    connects: int
    #: Group commit: batches committed, and the transitions in them.
    batches: int = 0
    batched: int = 0
    #: The garbage collector's runs, and their time in seconds.
    collections: int = 0
    gc_seconds: float = 0.0

    @classmethod
    def between(cls, before: Counter[str], after: Counter[str]) -> SqlCounts:
        delta = Counter({k: after[k] - before.get(k, 0) for k in after})
        statements = Counter(
            {k.split(":", 1)[1]: v for k, v in delta.items() if k.startswith("statement:") and v}
        )
        return cls(
            statements,
            delta["commit"],
            delta["rollback"],
            delta["checkout"],
            delta["connect"],
            delta["batches"],
            delta["batched"],
            delta["gc"],
            delta["gc_us"] / 1e6,
        )

    @property
    def total_statements(self) -> int:
        return sum(self.statements.values())

    def by_kind(self, per: float) -> str:
        return ", ".join(f"{kind} {count / per:.1f}" for kind, count in self.statements.most_common())

    @property
    def transactions(self) -> int:
        """Commits + rollbacks."""
        return self.commits + self.rollbacks


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100), linear between the closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median_round(rounds: Sequence[R]) -> R:
    """The round whose ratio is the median (the higher middle one of an even count): the
    one a script's table shows when it measured in rounds."""
    return sorted(rounds, key=lambda r: r.ratio)[len(rounds) // 2]


def table(title: str, rows: Sequence[tuple[str, ...]], header: tuple[str, ...] = (), values: int = 1) -> None:
    """Print a figure table: each row is the figure's name, ``values`` values (right-aligned)
    and an optional note."""
    lines = [header, *rows] if header else list(rows)
    widths = [max((len(row[i]) for row in lines if len(row) > i), default=0) for i in range(values + 1)]
    print(f"\n{title}")
    print("-" * min(len(title), 110))
    for row in lines:
        cells = [f"{row[0]:<{widths[0]}}"]
        cells += [f"{cell:>{widths[i]}}" for i, cell in enumerate(row[1 : values + 1], start=1)]
        cells += list(row[values + 1 :])
        print("  ".join(cells).rstrip())


def errors_row(errors: Sequence[str]) -> tuple[str, str, str]:
    """The table's row for the errors and warnings in the workers' log: how many, and the first."""
    return ("worker log errors/warnings", f"{len(errors)}", errors[0][:100] if errors else "")
