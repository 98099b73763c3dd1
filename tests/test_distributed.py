"""Two CPU processes (torchrun, gloo): groups split across ranks, gradients averaged, metrics counted once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from workbench.models.embedded import build_embedded, save_embedded
from workbench.train import TrainConfig, Trainer
from workbench.train.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
CONFIG = dict(group=2, steps=3, chunks="1,2", iterations=2, prompts_per_iteration=2, eval_prompts=2, eval_every=1,
              lr=1e-3, clip_low=0.2, device="cpu")

WORKER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from workbench.core.heap import defer_collection
    defer_collection()  # as `python -m workbench train` under torchrun: on again once the model is loaded
    from safetensors.torch import save_file
    from workbench.train import TrainConfig, Trainer

    root, runs = Path(sys.argv[1]), eval(sys.argv[2])  # {name: config}, trained one after the other
    if any(config.get("reward") == "red_flat" for config in runs.values()):  # tests/support.py's reward
        from support import red_flat
        from workbench.rewards import REWARDS
        REWARDS.register("red_flat")(red_flat)
    for name, config in runs.items():
        trainer = Trainer(TrainConfig(**config), root / name / "run")
        trainer.run()
        save_file({k: v.detach().contiguous() for k, v in trainer.params.items()},
                  str(root / name / f"rank{trainer.dist.rank}.safetensors"))
""")


def train_on_two_processes(root: Path, runs: dict[str, dict]) -> None:
    """Train each of `runs` ({name: config}, in order) in root/name/run under one torchrun launch of 2 CPU
    processes (starting them is most of the time); assert both ranks end every run with identical, changed weights."""
    save_embedded(build_embedded(seed=0), root / "model")
    runs = {name: config | {"model": str(root / "model")} for name, config in runs.items()}
    (root / "worker.py").write_text(WORKER)
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    cmd = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nnodes", "1", "--nproc_per_node", "2",
           str(root / "worker.py"), str(root), repr(runs)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stderr[-3000:]

    initial = dict(build_embedded(seed=0).transformer.named_parameters())
    for name in runs:
        rank0, rank1 = (load_file(str(root / name / f"rank{r}.safetensors")) for r in (0, 1))
        assert set(rank0) == set(rank1) and all(torch.equal(rank0[k], rank1[k]) for k in rank0), name
        assert any(not torch.equal(rank0[k], initial[k]) for k in rank0), name


@pytest.fixture(scope="module")
def two_process_runs(tmp_path_factory) -> Path:
    """The runs of the two tests below, trained under one torchrun launch: root/plain, root/refill."""
    from support import RED_FLAT_PROMPTS

    root = tmp_path_factory.mktemp("torchrun")
    refill = CONFIG | {"reward": "red_flat", "prompts": RED_FLAT_PROMPTS, "dynamic_sampling": True, "iterations": 3,
                       "eval_prompts": 0}
    train_on_two_processes(root, {"plain": CONFIG, "refill": refill})
    return root


@pytest.mark.slow
def test_two_processes_train_identically_and_count_every_group_once(two_process_runs, tmp_path):
    config = CONFIG | {"model": str(two_process_runs / "model")}

    run = RunStore.open(two_process_runs / "plain" / "run").info()
    assert run.state == "finished" and [r["iteration"] for r in run.metrics] == [0, 1, 2]
    for row in run.metrics[1:]:
        assert row["rollout/groups"] == 2 and row["rollout/trajectories"] == 4
        assert row["train/transitions"] == 2 * 2 * 3 and "eval/reward_mean" in row
    assert not any(p.name.startswith("rank") for p in (two_process_runs / "plain" / "run").iterdir())

    # iteration 1 samples the initial model, so its rewards match a single-process run of the same seed
    single = Trainer(TrainConfig(**config), tmp_path / "single")
    single.run()
    solo = RunStore(tmp_path / "single").metrics()
    assert abs(solo[1]["reward/mean"] - run.metrics[1]["reward/mean"]) < 1e-4
    assert abs(solo[1]["reward/std"] - run.metrics[1]["reward/std"]) < 1e-4


@pytest.mark.slow
def test_two_processes_refill_in_step(two_process_runs):
    """DAPO dynamic sampling: each process refills its own slots; all take the same rounds and updates."""
    rows = RunStore.open(two_process_runs / "refill" / "run").info().metrics
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert all(r["rollout/kept_groups"] == 2 and r["train/transitions"] == 2 * 2 * 3 for r in rows)
    assert any(r["rollout/rounds"] > 1 for r in rows)


SYNC_WORKER = textwrap.dedent("""
    import importlib.util, sys
    import torch
    spec = importlib.util.spec_from_file_location("distributed", sys.argv[1])  # no package import: fast start
    distributed = sys.modules["distributed"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(distributed)
    info = distributed.init_distributed()
    x = torch.load(sys.argv[2])[info.rank]  # (n_rank, 3) this process's trajectories
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    (x @ w).mean().backward()  # the local mean loss over this process's trajectories
    assert distributed.sync_gradients([w], float(x.shape[0]), info)
    torch.save(w.grad, sys.argv[3] + f"/grad{info.rank}.pt")
""")


def test_gradients_are_averaged_by_trajectories_as_in_one_process(tmp_path):
    """Rank 0 trains 1 trajectory, rank 1 trains 3: the synced gradient must be the single-process gradient of
    the mean loss over all 4 (a sum would double it; an unweighted average of the two ranks would not match)."""
    import socket

    x = torch.tensor([[1.0, 0.0, 2.0], [0.0, 4.0, -1.0], [3.0, 1.0, 0.0], [-2.0, 2.0, 5.0]], dtype=torch.float64)
    torch.save([x[:1], x[1:]], tmp_path / "x.pt")
    (tmp_path / "worker.py").write_text(SYNC_WORKER)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, str(tmp_path / "worker.py"), str(ROOT / "workbench/train/distributed.py"),
            str(tmp_path / "x.pt"), str(tmp_path)]
    procs = [subprocess.Popen(argv, stderr=subprocess.PIPE, text=True,
                              env=os.environ | {"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2",
                                                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                                                "OMP_NUM_THREADS": "1"}) for r in (0, 1)]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err[-2000:]
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    (x @ w).mean().backward()  # one process, all 4 trajectories
    assert torch.allclose(w.grad, x.mean(0))  # d/dw mean_i x_i . w = mean_i x_i
    for r in (0, 1):
        assert torch.allclose(torch.load(tmp_path / f"grad{r}.pt"), w.grad, rtol=0, atol=1e-12)
