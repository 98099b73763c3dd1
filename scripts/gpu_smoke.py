"""Does the workbench work on this card? One iteration of the README's one-GPU recipe on a real-size SD3 / FLUX with
random weights built on the GPU (no download; `models/random_pipelines.py`) or on a local diffusers folder, then a
second iteration (KL > 0), a resume, the app's Fine-tune started through gradio_client and two GPUs when present.

    python scripts/gpu_smoke.py                                  # SD3.5 Medium's architecture, random bfloat16 weights
    python scripts/gpu_smoke.py --architecture flux.1-dev        # FLUX.1-dev's
    python scripts/gpu_smoke.py --model models/sd3.5-medium      # a local folder (also runs the app and 2 GPUs)
    python scripts/gpu_smoke.py --tiny --device cpu              # the same code path in seconds (the tests run it)

The recipe (Flow-GRPO's pickscore_sd3_1gpu, README "One GPU"): 10 sampling steps (9 trained), CFG 4.5, G = 8,
16 prompts, LoRA r 32, bfloat16 weights, KL 0.04, micro-batch auto, 512 px; the reward is `sharpness` (PickScore's
weights are a download). Per phase it reports seconds and peak allocated / reserved memory against the estimate's
parts (`workbench train --dry-run`), the achieved TFLOPS of the iteration against this card's measured bf16 matmul
peak, and these checks: on-policy ratio 1 within 1e-3, LoRA weights change, KL 0 then > 0, the run resumes, the
app starts a run, two processes train identically. It writes OUT/report.json, prints a table and exits 1 when a
check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RECIPE = dict(group=8, steps=9, prompts_per_iteration=16, guidance_scale=4.5, kl_beta=0.04, lora_rank=32,
              dtype="bfloat16", objective="chunk_grpo", chunks="2,3,4", lr=3e-4, reward="sharpness")
TINY = dict(group=2, steps=2, prompts_per_iteration=2, chunks="1,1", lora_rank=4, lr=3e-2, max_sequence_length=16)
RATIO_TOLERANCE = 1e-3


def matmul_peak_tflops(device: str, size: int, repeat: int = 10) -> float:
    """The card's measured bfloat16 matmul throughput: `repeat` products of two size x size matrices."""
    a, b = (torch.randn(size, size, device=device, dtype=torch.bfloat16) for _ in range(2))
    (a @ b).sum().item()  # warm-up
    sync(device)
    t0 = time.perf_counter()
    for _ in range(repeat):
        c = a @ b
    sync(device)
    del c
    return 2 * size**3 * repeat / (time.perf_counter() - t0) / 1e12


def iteration_flops(params: int, blocks: int, width: int, tokens: int, group: int, prompts: int,
                    sampling_steps: int, trained_steps: int, cfg: bool, checkpointing: bool, kl: bool) -> float:
    """Transformer FLOPs of one iteration (docs/methods.md "GPU smoke"): a forward of one row costs
    2 P n + 4 n^2 d B (matmuls over n tokens plus attention); the rollout runs N G (T + 1) of them, the update
    N G S transitions at 3 forwards' cost (forward + backward), one more with checkpointing and one for the KL
    reference; CFG doubles every row."""
    forward = 2 * params * tokens + 4 * tokens**2 * width * blocks
    rows = 2 if cfg else 1
    update = 3 + (1 if checkpointing else 0) + (1 if kl else 0)
    return rows * forward * group * prompts * (sampling_steps + update * trained_steps)


