"""The run store's small rules checked one by one: which process counts as alive, checkpoint keeping and
order, the newest-first run list (docs/methods.md has no formula here; these are the store's contracts)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.train.store import (
    DAMAGED_METRICS,
    METRICS,
    RunStore,
    list_runs,
    load_checkpoint,
    process_alive,
    process_start,
)

SMALL = dict(group=2, steps=3, chunks="1,2", prompts_per_iteration=2, eval_prompts=1, iterations=1)  # a trainer


@pytest.mark.parametrize("pid", [None, "1", 1.0, True, 0, -5, 2**31, 2**40])
def test_a_pid_that_cannot_be_a_process_is_not_alive(pid):
    assert process_alive(pid) is False


def test_process_start_is_the_kernels_start_time():
    """/proc/<pid>/stat field 22 in clock ticks since boot: a process started now started about uptime ago."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        uptime = float(open("/proc/uptime").read().split()[0])
        started = process_start(child.pid) / os.sysconf("SC_CLK_TCK")  # seconds since boot
        assert uptime - 30 < started <= uptime + 1
    finally:
        child.kill()
        child.wait()


def test_asking_whether_a_process_is_alive_sends_it_no_signal():
    # the child dies of a hang-up (a launcher may have left SIGHUP ignored): only signal 0 leaves it running
    code = "import signal, time; signal.signal(signal.SIGHUP, signal.SIG_DFL); print(flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        child.stdout.readline()  # its handler is set
        assert process_alive(child.pid)
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=0.5)  # still running
    finally:
        child.kill()
        child.wait()
    assert process_alive(1)  # pid 1, the lowest a process can have, exists (owned by root: PermissionError says so)


def test_alive_means_this_process_and_not_a_reused_pid():
    me = os.getpid()
    assert process_alive(me) and process_alive(me, process_start(me))
    assert not process_alive(me, process_start(me) + 1)  # same pid, another start time: a reused pid
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert not process_alive(gone.pid)


def test_checkpoints_keep_the_newest_and_the_pointer_leads(tmp_path):
    store = RunStore.create(tmp_path, "run")
    weights, state = {"w": torch.ones(2)}, {"step": 1}
    for it in (1, 2, 3):
        store.save_checkpoint(it, weights, state, keep=2)
    names = [p.name for p in store.checkpoints()]
    assert names == ["iter_0003", "iter_0002"]  # keep 2: the oldest went
    store.save_checkpoint(4, weights, state, keep=1)
    assert [p.name for p in store.checkpoints()] == ["iter_0004"]
    assert not list((tmp_path / "run" / "checkpoints").glob(".*tmp"))
    store.save_checkpoint(5, weights, state, keep=3)
    (tmp_path / "run" / "checkpoints" / "latest.json").write_text('{"iteration": 4, "dir": "iter_0004"}')
    assert [p.name for p in store.checkpoints()] == ["iter_0004", "iter_0005"]  # the pointer's first
    assert store.latest_checkpoint().iteration == 4


def test_runs_are_listed_newest_first(tmp_path):
    for name, started in (("a", 10.0), ("b", 30.0), ("c", 20.0), ("d", "not a time"), ("e", True), ("f", 5)):
        store = RunStore.create(tmp_path, name)
        store.write_config({})
        store.write_status("finished", 1, started=started)
    names = [info.name for info in list_runs(tmp_path)]
    assert names[:4] == ["b", "c", "a", "f"] and set(names[4:]) == {"d", "e"}  # no time (a bool is none) is 0


def test_a_new_status_keeps_the_start_time(tmp_path):
    store = RunStore.create(tmp_path, "run")
    store.write_status("running", 0, started=123.0)
    store.write_status("finished", 3)
    assert store.status()["started"] == 123.0 and store.status()["iteration"] == 3


def test_truncating_keeps_the_rows_and_puts_only_the_damaged_lines_aside(tmp_path):
    store = RunStore.create(tmp_path, "run")
    for it in (1, 2):
        store.append_metrics({"iteration": it, "loss": 0.5})
    kept = (store.path / METRICS).read_bytes()
    with open(store.path / METRICS, "ab") as f:
        f.write(b"\x00\xff\n")  # damaged bytes
    store.append_metrics({"iteration": 3, "loss": 0.5})
    with open(store.path / METRICS, "ab") as f:
        f.write(b'{"iteration": 4, "lo')  # a crash's torn tail
    store.append_metrics({"iteration": 4, "loss": 0.25})  # closes the torn line first, never glued to it
    store.truncate_metrics(2)
    assert [r["iteration"] for r in store.metrics()] == [1, 2]
    assert (store.path / METRICS).read_bytes() == kept  # the rows kept are the bytes appended, compact JSON
    assert (store.path / DAMAGED_METRICS).read_bytes() == b'\x00\xff\n{"iteration": 4, "lo\n'


def test_truncating_a_run_without_metrics_writes_an_empty_file_and_nothing_aside(tmp_path):
    store = RunStore.create(tmp_path, "run")  # a run stopped before its first row
    store.truncate_metrics(0)
    assert (store.path / METRICS).read_bytes() == b"" and not (store.path / DAMAGED_METRICS).exists()


def test_truncating_the_metrics_of_a_training_run_whose_folder_was_removed_does_not_make_it_again(tmp_path):
    import shutil

    store = RunStore.create(tmp_path, "run")
    store.append_metrics({"iteration": 1, "loss": 0.5})
    store.training = True  # the trainer's first event: from then on no write makes the folder
    shutil.rmtree(store.path)
    with pytest.raises(WorkbenchError, match=f"^cannot write {store.path / METRICS}: No such file or directory"):
        store.truncate_metrics(0)
    assert not store.path.exists()


