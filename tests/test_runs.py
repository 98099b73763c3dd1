"""The run store: folders, atomic writes, metrics lines, status, checkpoints, listing, comparison, CSV, damage."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from workbench.core.errors import WorkbenchError
from workbench.core.files import read_json, write_json
from workbench.train.store import (
    METRICS,
    STATUS,
    RunStore,
    compare_runs,
    export_csv,
    list_runs,
    load_checkpoint,
)


def make_run(root, name: str, rewards: list[float], state: str = "finished", started: float = 0.0):
    store = RunStore.create(root, name)
    store.write_config({"objective": "chunk_grpo"})
    store.write_status(state, len(rewards), started=started)
    for i, r in enumerate(rewards, start=1):
        store.append_metrics({"iteration": i, "reward/mean": r, **({"eval/reward_mean": r} if i == 2 else {})})
    return store.path


def test_create_names_and_clashes(tmp_path):
    a = RunStore.create(tmp_path, "demo").path
    assert a == tmp_path / "demo" and a.is_dir()
    assert RunStore.create(tmp_path, "demo").path == a  # an empty folder may be reused
    (a / "config.json").write_text("{}")
    with pytest.raises(WorkbenchError, match="already exists"):
        RunStore.create(tmp_path, "demo")
    with pytest.raises(WorkbenchError, match="plain folder name"):
        RunStore.create(tmp_path, "a/b")
    first = RunStore.create(tmp_path).path
    (first / "x").write_text("busy")
    second = RunStore.create(tmp_path).path
    assert second != first and second.name.startswith(first.name[:8])


def test_a_new_run_never_goes_into_a_used_folder_or_a_file(tmp_path):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    with pytest.raises(WorkbenchError, match="not empty and holds no run"):
        RunStore(tmp_path / "used").check_fresh()
    (tmp_path / "file").write_text("x")
    with pytest.raises(WorkbenchError, match="is a file"):
        RunStore(tmp_path / "file").check_fresh()
    RunStore(tmp_path / "new").check_fresh()  # missing is fine


def test_atomic_write_keeps_the_old_file_when_the_write_crashes(tmp_path, monkeypatch):
    path = tmp_path / "status.json"
    write_json(path, {"state": "running"})

    def crash(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(WorkbenchError, match="No space left"):
        write_json(path, {"state": "finished"})
    assert json.loads(path.read_text()) == {"state": "running"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]  # no temporary file left behind


def test_metrics_lines_torn_tail_and_truncate(tmp_path):
    store = RunStore(tmp_path)
    for i in range(4):
        store.append_metrics({"iteration": i, "loss/policy": float("nan") if i == 1 else i / 10})
    with open(tmp_path / METRICS, "a") as f:
        f.write('{"iteration": 4, "rew')  # a crash mid-line
    rows = store.metrics()
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3] and rows[1]["loss/policy"] is None
    store.append_metrics({"iteration": 4, "reward/mean": 0.5})  # the row after a torn line is kept, not glued on
    assert [r["iteration"] for r in store.metrics()] == [0, 1, 2, 3, 4]
    store.truncate_metrics(2)
    assert [r["iteration"] for r in store.metrics()] == [0, 1, 2]
    assert (tmp_path / METRICS).read_text().endswith("\n")


def test_garbage_metrics_and_odd_rows_are_skipped(tmp_path):
    (tmp_path / METRICS).write_bytes(os.urandom(300) + b'\n{"iteration": 1, "x": 2}\n[1, 2]\n{"iteration": "3"}\n')
    assert RunStore(tmp_path).metrics() == [{"iteration": 1, "x": 2}]


def test_status_load_list_and_stop(tmp_path):
    old = make_run(tmp_path, "old", [0.1, 0.2], started=1.0)
    new = make_run(tmp_path, "new", [0.3], state="running", started=2.0)
    (tmp_path / "not_a_run").mkdir()
    listed = list_runs(tmp_path)
    assert [r.name for r in listed] == ["new", "old"]
    info = RunStore.open(old).info()
    assert info.state == "finished" and info.status["pid"] == os.getpid() and info.status["iteration"] == 2
    assert info.series("reward/mean") == ([1, 2], [0.1, 0.2]) and info.series("eval/reward_mean") == ([2], [0.2])
    assert list_runs(tmp_path / "missing") == []
    assert RunStore(new).request_stop() is not None  # 'running' in this very process
    assert RunStore(new).stop_requested() and not RunStore(old).stop_requested()
    RunStore(new).clear_stop()
    assert not RunStore(new).stop_requested()
    assert RunStore(old).request_stop() is None and not RunStore(old).stop_requested()  # finished: no STOP file


def test_a_run_whose_process_is_gone_is_interrupted(tmp_path):
    path = make_run(tmp_path, "gone", [0.1], state="running")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    status = json.loads((path / STATUS).read_text())
    write_json(path / STATUS, {**status, "pid": dead.pid, "pid_start": None})
    assert RunStore(path).info().state == "interrupted"
    write_json(path / STATUS, {**status, "pid_start": -1})  # this pid, but another process's start time
    assert RunStore(path).info().state == "interrupted"


def test_one_damaged_run_is_listed_as_damaged_and_hides_nothing(tmp_path):
    good = make_run(tmp_path, "good", [0.1, 0.2], started=1.0)
    bad = make_run(tmp_path, "bad", [0.3], started=2.0)
    (bad / STATUS).write_bytes(b"\x00{not json")
    (bad / METRICS).write_bytes(os.urandom(200))
    listed = {r.name: r for r in list_runs(tmp_path)}
    assert listed["good"].state == "finished" and listed["bad"].state == "damaged"
    assert "status.json" in listed["bad"].damaged
    assert compare_runs([good], "reward/mean")["good"]["last"] == 0.2


def test_bad_paths_are_workbench_errors(tmp_path):
    with pytest.raises(WorkbenchError, match="does not exist"):
        RunStore.open(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(WorkbenchError, match="not a run folder"):
        RunStore(tmp_path / "plain").request_stop()
    (tmp_path / "file").write_text("x")
    with pytest.raises(WorkbenchError, match="is a file"):
        list_runs(tmp_path / "file")
    with pytest.raises(WorkbenchError, match="unknown run state"):
        RunStore(tmp_path / "plain").write_status("sleeping", 0)


def test_create_names_a_run_by_the_time_made_unique_under_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert RunStore.create(name="demo").path == Path("runs") / "demo"  # the default root: ./runs
    assert re.fullmatch(r"\d{8}-\d{6}", RunStore.create(tmp_path).path.name)  # e.g. 20250101-120000
    monkeypatch.setattr("time.strftime", lambda fmt: "20250101-120000")
    names = []
    for _ in range(3):
        store = RunStore.create(tmp_path / "auto")
        (store.path / "config.json").write_text("{}")  # no longer empty: the next run needs another name
        names.append(store.path.name)
    assert names == ["20250101-120000", "20250101-120000-1", "20250101-120000-2"]


def test_create_refuses_what_is_not_a_fresh_plain_folder(tmp_path):
    for name in (".", "..", "a/b"):
        with pytest.raises(WorkbenchError, match=f"run name '{re.escape(name)}' must be a plain folder name"):
            RunStore.create(tmp_path, name)
    (RunStore.create(tmp_path, "demo").path / "config.json").write_text("{}")
    with pytest.raises(WorkbenchError) as err:
        RunStore.create(tmp_path, "demo")
    assert str(err.value) == (f"run folder {tmp_path / 'demo'} already exists and is not empty; choose another name "
                              "or resume it with --resume")
    (tmp_path / "file").write_text("x")
    with pytest.raises(WorkbenchError) as err:
        RunStore.create(tmp_path / "file", "demo")
    assert str(err.value) == f"cannot create run folder {tmp_path / 'file' / 'demo'}: Not a directory"


def test_compare_runs_and_export_csv(tmp_path):
    a = make_run(tmp_path, "a", [0.1, 0.2, 0.4])
    b = make_run(tmp_path, "b", [0.3, 0.5])
    cmp = compare_runs([a, b], "reward/mean")
    assert cmp["a"] == {"iterations": [1, 2, 3], "values": [0.1, 0.2, 0.4], "last": 0.4}
    assert cmp["b"]["last"] == 0.5
    with pytest.raises(WorkbenchError, match="logged metrics: eval/reward_mean, reward/mean"):
        compare_runs([a, b], "reward/nope")
    out = export_csv(RunStore(a).info(), tmp_path / "a.csv")
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0]) == ["iteration", "eval/reward_mean", "reward/mean"]
    assert [r["reward/mean"] for r in rows] == ["0.1", "0.2", "0.4"] and rows[0]["eval/reward_mean"] == ""


def test_export_csv_writes_one_unix_line_per_iteration_and_an_empty_cell_for_none(tmp_path):
    store = RunStore.create(tmp_path, "run")
    store.append_metrics({"iteration": 1, "reward/mean": 0.5, "loss/kl": None})
    store.append_metrics({"iteration": 2, "reward/mean": 0.25})
    out = export_csv(store.info(), tmp_path / "run.csv")
    assert out.read_bytes() == b"iteration,loss/kl,reward/mean\n1,,0.5\n2,,0.25\n"  # iteration first, once


def test_compare_runs_says_what_it_needs(tmp_path):
    with pytest.raises(WorkbenchError) as err:
        compare_runs([], "reward/mean")
    assert str(err.value) == "compare_runs needs at least one run folder"
    empty = RunStore.create(tmp_path, "empty")
    empty.write_config({"objective": "chunk_grpo"})
    with pytest.raises(WorkbenchError) as err:
        compare_runs([empty.path], "reward/mean")
    assert str(err.value) == "no run logged metric 'reward/mean'; logged metrics: none"


def test_an_sd3_run_saved_before_max_sequence_length_keeps_the_pipelines_256_t5_tokens(tmp_path):
    def saved(name: str, pipeline, **config) -> dict:
        folder = tmp_path / f"{name}-model"
        folder.mkdir()
        if pipeline is not None:
            write_json(folder / "model_index.json", pipeline)
        store = RunStore.create(tmp_path, name)
        store.write_config({"model": str(folder), **config})
        return store.config()

    sd3 = {"_class_name": "StableDiffusion3Pipeline"}
    assert saved("old_sd3", sd3)["max_sequence_length"] == 256  # diffusers' SD3 pipeline default
    assert saved("new_sd3", sd3, max_sequence_length=128)["max_sequence_length"] == 128  # a saved value stays
    assert "max_sequence_length" not in saved("flux", {"_class_name": "FluxPipeline"})
    assert "max_sequence_length" not in saved("no_index", None)  # not a diffusers folder
    assert "max_sequence_length" not in saved("odd_index", ["StableDiffusion3Pipeline"])  # not an index
    embedded = RunStore.create(tmp_path, "embedded")
    embedded.write_config({"model": None})
    assert embedded.config() == {"model": None}


def test_checkpoints_roundtrip_and_keep_only_the_latest(tmp_path):
    store = RunStore(tmp_path)
    w = {"layer.weight": torch.arange(6.0).view(2, 3)}
    opt = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(2, 3)}}, "param_groups": [{"lr": 0.1}]}
    assert store.latest_checkpoint() is None
    store.save_checkpoint(1, w, opt)
    store.save_checkpoint(2, {"layer.weight": w["layer.weight"] + 1}, opt)
    checkpoint = store.latest_checkpoint()
    assert checkpoint.folder.name == "iter_0002"
    assert sorted(p.name for p in checkpoint.folder.parent.iterdir()) == ["iter_0002", "latest.json"]
    assert checkpoint.iteration == 2 and torch.equal(checkpoint.weights["layer.weight"], w["layer.weight"] + 1)
    state = checkpoint.optimizer_state
    assert torch.equal(state["state"][0]["exp_avg"], torch.ones(2, 3)) and state["param_groups"][0]["lr"] == 0.1
    (checkpoint.folder / "optimizer.pt").write_bytes(b"garbage")
    with pytest.raises(WorkbenchError, match="corrupted"):
        load_checkpoint(checkpoint.folder)
    assert store.latest_checkpoint() is None  # the only checkpoint is damaged: nothing complete to resume


DAMAGE = {  # how the newest checkpoint folder is broken -> what is done to it
    "optimizer garbage": lambda f: (f / "optimizer.pt").write_bytes(b"garbage"),
    "weights missing": lambda f: (f / "weights.safetensors").unlink(),
    "weights truncated": lambda f: os.truncate(f / "weights.safetensors", 40),
    "state not JSON": lambda f: (f / "state.json").write_text("{{"),
    "NaN weights": lambda f: save_file({"layer.weight": torch.full((2, 3), torch.nan)}, str(f / "weights.safetensors")),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_newest_checkpoint_falls_back_to_the_older_complete_one(tmp_path, damage):
    store = RunStore(tmp_path)
    w = {"layer.weight": torch.arange(6.0).view(2, 3)}
    store.save_checkpoint(1, w, {"step": 1}, keep=2)
    store.save_checkpoint(2, {"layer.weight": w["layer.weight"] + 1}, {"step": 2}, keep=2)
    newest = tmp_path / "checkpoints" / "iter_0002"
    assert read_json(tmp_path / "checkpoints" / "latest.json")["dir"] == newest.name  # latest.json names it
    DAMAGE[damage](newest)
    checkpoint = store.latest_checkpoint()
    assert checkpoint is not None, "the older complete checkpoint must be found"
    assert checkpoint.iteration == 1 and checkpoint.folder.name == "iter_0001"
    assert torch.equal(checkpoint.weights["layer.weight"], w["layer.weight"])
    assert checkpoint.optimizer_state == {"step": 1}


def test_latest_pointer_never_leads_outside_the_run(tmp_path):
    store, other = RunStore(tmp_path / "a"), RunStore(tmp_path / "b")
    store.save_checkpoint(1, {"w": torch.ones(1)}, {"step": 1})
    other.save_checkpoint(5, {"w": torch.zeros(1)}, {"step": 5})
    write_json(tmp_path / "a" / "checkpoints" / "latest.json", {"iteration": 5, "dir": "../../b/checkpoints/iter_0005"})
    assert store.latest_checkpoint().iteration == 1  # its own complete checkpoint, not b's
    (tmp_path / "a" / "checkpoints" / "latest.json").write_text("{}")
    assert store.latest_checkpoint().iteration == 1
    assert torch.equal(store.latest_checkpoint().weights["w"], torch.ones(1))  # a's weights, not b's zeros


def test_samples_and_checkpoints_follow_the_iteration_number_past_9999(tmp_path):
    store = RunStore.create(tmp_path, "long")
    (store.path / "samples").mkdir(parents=True, exist_ok=True)
    for name in ("iter_9999.png", "iter_10000.png", "eval_9990.png", "eval_10000.png"):
        (store.path / "samples" / name).write_bytes(b"png")
    assert [p.name for p in store.info().samples()] == ["iter_9999.png", "iter_10000.png"]
    assert store.info().eval_samples()[-1].name == "eval_10000.png"
    for name in ("iter_9999", "iter_10000"):
        (store.path / "checkpoints" / name).mkdir(parents=True)
    assert [p.name for p in store.checkpoints()][:2] == ["iter_10000", "iter_9999"]


def test_a_run_folder_removed_while_asked_to_stop_is_not_made_again(tmp_path, monkeypatch):
    run = make_run(tmp_path, "run", [0.1], state="running")
    read = RunStore.info

    def read_then_remove(store):  # the folder goes between reading the state and writing STOP
        info = read(store)
        shutil.rmtree(run)
        return info

    monkeypatch.setattr(RunStore, "info", read_then_remove)
    with pytest.raises(WorkbenchError, match="cannot write"):
        RunStore(run).request_stop()
    assert not run.exists()