def sync(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def memory(device: str) -> dict:
    """Peak allocated and reserved bytes since the last reset (CUDA), then reset; {} elsewhere."""
    if not str(device).startswith("cuda"):
        return {}
    out = {"allocated": torch.cuda.max_memory_allocated(), "reserved": torch.cuda.max_memory_reserved()}
    torch.cuda.reset_peak_memory_stats()
    return out


def build(args, device: str):
    """(policy, model for TrainConfig, folder or None): random weights on the device, or a local folder."""
    from workbench.models.adapters import load_model
    from workbench.models.random_pipelines import random_policy, save_random_pipeline

    dtype = "float32" if args.tiny and device == "cpu" else "bfloat16"  # CPU bfloat16 is emulated: slow
    if args.model:
        return load_model(args.model, device=device, dtype=dtype), args.model, args.model
    if args.tiny:  # a folder, so the app and torchrun can load the same model
        folder = Path(args.out) / "model"
        if not (folder / "model_index.json").is_file():
            save_random_pipeline(args.architecture, folder, tiny=True)
        return load_model(str(folder), device=device, dtype=dtype), str(folder), str(folder)
    policy = random_policy(args.architecture, device, torch.bfloat16, resolution=args.resolution)
    return policy, f"meta:{args.architecture}", None


def autocast(policy, config):
    return torch.autocast(policy.device.type, dtype=torch.bfloat16, enabled=config.dtype == "bfloat16")


def sampled(policy, config):
    from workbench.flow.sampler import sample_group

    with torch.no_grad(), autocast(policy, config):
        return sample_group(policy, "a photo of a cat", replace(config.sampling_config(1), group=2))


def on_policy_ratio(policy, config) -> float:
    """The largest |exp(log p_new - log p_old) - 1| of a group re-scored by the policy that sampled it (bf16)."""
    from workbench.flow.sampler import rescore

    group = sampled(policy, config)
    with torch.no_grad(), autocast(policy, config):
        again = rescore(policy, group)
    sde = group.stds > 0
    return float((again[sde].float() - group.log_probs[sde].float()).exp().sub(1).abs().max())


def kl_to_reference(trainer) -> float:
    """The mean KL (the run's kl_form, `objectives.transition_kl`) of the policy's SDE steps to its reference's on a
    fresh group: 0 before the first update (LoRA B = 0), > 0 after it."""
    from workbench.flow.sampler import transition
    from workbench.rl.objectives import transition_kl

    policy, reference, config = trainer.policy, trainer.reference, trainer.config
    group = sampled(policy, config)
    cfg = group.config
    cond = policy.encode([group.prompt], cfg=cfg.guidance_scale != 1.0).repeat(group.group_size)
    sigmas, states = group.sigmas.to(policy.device), group.states.to(policy.device)
    kls = []
    with torch.no_grad(), autocast(policy, config):
        for t in range(group.num_steps):
            if float(group.stds[:, t].max()) > 0:
                out, ref = (transition(p, states[:, t], sigmas, t, cond, cfg, x_next=states[:, t + 1])
                            for p in (policy, reference))
                kls.append(transition_kl(out.mean, ref.mean, out.std, out.noise_scale, config.kl_form).float())
    return float(torch.cat(kls).mean())


def run_app(folder: str, out: Path) -> tuple[bool, str]:
    """Start a one-iteration fine-tune from the app's Fine-tune tab through gradio_client; wait until it ends."""
    import socket

    from gradio_client import Client

    from app import create_app
    from workbench.train.store import RunStore
    from workbench.ui import train_form as tf

    demo, wb = create_app(folder, runs_root=str(out / "app-runs"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo.queue().launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        real = tf.real_defaults(wb)
        form = ("chunk_grpo", "sharpness", "1,1", 3e-4, 1, 2, 2, 4, "flow_grpo", "", "none")
        *_, status = client.predict(*form, *(real | {"prompts_per_iteration": 1}).values(), api_name="/start_run")
        if not status.startswith("✓ started run"):
            return False, status
        run = wb.jobs.root / status.split("started run ")[1].split(" ")[0]
        deadline = time.time() + 900
        while time.time() < deadline and RunStore(run).status().get("state") in (None, "running"):
            time.sleep(1)
        state = RunStore(run).info().state
        return state == "finished", f"the app's run {run.name} {state}"
    finally:
        demo.close()


def two_processes(folder: str, out: Path, tiny: bool) -> tuple[bool, str]:
    """`workbench train` under torchrun on 2 GPUs: both ranks finish (the tests check their weights on CPU)."""
    flags = ["--group", "2", "--steps", "2", "--chunks", "1,1", "--prompts-per-iteration", "2", "--iterations", "1",
             "--eval-prompts", "0", "--report-to", "none", "--reward", "sharpness"] + (["--lora-rank", "4"] if tiny
                                                                                       else [])
    cmd = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc_per_node", "2", "-m", "workbench",
           "train", "--model", folder, "--out", str(out / "two-gpus"), *flags]
    done = subprocess.run(cmd, cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    return done.returncode == 0, "2 processes finished" if done.returncode == 0 else done.stderr[-500:]


def smoke(args) -> dict:
    from workbench.train import TrainConfig, Trainer
    from workbench.train.memory import MemoryEstimate

    device, out = args.device, Path(args.out)
    for old in ("run", "app-runs", "two-gpus"):  # the smoke's own runs of an earlier smoke in OUT
        shutil.rmtree(out / old, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    report = {"device": torch.cuda.get_device_name(0) if device.startswith("cuda") else device, "phases": {},
              "checks": {}}
    memory(device)
    t0 = time.perf_counter()
    policy, model, folder = build(args, device)
    sync(device)
    report["phases"]["build"] = {"seconds": time.perf_counter() - t0, **memory(device)}
    config = TrainConfig(model=model, device=device, iterations=1, eval_prompts=0, report_to="none",
                         checkpoint_every=1, resolution=args.resolution, **(RECIPE | (TINY if args.tiny else {})))
    if args.tiny and device == "cpu":
        config = replace(config, dtype="float32")  # CPU bfloat16 matmuls are emulated: the path, not the speed
    trainer = Trainer(config, out / "run", policy=policy)
    plan, estimate = trainer.plan, trainer.plan.estimate
    report["plan"] = plan.text()
    report["estimate"] = {**vars(estimate), "total": estimate.total, "allocated": estimate.allocated}
    before = {k: v.detach().clone() for k, v in trainer.params.items()}
    report["checks"]["on-policy ratio 1"] = (lambda r: (r <= RATIO_TOLERANCE, f"max |ratio - 1| = {r:.2e}"))(
        on_policy_ratio(trainer.policy, trainer.config))
    kl = [kl_to_reference(trainer)]
    memory(device)
    for it in (1, 2):  # iteration 1: LoRA B = 0, the policy is its reference; iteration 2 after one update
        trainer.config = replace(trainer.config, iterations=it)
        sync(device)
        t0 = time.perf_counter()
        trainer.run()
        sync(device)
        row = trainer.history[-1]
        report["phases"][f"iteration {it}"] = {"seconds": time.perf_counter() - t0, **memory(device),
                                              **{k: row[k] for k in row if k.startswith("time/")}}
    kl.append(kl_to_reference(trainer))
    report["checks"]["KL 0 then > 0"] = (kl[0] == 0 and kl[1] > 0, f"KL to the reference {kl[0]:.2e} before, "
                                         f"{kl[1]:.2e} after 2 iterations")
    changed = sum(not torch.equal(before[k], v.detach().to(before[k].device)) for k, v in trainer.params.items())
    report["checks"]["LoRA weights change"] = (changed > 0, f"{changed} of {len(before)} tensors changed")
    saved = {k: v.detach().cpu().clone() for k, v in trainer.params.items()}
    trainer.release()
    del trainer
    t0 = time.perf_counter()
    policy = build(args, device)[0] if not folder else None
    resumed = Trainer(replace(config, iterations=2), out / "run", policy=policy, resume=True)
    same = all(torch.equal(saved[k], v.detach().cpu()) for k, v in resumed.params.items())
    report["checks"]["resume"] = (same and resumed.iteration == 2, f"resumed at iteration {resumed.iteration}, "
                                  f"weights {'equal' if same else 'differ'}")
    report["phases"]["resume"] = {"seconds": time.perf_counter() - t0, **memory(device)}
    resumed.release()
    del resumed, policy
    peak = report["phases"]["iteration 2"]
    if "allocated" in peak:  # the estimate's total against what the allocator held
        ratio = peak["reserved"] / estimate.total
        report["checks"]["estimate within 0.8-1.25 of the reserved peak"] = (0.8 <= ratio <= 1.25, f"{ratio:.2f}")
    sizes, run = plan.sizes
    flops = iteration_flops(sizes.transformer_params, sizes.blocks, sizes.width, sizes.tokens, config.group,
                            config.prompts_per_iteration, run.sampling_steps, run.trained_steps,
                            config.guidance_scale != 1.0, bool(plan.config.checkpointing), config.kl_beta > 0)
    report["tflops"] = {"achieved": flops / report["phases"]["iteration 2"]["seconds"] / 1e12,
                        "matmul_peak": matmul_peak_tflops(device, 256 if args.tiny else 8192)}
    if folder and not args.no_app:
        report["checks"]["the app's Fine-tune through gradio_client"] = run_app(folder, out)
    if folder and device.startswith("cuda") and torch.cuda.device_count() >= 2:
        report["checks"]["two GPUs"] = two_processes(folder, out, args.tiny)
    report["parts"] = [f.name for f in MemoryEstimate.__dataclass_fields__.values()]
    return report


def table(report: dict) -> str:
    rows = [f"device: {report['device']}", "| phase | seconds | peak allocated GB | peak reserved GB |",
            "|---|---|---|---|"]
    for name, p in report["phases"].items():
        rows.append(f"| {name} | {p['seconds']:.1f} | " + " | ".join(
            f"{p[k] / 1e9:.2f}" if k in p else "-" for k in ("allocated", "reserved")) + " |")
    e = report["estimate"]
    rows.append("estimate (GB): " + ", ".join(f"{k} {v / 1e9:.2f}" for k, v in e.items()))
    t = report["tflops"]
    rows.append(f"TFLOPS: {t['achieved']:.3g} achieved, {t['matmul_peak']:.3g} bf16 matmul peak "
                f"({t['achieved'] / t['matmul_peak']:.0%})")
    rows += ["| check | ok | detail |", "|---|---|---|"]
    rows += [f"| {name} | {'yes' if ok else 'NO'} | {detail} |" for name, (ok, detail) in report["checks"].items()]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--architecture", default="sd3.5-medium", help="sd3.5-medium, sd3.5-large or flux.1-dev")
    p.add_argument("--model", help="a local diffusers SD3 / FLUX folder instead of random weights")
    p.add_argument("--resolution", type=int, default=None, help="pixels (default: 512, the recipe's)")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu with --tiny")
    p.add_argument("--tiny", action="store_true", help="tiny random sizes: the code path in seconds")
    p.add_argument("--no-app", action="store_true", help="skip the app check")
    p.add_argument("--out", default="smoke", help="folder of the runs and report.json (default smoke/)")
    args = p.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA GPU is visible: nothing to smoke-test (--tiny --device cpu runs the code path)")
        return 0
    args.resolution = args.resolution or (None if args.tiny else 512)
    report = smoke(args)
    (Path(args.out) / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(table(report))
    return 0 if all(ok for ok, _ in report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
