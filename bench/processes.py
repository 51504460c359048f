"""The processes a benchmark measures: CPU time and peak memory read from ``/proc`` (of
any process, of every ``postgres`` and ``redis-server`` process), and the ``dramatiq``
worker processes, in a process group of their own.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import ROOT, say
from engine import db
from engine.cli import WORKER_THREADS, default_pool_size

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


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


def postgres_cpu(database: str, exclude: int | None = None) -> PostgresCpu:
    """The CPU seconds of PostgreSQL's processes, but the backend ``exclude`` (a benchmark's
    own observer connection: its queries are the benchmark's, not the engine's)."""
    total = database_cpu = 0.0
    # "postgres: [cluster: ]user database host(port) state" (Debian names the cluster).
    pattern = re.compile(rf"^postgres: (?:\S+: )?\S+ {re.escape(database)} ")
    for pid in named("postgres"):
        if pid == exclude:
            continue
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
    #: Redis (``redis://``) or RabbitMQ (``amqp://``): the workers get it as ``REDIS_URL`` or
    #: ``RABBITMQ_URL``, and neither variable of this process's environment.
    broker_url: str
    extra_env: dict[str, str] = field(default_factory=dict)
    counts_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="stepwise-bench-")))
    process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.counts_dir / "workers.log"

    def start(self, seconds: float = 60.0) -> Workers:
        variable = "RABBITMQ_URL" if self.broker_url.startswith("amqp") else "REDIS_URL"
        env = {
            **{k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "RABBITMQ_URL")},
            "DATABASE_URL": self.database_url,
            variable: self.broker_url,
            "PYTHONUNBUFFERED": "1",
            "STEPWISE_BENCH_COUNTS": str(self.counts_dir),
            # The connections of each process, as `stepwise worker` sets them.
            db.POOL_SIZE_VARIABLE: str(default_pool_size(self.processes, self.threads)),
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


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    """``--processes`` and ``--threads``: the worker processes measured (by default, those of
    the Procfile's ``stepwise worker --processes 2``)."""
    parser.add_argument("--processes", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument(
        "--threads",
        type=int,
        default=WORKER_THREADS,
        help=f"threads per worker process (default {WORKER_THREADS}, as stepwise worker)",
    )


def worker_env(args: argparse.Namespace) -> dict[str, str]:
    """The workers' environment for a script's ``--engine-log`` (the ``stepwise`` logger's level)."""
    return {"STEPWISE_BENCH_ENGINE_LOG": args.engine_log} if args.engine_log else {}
