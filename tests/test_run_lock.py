"""The run lock's lifetime (train/lock.py): the trainer holds its run folder's lock until the last checkpoint
and the run's end are written, so no second writer can start on a folder whose final state is still being
written; the lock is free once the run has ended."""

from __future__ import annotations

import os

import pytest

from workbench.core.errors import WorkbenchError
from workbench.models.embedded import EmbeddedPolicy, build_embedded
from workbench.train import TrainConfig, Trainer
from workbench.train.lock import RunLock, lock_holder
from workbench.train.store import RunStore


def fresh_policy() -> EmbeddedPolicy:
    model = build_embedded(seed=0)
    model.text_encoder.eval().requires_grad_(False)
    return EmbeddedPolicy(model)


class LockProbe:
    """A subscriber after the store: on each checkpoint and at the end, whether another writer could take the
    folder's lock (another open file description conflicts with the trainer's flock even in this process) and
    what the store has written by then."""

    def __init__(self, folder):
        self.folder, self.seen = folder, []

    def __call__(self, event) -> None:
        if event.kind not in ("checkpoint", "finished", "stopped"):
            return
        try:
            RunLock.acquire(self.folder).release()
            held = False
        except WorkbenchError as err:
            assert f"process {os.getpid()}" in str(err)
            held = True
        newest = RunStore(self.folder).latest_checkpoint()
        self.seen.append((event.kind, event.iteration, held, newest and newest.iteration))


@pytest.mark.parametrize("stop_at", [None, 1])
def test_the_lock_is_held_until_the_final_checkpoint_is_written(tmp_path, stop_at):
    config = TrainConfig(iterations=2, group=2, steps=2, chunks="1,1", eval_prompts=0, prompts_per_iteration=1,
                         report_to="none", sample_every=100, checkpoint_every=100)  # a checkpoint only at the end
    folder = tmp_path / "run"
    probe = LockProbe(folder)
    trainer = Trainer(config, folder, fresh_policy(), subscribers=[probe])

    def stop(event):
        if stop_at is not None and event.kind == "iteration" and event.iteration == stop_at:
            trainer.request_stop()
    trainer.run(callback=stop)
    last = stop_at or 2
    end = "stopped" if stop_at else "finished"
    # the final checkpoint is complete on disk while the lock is still held, and so is the end of the run
    assert probe.seen == [("checkpoint", last, True, last), (end, last, True, last)]
    RunLock.acquire(folder).release()  # free once the run has ended


def test_the_holder_is_the_flock_on_the_same_file_not_a_posix_lock_or_a_waiter(tmp_path):
    """/proc/locks by hand: one line per lock (id, kind, mode, access, pid, device:inode, range); a request blocked
    on a lock is listed after "->" (the kernel lists it under the lock; the second table puts it first)."""
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        stat = os.fstat(fd)
        key = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
        table = tmp_path / "locks"
        table.write_text(f"1: POSIX  ADVISORY  WRITE 300 {key} 0 EOF\n"  # a byte-range lock on the same folder
                         f"2: FLOCK  ADVISORY  WRITE 400 00:01:{stat.st_ino + 1} 0 EOF\n"  # a flock on another file
                         f"3: FLOCK  ADVISORY  READ 500 {key} 0 EOF\n"
                         f"3: -> FLOCK  ADVISORY  WRITE 600 {key} 0 EOF\n")
        assert lock_holder(fd, table) == 500
        table.write_text(f"1: -> FLOCK  ADVISORY  WRITE 600 {key} 0 EOF\n"  # a waiter is no holder, wherever listed
                         f"2: FLOCK  ADVISORY  WRITE 500 {key} 0 EOF\n")
        assert lock_holder(fd, table) == 500
        table.write_text(f"1: FLOCK  ADVISORY  WRITE -1 {key} 0 EOF\n")  # a remote lock: no local pid
        assert lock_holder(fd, table) is None
        table.write_text(f"1: FLOCK  ADVISORY  WRITE 400 00:01:{stat.st_ino + 1} 0 EOF\n")
        assert lock_holder(fd, table) is None  # no holder listed
        assert lock_holder(fd, tmp_path / "no-such-table") is None
    finally:
        os.close(fd)