def test_a_checkpoint_at_iteration_0_loads_and_a_negative_one_does_not(tmp_path):
    store = RunStore.create(tmp_path, "run")
    folder = store.save_checkpoint(0, {"w": torch.ones(2)}, {"step": 0})
    assert load_checkpoint(folder).iteration == 0
    (folder / "state.json").write_text('{"iteration": -1}')
    with pytest.raises(WorkbenchError, match="state.json cannot be read"):
        load_checkpoint(folder)


class Stranger:
    """A class torch.load(weights_only=True) does not allow: loading it could run any code a pickle names."""


def test_an_optimizer_state_holding_other_objects_is_refused(tmp_path):
    store = RunStore.create(tmp_path, "run")
    folder = store.save_checkpoint(1, {"w": torch.ones(2)}, {"state": Stranger()})
    with pytest.raises(WorkbenchError, match="optimizer.pt cannot be read"):
        load_checkpoint(folder)


def test_a_trainer_without_a_run_folder_takes_no_lock(random_policy):
    from workbench.train import TrainConfig, Trainer

    config = TrainConfig(**SMALL)
    trainer = Trainer(config, None, random_policy)
    try:
        assert trainer.store is None and trainer._lock is None
    finally:
        trainer.release()
    with pytest.raises(WorkbenchError, match=r"^the run has no complete checkpoint to resume from; start a fresh "
                                             r"run with a new --out \(its metrics stay where they are\)$"):
        Trainer(config, None, random_policy, resume=True)  # nothing to resume without a run folder


def test_a_checkpoint_that_lost_its_optimizer_state_still_samples_and_says_so(tmp_path):
    store = RunStore(tmp_path)
    store.save_checkpoint(1, {"w": torch.ones(2)}, {"state": {}, "param_groups": []})
    folder = store.checkpoints()[0]
    (folder / "optimizer.pt").unlink()
    checkpoint, problem = store.newest_checkpoint()
    assert checkpoint is None and "optimizer.pt" in problem  # a resume needs it
    assert problem.endswith("; its weights still sample (the app's picker, --model with the run), but a resume "
                            "needs all")
    (folder / "weights.safetensors").unlink()
    problem = store.newest_checkpoint()[1]
    assert "weights.safetensors" in problem and "still sample" not in problem


def test_a_resume_without_a_complete_checkpoint_names_the_run_once_and_the_incomplete_ones(random_policy, tmp_path):
    from workbench.train import TrainConfig, Trainer

    store = RunStore.create(tmp_path, "run")
    folder = store.save_checkpoint(1, {"w": torch.ones(2)}, {"state": {}, "param_groups": []})
    (folder / "optimizer.pt").write_bytes(b"damaged")
    config = TrainConfig(**SMALL)
    with pytest.raises(WorkbenchError) as refused:
        Trainer(config, store, random_policy, resume=True)
    assert str(refused.value) == (
        f"{store.path} has no complete checkpoint to resume from (iter_0001 are incomplete: checkpoint "
        "checkpoints/iter_0001 is incomplete or corrupted: optimizer.pt cannot be read (File is not a zip file); its "
        "weights still sample (the app's picker, --model with the run), but a resume needs all); start a fresh run "
        "with a new --out (its metrics stay where they are)")


def test_a_resume_refuses_a_checkpoint_whose_weights_do_not_fit_by_name_or_by_shape(tmp_path):
    """A (1,) tensor would broadcast into any weight: a shape that differs is refused as a missing name is."""
    from workbench.models.embedded import EmbeddedPolicy, build_embedded
    from workbench.train import TrainConfig, Trainer

    policy = EmbeddedPolicy(build_embedded(seed=0))  # its own: the trainer readies the weights it would restore
    config = TrainConfig(**SMALL)
    weights = {n: p.detach().clone() for n, p in policy.transformer.named_parameters()}
    first = next(iter(weights))
    for name, damaged, why in [
        ("shape", {**weights, first: torch.zeros(1)},
         f"the checkpoint's {first} is (1,), the model's {tuple(weights[first].shape)}"),
        ("names", {k: w for k, w in weights.items() if k != first},
         "the checkpoint's weights do not match the model's trainable parameters"),
    ]:
        store = RunStore.create(tmp_path, name)
        folder = store.save_checkpoint(1, damaged, {"state": {}, "param_groups": []})
        with pytest.raises(WorkbenchError) as refused:
            Trainer(config, store, policy, resume=True)
        assert str(refused.value) == (f"checkpoint {folder} does not fit this model ({why}; was it made with another "
                                      "model or lora_rank?)")
    store = RunStore.create(tmp_path, "optimizer")  # the weights fit, the optimizer state holds no group
    folder = store.save_checkpoint(1, weights, {"state": {}, "param_groups": []})
    with pytest.raises(WorkbenchError) as refused:
        Trainer(config, store, policy, resume=True)
    assert str(refused.value) == (f"checkpoint {folder} does not fit this model and optimizer (loaded state dict has "
                                  "a different number of parameter groups)")


def test_a_resume_refuses_a_run_whose_config_is_not_a_training_config(tmp_path):
    import json

    from workbench.train import Trainer
    from workbench.train.store import CONFIG

    store = RunStore.create(tmp_path, "run")
    (store.path / CONFIG).write_text(json.dumps({"grup": 2}))
    with pytest.raises(WorkbenchError) as refused:
        Trainer.resume(store)
    cause = str(refused.value).split(" (", 1)[1]
    assert str(refused.value) == f"cannot resume {store.path}: its config.json is not a valid training config ({cause}"
    assert cause.startswith("unknown training settings ['grup']; valid: adv_eps, ") and len(cause) == 200 + 1
