"""What the benchmark scripts share: a fresh PostgreSQL database and an empty Redis database
per run, ``dramatiq`` worker processes, CPU time and peak memory read from ``/proc``, the
SQL counters the workers write, percentiles and the figure table.

Services come from the environment: ``STEPWISE_BENCH_POSTGRES`` (an administrative URL,
default ``STEPWISE_TEST_POSTGRES`` or ``postgresql://127.0.0.1:5432/postgres``) and
``STEPWISE_BENCH_REDIS`` (default ``redis://127.0.0.1:6379/15``: that database, or the next
lower one that no other run holds).
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import redis

ROOT = Path(__file__).resolve().parents[1]
POSTGRES_ADMIN_URL = os.environ.get(
    "STEPWISE_BENCH_POSTGRES",
    os.environ.get("STEPWISE_TEST_POSTGRES", "postgresql://127.0.0.1:5432/postgres"),
)
REDIS_URL = os.environ.get("STEPWISE_BENCH_REDIS", "redis://127.0.0.1:6379/15")
#: The key the integration tests use to hold a Redis database for one run: honoured here
#: too, so a benchmark and a test run never share a queue.
REDIS_CLAIM = "stepwise:integration-run"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def machine() -> str:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    return (
        f"{os.cpu_count()} CPUs ({cpu or platform.processor()}), Python {platform.python_version()}, "
        f"load average {' '.join(load)}"
    )


# --- PostgreSQL -----------------------------------------------------------------------


def url_of(name: str) -> str:
    return f"{POSTGRES_ADMIN_URL.rsplit('/', 1)[0]}/{name}"


@contextmanager
def fresh_database(prefix: str, keep: bool = False) -> Iterator[str]:
    """A new, empty PostgreSQL database for this run (dropped at the end unless ``keep``)."""
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    say(f"database {name}")
    try:
        yield url_of(name)
    finally:
        if keep:
            say(f'kept database {name}: DROP DATABASE "{name}" WITH (FORCE) when done')
        else:
            with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def create_schema(url: str) -> None:
    """The engine's tables and the workload's, from a short-lived connection."""
    import engine
    from bench.workload import BenchBase

    sa_engine = engine.configure(url, pool_size=5)
    engine.create_all(sa_engine)
    BenchBase.metadata.create_all(sa_engine)


def database_name(url: str) -> str:
    return url.rsplit("/", 1)[1].split("?", 1)[0]


def server_counters(url: str) -> dict[str, int]:
    """This database's transaction and row counters as PostgreSQL reports them. A backend
    publishes its counters when it exits, or within about ten seconds when idle."""
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT xact_commit, xact_rollback, tup_inserted, tup_updated, tup_deleted, tup_fetched "
            "FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    keys = ("xact_commit", "xact_rollback", "tup_inserted", "tup_updated", "tup_deleted", "tup_fetched")
    return {key: int(value) for key, value in zip(keys, row, strict=True)}


def wait_for_backends_to_exit(url: str, seconds: float = 10.0) -> None:
    """Until no other session is connected to the database: every counter is published."""
    deadline = time.monotonic() + seconds
    with psycopg.connect(url, autocommit=True) as connection:
        while time.monotonic() < deadline:
            row = connection.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
            if row is not None and row[0] == 0:
                break
            time.sleep(0.05)
    time.sleep(0.1)


# --- Redis ----------------------------------------------------------------------------


@contextmanager
def claimed_redis() -> Iterator[str]:
    """An empty Redis database held for this run (the integration tests' claim key), flushed
    at the end."""
    base, _, first = REDIS_URL.rpartition("/")
    if not first.isdigit():
        base, first = REDIS_URL.rstrip("/"), "15"
    owner = f"bench-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    for number in range(int(first), -1, -1):
        url = f"{base}/{number}"
        client = redis.Redis.from_url(url, socket_connect_timeout=2)
        if client.set(REDIS_CLAIM, owner, nx=True, ex=3 * 3600):
            break
        client.close()
    else:
        raise SystemExit(f"every Redis database from {REDIS_URL} down to 0 is held by another run")
    for key in client.scan_iter(count=1000):
        if key != REDIS_CLAIM.encode():
            client.delete(key)
    say(f"redis {url}")
    try:
        yield url
    finally:
        client.flushdb()
        client.close()


def use_redis_broker(url: str) -> Any:
    """This process sends the engine's messages (and the raw baseline's) to Redis."""
    from dramatiq.brokers.redis import RedisBroker

    from engine import broker

    return broker.use(RedisBroker(url=url))


# --- /proc ----------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces: split after the last one.
    opening, closing = text.index("("), text.rindex(")")
    return [text[:opening].strip(), text[opening + 1 : closing], *text[closing + 2 :].split()]


def cpu_seconds(pid: int, children: bool = True) -> float:
    """User + system CPU of a process, plus that of its children it has reaped."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    # fields[0] pid, [1] comm, [2] state, [3] ppid … [13] utime, [14] stime, [15] cutime, [16] cstime
    ticks = int(fields[13]) + int(fields[14])
    if children:
        ticks += int(fields[15]) + int(fields[16])
    return ticks / CLOCK_TICKS


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    parents: dict[int, list[int]] = {}
    for other in all_pids():
        fields = _stat_fields(other)
        if fields is not None:
            parents.setdefault(int(fields[3]), []).append(other)
    found, frontier = [pid], [pid]
    while frontier:
        frontier = [child for parent in frontier for child in parents.get(parent, [])]
        found.extend(frontier)
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU of a process and all its descendants (each also counting children it reaped)."""
    return sum(cpu_seconds(p) for p in descendants(pid))


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def named(name: str) -> list[int]:
    pids = []
    for pid in all_pids():
        fields = _stat_fields(pid)
        if fields is not None and fields[1] == name:
            pids.append(pid)
    return pids


@dataclass
class PostgresCpu:
    """CPU seconds of every ``postgres`` process on this machine (the postmaster's reaped
    children included: backends that exited), and of the backends of one database."""

    total: float
    database: float

    def __sub__(self, other: PostgresCpu) -> PostgresCpu:
        return PostgresCpu(self.total - other.total, self.database - other.database)


def postgres_cpu(database: str) -> PostgresCpu:
    total = database_cpu = 0.0
    # "postgres: [cluster: ]user database host(port) state" (Debian names the cluster).
    pattern = re.compile(rf"^postgres: (?:\S+: )?\S+ {re.escape(database)} ")
    for pid in named("postgres"):
        seconds = cpu_seconds(pid)
        total += seconds
        if pattern.match(command_line(pid)):
            database_cpu += cpu_seconds(pid, children=False)
    return PostgresCpu(total, database_cpu)


def redis_cpu() -> float:
    return sum(cpu_seconds(pid) for pid in named("redis-server"))


def memory_kb(pid: int, key: str = "VmHWM") -> int:
    """``VmHWM`` (peak resident set) or ``VmRSS`` of a process, in kB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


