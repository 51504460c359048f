"""A SQLite database file deleted while its ``-wal`` and ``-shm`` files stay behind.

When the main file is absent its write-ahead log and shared-memory index belong to nothing:
SQLite would create a new, empty database beside them, and, if a process still has the
deleted file open (a studio or worker started on it), fail with "disk I/O error" on the
first write. ``clear`` removes them when no process uses them, and otherwise says which
files to delete once that process has stopped.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: The companion files of a database in WAL mode.
SUFFIXES = ("-wal", "-shm")
#: SQLite's "dead man switch" byte in the -shm file: every connection that has the index
#: open holds a shared lock on it (os_unix.c, UNIX_SHM_DMS = 120 + 8).
DMS_BYTE = 128


class LeftoversInUse(Exception):
    """The database file is gone, but another process still has its -wal and -shm open."""


def leftovers(path: Path) -> list[Path]:
    """The -wal and -shm files of a database file that does not exist ([] when it does)."""
    if path.exists():
        return []
    return [found for found in (Path(f"{path}{suffix}") for suffix in SUFFIXES) if found.exists()]


def clear(path: Path) -> list[Path]:
    """Remove the -wal and -shm that a deleted database file left behind; the files removed.

    Raises ``LeftoversInUse`` (naming them) when a process still has them open: removing
    them under it would not help, since it would delete the new database's log on close."""
    found = leftovers(path)
    if not found:
        return []
    shm = Path(f"{path}-shm")
    if shm in found and in_use(shm):
        names = " and ".join(str(f) for f in found)
        raise LeftoversInUse(
            f"the database file {path} was deleted, but a process still has it open (it uses "
            f"{names}): stop that process (a studio, worker or sweeper started on this "
            f"database), then delete {names} if they remain, and start again"
        )
    for leftover in found:
        leftover.unlink(missing_ok=True)
    return found


def in_use(shm: Path) -> bool:
    """Whether a process holds SQLite's lock on this -shm file (False where POSIX locks
    cannot be asked about)."""
    if sys.platform == "win32":
        return False
    import fcntl  # POSIX only: not at the top of a module Windows imports

    try:
        fd = os.open(shm, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, DMS_BYTE, os.SEEK_SET)
    except OSError:
        return True
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, DMS_BYTE, os.SEEK_SET)
        return False
    finally:
        os.close(fd)
