"""The run store: folders, atomic writes, metrics lines, status, checkpoints, listing, comparison, CSV."""

from __future__ import annotations

import csv
import json
import os

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.train import store as runs


def make_run(root, name: str, rewards: list[float], state: str = "finished", started: float = 0.0):
    path = runs.new_run_dir(root, name)
    runs.write_json(path / runs.CONFIG, {"objective": "chunk_grpo"})
    runs.write_status(path, state, len(rewards), started=started)
    for i, r in enumerate(rewards, start=1):
        runs.append_metrics(path, {"iteration": i, "reward/mean": r, **({"eval/reward_mean": r} if i == 2 else {})})
    return path


def test_new_run_dir_names_and_clashes(tmp_path):
    a = runs.new_run_dir(tmp_path, "demo")
    assert a == tmp_path / "demo" and a.is_dir()
    assert runs.new_run_dir(tmp_path, "demo") == a  # an empty folder may be reused
    (a / "config.json").write_text("{}")
    with pytest.raises(WorkbenchError, match="already exists"):
        runs.new_run_dir(tmp_path, "demo")
    with pytest.raises(WorkbenchError, match="plain folder name"):
        runs.new_run_dir(tmp_path, "a/b")
    first = runs.new_run_dir(tmp_path)
    (first / "x").write_text("busy")
    second = runs.new_run_dir(tmp_path)
    assert second != first and second.name.startswith(first.name[:8])


def test_atomic_write_keeps_the_old_file_when_the_write_crashes(tmp_path, monkeypatch):
    path = tmp_path / "status.json"
    runs.write_json(path, {"state": "running"})

    def crash(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(WorkbenchError, match="No space left"):
        runs.write_json(path, {"state": "finished"})
    assert json.loads(path.read_text()) == {"state": "running"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]  # no temporary file left behind


def test_metrics_lines_torn_tail_and_truncate(tmp_path):
    for i in range(4):
        runs.append_metrics(tmp_path, {"iteration": i, "loss/policy": float("nan") if i == 1 else i / 10})
    with open(tmp_path / runs.METRICS, "a") as f:
        f.write('{"iteration": 4, "rew')  # a crash mid-line
    rows = runs.read_metrics(tmp_path)
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3] and rows[1]["loss/policy"] is None
    runs.truncate_metrics(tmp_path, 2)
    assert [r["iteration"] for r in runs.read_metrics(tmp_path)] == [0, 1, 2]
    assert (tmp_path / runs.METRICS).read_text().endswith("\n")


def test_status_load_list_and_stop(tmp_path):
    old = make_run(tmp_path, "old", [0.1, 0.2], started=1.0)
    new = make_run(tmp_path, "new", [0.3], state="running", started=2.0)
    (tmp_path / "not_a_run").mkdir()
    listed = runs.list_runs(tmp_path)
    assert [r.name for r in listed] == ["new", "old"]
    info = runs.load_run(old)
    assert info.state == "finished" and info.status["pid"] == os.getpid() and info.status["iteration"] == 2
    assert info.series("reward/mean") == ([1, 2], [0.1, 0.2]) and info.series("eval/reward_mean") == ([2], [0.2])
    assert runs.list_runs(tmp_path / "missing") == []
    runs.request_stop(new)
    assert runs.stop_requested(new) and not runs.stop_requested(old)
    runs.clear_stop(new)
    assert not runs.stop_requested(new)


def test_bad_paths_are_workbench_errors(tmp_path):
    with pytest.raises(WorkbenchError, match="does not exist"):
        runs.load_run(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(WorkbenchError, match="not a run folder"):
        runs.request_stop(tmp_path / "plain")
    (tmp_path / "file").write_text("x")
    with pytest.raises(WorkbenchError, match="is a file"):
        runs.list_runs(tmp_path / "file")
    with pytest.raises(WorkbenchError, match="unknown run state"):
        runs.write_status(tmp_path / "plain", "sleeping", 0)


def test_compare_runs_and_export_csv(tmp_path):
    a = make_run(tmp_path, "a", [0.1, 0.2, 0.4])
    b = make_run(tmp_path, "b", [0.3, 0.5])
    cmp = runs.compare_runs([a, b], "reward/mean")
    assert cmp["a"] == {"iterations": [1, 2, 3], "values": [0.1, 0.2, 0.4], "last": 0.4}
    assert cmp["b"]["last"] == 0.5
    with pytest.raises(WorkbenchError, match="logged metrics: eval/reward_mean, reward/mean"):
        runs.compare_runs([a, b], "reward/nope")
    out = runs.export_csv(a, tmp_path / "a.csv")
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0]) == ["iteration", "eval/reward_mean", "reward/mean"]
    assert [r["reward/mean"] for r in rows] == ["0.1", "0.2", "0.4"] and rows[0]["eval/reward_mean"] == ""


def test_checkpoints_roundtrip_and_keep_only_the_latest(tmp_path):
    w = {"layer.weight": torch.arange(6.0).view(2, 3)}
    opt = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(2, 3)}}, "param_groups": [{"lr": 0.1}]}
    assert runs.latest_checkpoint(tmp_path) is None
    runs.save_checkpoint(tmp_path, 1, w, opt)
    runs.save_checkpoint(tmp_path, 2, {"layer.weight": w["layer.weight"] + 1}, opt)
    folder = runs.latest_checkpoint(tmp_path)
    assert folder.name == "iter_0002"
    assert sorted(p.name for p in folder.parent.iterdir()) == ["iter_0002", "latest.json"]
    iteration, weights, state = runs.load_checkpoint(folder)
    assert iteration == 2 and torch.equal(weights["layer.weight"], w["layer.weight"] + 1)
    assert torch.equal(state["state"][0]["exp_avg"], torch.ones(2, 3)) and state["param_groups"][0]["lr"] == 0.1
    (folder / "optimizer.pt").write_bytes(b"garbage")
    with pytest.raises(WorkbenchError, match="corrupted"):
        runs.load_checkpoint(folder)
