"""Two CPU processes (torchrun, gloo) through accelerate's DDP: every rank ends with the same weights, equal to the
one-process run's; every group is counted once; a run of two processes resumes on one; the shared minibatch gives
exactly the one-process gradient (uneven and empty shares, micro-batches, lockstep); FSDP's option builds
accelerate's FSDP2 plugin (accelerate runs FSDP on CUDA only, so it cannot run here)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from workbench.core.errors import WorkbenchError
from workbench.models.embedded import build_embedded, save_embedded
from workbench.train import TrainConfig, Trainer
from workbench.train.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
CONFIG = dict(group=2, steps=3, chunks="1,2", iterations=2, prompts_per_iteration=2, eval_prompts=3, eval_every=1,
              lr=1e-3, clip_low=0.2, device="cpu", report_to="none")
RUNS = {  # trained under one torchrun launch of 2 processes, then each once in this process
    "full": CONFIG,
    "lora": CONFIG | {"lora_rank": 4, "lr": 1e-2},
    # micro-batches of 2 transitions, the KL term, 2 minibatches per step, and lockstep (FSDP's pass discipline:
    # every pass syncs, every process runs as many passes)
    "lockstep": CONFIG | {"micro_batch": 2, "kl_beta": 0.05, "minibatch": 3, "grad_accum": 2, "_lockstep": True},
}

WORKER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from workbench.core.heap import defer_collection
    defer_collection()  # as `python -m workbench train` under torchrun: on again once the model is loaded
    from safetensors.torch import save_file
    from workbench.train import TrainConfig, Trainer

    root, runs = Path(sys.argv[1]), json.loads(sys.argv[2])  # {name: config}, trained one after the other
    if any(config.get("reward") == "red_flat" for config in runs.values()):  # tests/support.py's reward
        from support import red_flat
        from workbench.rewards import REWARDS
        REWARDS.register("red_flat")(red_flat)
    for name, config in runs.items():
        lockstep = config.pop("_lockstep", False)
        trainer = Trainer(TrainConfig(**config), root / name / "run")
        trainer.dist.lockstep = lockstep
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
           str(root / "worker.py"), str(root), json.dumps(runs)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]

    initial = dict(build_embedded(seed=0).transformer.named_parameters())
    for name in runs:
        rank0, rank1 = (load_file(str(root / name / f"rank{r}.safetensors")) for r in (0, 1))
        assert set(rank0) == set(rank1) and all(torch.equal(rank0[k], rank1[k]) for k in rank0), name
        changed = [k for k in rank0 if k in initial and not torch.equal(rank0[k], initial[k])]
        assert changed or any("lora_" in k for k in rank0), name


@pytest.fixture(scope="module")
def two_process_runs(tmp_path_factory) -> Path:
    """The runs of the tests below, trained under one torchrun launch: root/<name>/run, root/<name>/rank<r>."""
    from support import RED_FLAT_PROMPTS

    root = tmp_path_factory.mktemp("torchrun")
    refill = CONFIG | {"reward": "red_flat", "prompts": RED_FLAT_PROMPTS, "dynamic_sampling": True, "iterations": 3,
                       "eval_prompts": 0}
    train_on_two_processes(root, {**RUNS, "refill": refill})
    return root


def one_process(root: Path, name: str, **changes) -> Trainer:
    config = {k: v for k, v in RUNS[name].items() if not k.startswith("_")}
    trainer = Trainer(TrainConfig(**config | {"model": str(root / "model")} | changes), None)
    trainer.run()
    return trainer


@pytest.mark.slow
def test_two_processes_train_identically_and_count_every_group_once(two_process_runs):
    run = RunStore.open(two_process_runs / "full" / "run").info()
    assert run.state == "finished" and [r["iteration"] for r in run.metrics] == [0, 1, 2]
    for row in run.metrics[1:]:
        assert row["rollout/groups"] == 2 and row["rollout/trajectories"] == 4
        assert row["train/transitions"] == 2 * 2 * 3 and "eval/reward_mean" in row
    assert not any(p.name.startswith("rank") for p in (two_process_runs / "full" / "run").iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNS)
def test_two_processes_equal_the_one_process_run(two_process_runs, name):
    """Both ranks hold the same weights (checked in the fixture), and these are the one-process run's: iteration 1
    samples the same initial model, so its rewards, evaluation and gradient norm are equal; the weights after 2
    iterations differ only by float rounding, which AdamW's first steps (g / |g|) scale up to lr for gradients
    near 0 (one process with micro-batches of 1 differs from one pass as much: 0.4 % of the change)."""
    single = one_process(two_process_runs, name)
    two = RunStore.open(two_process_runs / name / "run").metrics()
    for key in ("reward/mean", "reward/std", "eval/reward_mean", "policy/grad_norm", "train/transitions"):
        assert two[1][key] == pytest.approx(single.history[1][key], rel=1e-5, abs=1e-7), key
    assert two[0]["eval/reward_mean"] == pytest.approx(single.history[0]["eval/reward_mean"], rel=1e-6)
    weights = load_file(str(two_process_runs / name / "rank0.safetensors"))
    first = Trainer(TrainConfig(**{k: v for k, v in RUNS[name].items() if not k.startswith("_")}
                                | {"model": str(two_process_runs / "model"), "iterations": 1}), None).params
    change = max(float((single.params[k].detach() - first[k].detach()).abs().max()) for k in weights)
    difference = max(float((single.params[k].detach() - weights[k]).abs().max()) for k in weights)
    assert change > 0 and difference <= 0.02 * change, (difference, change)


@pytest.mark.slow
def test_two_processes_refill_in_step(two_process_runs):
    """DAPO dynamic sampling: each process refills its own slots; all take the same rounds and updates."""
    rows = RunStore.open(two_process_runs / "refill" / "run").info().metrics
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert all(r["rollout/kept_groups"] == 2 and r["train/transitions"] == 2 * 2 * 3 for r in rows)
    assert any(r["rollout/rounds"] > 1 for r in rows)


@pytest.mark.slow
def test_a_two_process_run_resumes_on_one_process(two_process_runs, tmp_path):
    """The checkpoint rank 0 wrote for both processes continues in one: iteration 3 equals a one-process run
    straight through 3 iterations (up to the rounding above)."""
    run = tmp_path / "run"
    shutil.copytree(two_process_runs / "lora" / "run", run)
    resumed = Trainer.resume(run, iterations=3)
    assert resumed.resumed_from == 2 and resumed.dist.world == 1
    resumed.run()
    rows = RunStore.open(run).info()
    assert rows.state == "finished" and [r["iteration"] for r in rows.metrics] == [0, 1, 2, 3]
    straight = one_process(two_process_runs, "lora", iterations=3)
    assert rows.metrics[3]["reward/mean"] == pytest.approx(straight.history[3]["reward/mean"], abs=2e-3)
    change = max(float((straight.params[k] - resumed.params[k]).detach().abs().max()) for k in straight.params)
    assert change < 2e-3  # lr 1e-2: each AdamW step moves a weight by up to 1e-2


SHARED_WORKER = textwrap.dedent("""
    import contextlib, importlib.util, json, sys
    import torch

    def load(name, path):  # no package import: a fast start
        spec = importlib.util.spec_from_file_location(name, path)
        module = sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    distributed = load("distributed", sys.argv[1])
    microbatch = load("microbatch", sys.argv[2])
    cases, x = json.loads(sys.argv[3]), torch.load(sys.argv[4])  # x (N, 3): the minibatch's transitions
    dist = distributed.Distribution()
    torch.manual_seed(dist.rank)  # different on each rank: DDP must broadcast rank 0's
    model = torch.nn.Linear(3, 1, bias=False).double()
    ddp = dist.prepare(model)
    weights = torch.arange(1.0, len(x) + 1, dtype=torch.float64)

    class Out:
        def __init__(self, loss):
            self.loss = loss

    def objective(lp, kl):  # couples the rows: a weighted mean and the square of the mean
        return Out((lp * weights).mean() + lp.mean() ** 2)

    grads = {}
    for name, case in cases.items():
        dist.lockstep = case["lockstep"]
        model.zero_grad(set_to_none=True)
        for b, owner in enumerate(case["owners"]):  # the minibatches of one optimizer step
            owner = torch.tensor(owner)
            rows = torch.nonzero(owner == dist.rank).flatten()
            mine = x[rows] if len(rows) else x[:1]
            order = torch.cat([torch.nonzero(owner == q).flatten() for q in range(dist.world)])
            shares = [int((owner == q).sum()) for q in range(dist.world)]
            context = lambda synced: contextlib.nullcontext() if synced else dist.no_sync(ddp)
            microbatch.backward_shared(lambda part: (ddp(mine[part]).squeeze(-1), None), objective, order, shares,
                                       dist, case["micro"], dist.world, context, b == len(case["owners"]) - 1)
        grads[name] = model.weight.grad.clone()
    torch.save({"grads": grads, "weight": model.weight.detach().clone()}, sys.argv[5] + f"/rank{dist.rank}.pt")
