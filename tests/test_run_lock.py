"""The run lock's lifetime (train/lock.py): the trainer holds its run folder's lock until the last checkpoint
and the run's end are written, so no second writer can start on a folder whose final state is still being
written; the lock is free once the run has ended."""

from __future__ import annotations

import os

import pytest

from workbench.core.errors import WorkbenchError
from workbench.models.embedded import EmbeddedPolicy, build_embedded
from workbench.train import TrainConfig, Trainer
from workbench.train.lock import RunLock
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
