"""Given the SQLite file deleted while its -wal and -shm stay behind, the next ``stepwise``
command (``serve``, ``db upgrade``) does not fail with "disk I/O error":

- when no process uses them any more, they belong to nothing: they are removed (with a note)
  and a new database is made;
- when a process still has the deleted file open, the command refuses, naming the files to
  delete once that process has stopped, and removes nothing.

Not a spec case: Stepped runs on Rails' database (issue 12, the studio operator's day:
``stepwise serve`` on a laptop).
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("PRAGMA journal_mode=WAL")
db.execute("CREATE TABLE kept (x)")
db.execute("INSERT INTO kept VALUES (1)")
db.commit()
print("ready", flush=True)
sys.stdin.readline()
"""


def stepwise(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("DATABASE_URL", "REDIS_URL", "RABBITMQ_URL"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def database(tmp_path: Path) -> Path:
    return tmp_path / "stepwise.db"


@pytest.fixture
def holder(database: Path) -> Iterator[subprocess.Popen[str]]:
    """A process with the database open in WAL mode (a studio left running)."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(database)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    yield process
    if process.poll() is None:
        process.kill()
        process.wait()


def leftovers(database: Path) -> list[str]:
    return sorted(p.name for p in database.parent.iterdir() if p.name.startswith(f"{database.name}-"))


def test_leftovers_no_process_uses_are_removed_and_a_new_database_is_made(
    database: Path, holder: subprocess.Popen[str]
) -> None:
    # Given the file deleted, then the process that had it open killed
    database.unlink()
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert leftovers(database) == ["stepwise.db-shm", "stepwise.db-wal"]

    answer = stepwise("db", "upgrade", "--database-url", f"sqlite:///{database}")

    assert answer.returncode == 0, answer.stderr
    assert "removed what its deleted file left behind (stepwise.db-wal, stepwise.db-shm)" in answer.stderr
    tables = {row[0] for row in sqlite3.connect(database).execute("SELECT name FROM sqlite_master")}
    assert "stepwise_actions" in tables and "kept" not in tables


def test_leftovers_a_running_process_uses_are_named_and_kept(
    database: Path, holder: subprocess.Popen[str], unused_port: int
) -> None:
    # Given the file deleted while a process still has it open
    database.unlink()

    answer = stepwise("serve", "--port", str(unused_port), "--database-url", f"sqlite:///{database}")

    # Then serve refuses, saying what to stop and what to delete, and removes nothing
    assert answer.returncode == 1
    message = " ".join(answer.stderr.split())
    assert "disk I/O error" not in message
    assert f"the database file {database} was deleted, but a process still has it open" in message
    assert f"then delete {database}-wal and {database}-shm if they remain" in message
    assert leftovers(database) == ["stepwise.db-shm", "stepwise.db-wal"]
    assert not database.exists()

    # And once that process has stopped, the next start makes a new database
    assert holder.stdin is not None
    holder.stdin.write("\n")
    holder.stdin.flush()
    holder.wait()
    assert stepwise("db", "upgrade", "--database-url", f"sqlite:///{database}").returncode == 0
    assert database.exists()


@pytest.fixture
def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port