""")

SHARED_CASES = {  # owners of the 4 transitions of each minibatch of one step
    "uneven": {"owners": [[1, 0, 1, 1]], "micro": None, "lockstep": False},
    "rank 0 empty at the sync": {"owners": [[0, 1, 0, 0], [1, 1, 1, 1]], "micro": None, "lockstep": False},
    "micro-batches": {"owners": [[1, 1, 1, 0], [0, 0, 1, 0]], "micro": 1, "lockstep": False},
    "lockstep": {"owners": [[1, 1, 1, 0], [1, 1, 1, 1]], "micro": 2, "lockstep": True},
}


def test_a_shared_minibatch_has_the_one_process_gradient(tmp_path):
    """Two gloo processes with accelerate's DDP share minibatches of an objective that couples the rows: the
    gradient on every rank equals the one-process gradient of the same minibatches (float64, 1e-12), whatever the
    shares (one empty at the synced pass), with micro-batches and in lockstep."""
    x = torch.tensor([[1.0, 0.0, 2.0], [0.0, 4.0, -1.0], [3.0, 1.0, 0.0], [-2.0, 2.0, 5.0]], dtype=torch.float64)
    torch.save(x, tmp_path / "x.pt")
    (tmp_path / "worker.py").write_text(SHARED_WORKER)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, str(tmp_path / "worker.py"), str(ROOT / "workbench/train/distributed.py"),
            str(ROOT / "workbench/train/microbatch.py"), json.dumps(SHARED_CASES), str(tmp_path / "x.pt"),
            str(tmp_path)]
    procs = [subprocess.Popen(argv, stderr=subprocess.PIPE, text=True,
                              env=os.environ | {"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2",
                                                "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                                "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}) for r in (0, 1)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    torch.manual_seed(0)  # rank 0's initial weights, which DDP gave both
    w = torch.nn.Linear(3, 1, bias=False).double().weight.detach()
    assert torch.equal(ranks[1]["weight"], w) and torch.equal(ranks[0]["weight"], w)
    weights = torch.arange(1.0, 5.0, dtype=torch.float64)
    for name, case in SHARED_CASES.items():
        leaf = w.clone().requires_grad_()
        for _ in case["owners"]:  # one process: the same minibatches, one pass each
            lp = (x @ leaf.T).squeeze(-1)
            ((lp * weights).mean() + lp.mean() ** 2).backward()
        for rank in ranks:
            assert torch.allclose(rank["grads"][name], leaf.grad, rtol=0, atol=1e-12), name


def test_fsdp_is_an_option_for_full_fine_tunes_on_several_gpus():
    """fsdp builds accelerate's FSDP2 plugin (transformer blocks as shard units, full state dict); it is refused
    with LoRA and in one process. accelerate uses FSDP only for GPU processes, so it is not run here."""
    from accelerate import FullyShardedDataParallelPlugin

    from workbench.train.distributed import by_index, by_name, fsdp_plugin

    plugin = fsdp_plugin()
    assert isinstance(plugin, FullyShardedDataParallelPlugin) and plugin.fsdp_version == 2
    assert plugin.reshard_after_forward is True and plugin.state_dict_type.name == "FULL_STATE_DICT"
    assert plugin.auto_wrap_policy.__name__ == "transformer_auto_wrap_policy"
    with pytest.raises(WorkbenchError, match="fsdp shards the weights of a full fine-tune"):
        TrainConfig(fsdp=True, lora_rank=4)
    with pytest.raises(WorkbenchError, match="accelerate launch --num_processes N"):
        Trainer(TrainConfig(fsdp=True, device="cpu", iterations=1), None)
    state = {"state": {"b": {"step": 1}, "a": {"step": 1}}, "param_groups": [{"lr": 1e-3, "params": ["a", "b"]}]}
    plain = by_index(state, ["a", "b"])
    assert plain == {"state": {1: {"step": 1}, 0: {"step": 1}}, "param_groups": [{"lr": 1e-3, "params": [0, 1]}]}
    assert by_name(plain, ["a", "b"]) == state