# --- worker processes -----------------------------------------------------------------


@dataclass
class Workers:
    """``dramatiq engine.jobs bench.workload -p N -t T``, in a process group of its own."""

    processes: int
    threads: int
    database_url: str
    redis_url: str
    extra_env: dict[str, str] = field(default_factory=dict)
    counts_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="stepwise-bench-")))
    process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.counts_dir / "workers.log"

    def start(self, seconds: float = 60.0) -> Workers:
        env = {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            "PYTHONUNBUFFERED": "1",
            "STEPWISE_BENCH_COUNTS": str(self.counts_dir),
            "STEPWISE_BENCH_POOL": str(self.threads + 2),
            **self.extra_env,
        }
        command = [
            sys.executable,
            "-m",
            "dramatiq",
            "engine.jobs",
            "bench.workload",
            "--processes",
            str(self.processes),
            "--threads",
            str(self.threads),
            "--worker-shutdown-timeout",
            "10000",
        ]
        with self.log.open("wb") as output:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"the workers exited with {self.process.returncode}:\n{self.tail()}")
            ready = self.log.read_text(errors="replace").count("Worker process is ready for action.")
            if ready >= self.processes:
                say(f"workers: {self.processes} processes x {self.threads} threads (log {self.log})")
                return self
            time.sleep(0.1)
        self.stop()
        raise SystemExit(f"the workers were not ready after {seconds:.0f} s:\n{self.tail()}")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def worker_pids(self) -> list[int]:
        """The worker processes (the children of Dramatiq's main process that run jobs)."""
        return [p for p in descendants(self.pid)[1:] if "dramatiq" in command_line(p)]

    def cpu_seconds(self) -> float:
        return tree_cpu_seconds(self.pid)

    def peak_rss_kb(self) -> int:
        """The highest peak resident set (VmHWM) of one worker process."""
        return max((memory_kb(p) for p in self.worker_pids()), default=0)

    def pause(self) -> None:
        """SIGSTOP every worker process: messages queue up while the run is being set up."""
        os.killpg(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.pid, signal.SIGCONT)

    def counts(self) -> Counter[str]:
        """The SQL counters every worker process wrote (bench/workload.py), summed."""
        total: Counter[str] = Counter()
        for path in self.counts_dir.glob("*.json"):
            try:
                total.update(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        return total

    def settled_counts(self, seconds: float = 5.0) -> Counter[str]:
        """The counters once the files stop changing (they are rewritten every 0.2 s)."""
        previous = self.counts()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.5)
            current = self.counts()
            if current == previous:
                return current
            previous = current
        return previous

    def errors(self) -> list[str]:
        lines = self.log.read_text(errors="replace").splitlines()
        return [line for line in lines if " ERROR " in line or "Traceback" in line or " WARNING " in line]

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM (Dramatiq finishes the messages in hand), then SIGKILL to the group."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGCONT)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@contextmanager
def running(workers: Workers) -> Iterator[Workers]:
    workers.start()
    try:
        yield workers
    finally:
        workers.stop()


# --- SQL counts -----------------------------------------------------------------------


@dataclass
class SqlCounts:
    """What SQLAlchemy sent in a window, from the workers' counters."""

    statements: Counter[str]
    commits: int
    rollbacks: int
    checkouts: int
    connects: int

    @classmethod
    def between(cls, before: Counter[str], after: Counter[str]) -> SqlCounts:
        delta = Counter({k: after[k] - before.get(k, 0) for k in after})
        statements = Counter(
            {k.split(":", 1)[1]: v for k, v in delta.items() if k.startswith("statement:") and v}
        )
        return cls(statements, delta["commit"], delta["rollback"], delta["checkout"], delta["connect"])

    @property
    def total_statements(self) -> int:
        return sum(self.statements.values())

    def by_kind(self, per: float) -> str:
        return ", ".join(f"{kind} {count / per:.1f}" for kind, count in self.statements.most_common())


# --- figures --------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100), linear between the closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


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
