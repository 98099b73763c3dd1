"""One writer per run folder: an exclusive `flock` on the run folder itself.

The trainer takes the lock before it reads or writes anything in the folder and keeps it until the run ends.
The kernel drops it when the holding process dies, kill -9 included, so a crashed run never leaves a stale
lock behind, and no lock file is written (reading a run never changes it). A second writer (`train --out D`
twice at once, `train --resume D` while D trains, the app's Start on a folder the command line trains) is
refused with one line naming the run and the holder's pid, read from /proc/locks.

    lock = RunLock.acquire("runs/demo")   # WorkbenchError when another process writes runs/demo
    ...
    lock.release()
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

from workbench.core.errors import WorkbenchError

TEMP_NAMES = (".*.tmp", "checkpoints/.*.tmp", "checkpoints/.*.old", "samples/.*.tmp")  # what a kill -9 interrupted:
# atomic writes' temporary files, and checkpoint folders being written or replaced (`train.checkpoints`)


class RunLock:
    """An exclusive lock on one run folder, held by this process until `release` (or its exit)."""

    def __init__(self, path: Path, fd: int):
        self.path, self._fd = path, fd

    @classmethod
    def acquire(cls, path: str | Path) -> RunLock:
        """Lock `path` (an existing folder) for writing; WorkbenchError naming the holder when another has it."""
        path = Path(path)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as err:
            raise WorkbenchError(f"cannot lock run folder {path}: {err.strerror or err}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = lock_holder(fd)
            os.close(fd)
            who = f"process {holder}" if holder else "another process"
            raise WorkbenchError(f"run {path} is being written by {who}; wait for it to end or stop it "
                                 f"(workbench train --stop {path}), then resume it") from None
        except OSError as err:
            os.close(fd)
            raise WorkbenchError(f"cannot lock run folder {path}: {err.strerror or err}") from None
        return cls(path, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Unlock (closing the descriptor drops the flock); a second call does nothing."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self):
        self.release()


def lock_run_folder(store, fresh: bool) -> RunLock:
    """Lock a `RunStore`'s folder for a trainer, before anything in it is read or written: a fresh run's folder
    is created and checked empty under the lock; the temporary files and STOP request a killed writer left go."""
    if fresh:
        store.check_fresh()
        try:
            store.path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise WorkbenchError(f"cannot create run folder {store.path}: {err.strerror or err}") from None
    lock = RunLock.acquire(store.path)
    try:
        if fresh:
            store.check_fresh()
        remove_stale_temps(store.path)
        store.clear_stop()  # a request left from before this writer; a folder named STOP is refused
    except BaseException:
        lock.release()
        raise
    return lock


def lock_holder(fd: int, locks: str | Path = "/proc/locks") -> int | None:
    """The pid holding a flock on the file behind `fd` (from the kernel's table `locks`; a test gives a copy), None
    where it cannot be told: no table, no holder listed, or a pid that is not a number (a remote lock's is negative)."""
    stat = os.fstat(fd)
    key = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    try:
        lines = Path(locks).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if "FLOCK" in parts and key in parts and "->" not in parts:
            pid = parts[parts.index(key) - 1]
            return int(pid) if pid.isdigit() else None
    return None


def remove_stale_temps(path: Path) -> None:
    """Delete the temporary files of atomic writes a killed writer left (only the lock holder may)."""
    for pattern in TEMP_NAMES:
        for temp in path.glob(pattern):
            if temp.is_file():
                temp.unlink(missing_ok=True)
            elif temp.is_dir() and not temp.is_symlink():
                shutil.rmtree(temp, ignore_errors=True)
