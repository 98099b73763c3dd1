"""The README's memory table: estimated device memory of one training iteration of SD3.5 Medium, SD3.5 Large and
FLUX.1-dev at 512 and 1024 px (`workbench.train.memory`, docs/methods.md "Memory estimate"), built from their
published configs on the meta device, with the PickScore reward model and the CUDA allocator's reserve.
Estimates until measured on a GPU (scripts/gpu_smoke.py).

    python scripts/memory_table.py          # prints the Markdown table
"""

from __future__ import annotations

from dataclasses import replace

from workbench.train.dry_run import architecture_sizes
from workbench.train.memory import REWARD_MODEL_PARAMS, RunSizes, estimate_memory

# Flow-GRPO's one-GPU recipe (yifan123/flow_grpo config/grpo.py pickscore_sd3_1gpu): SD3.5-M, 512 px, 10 sampling
# steps (9 trained), CFG 4.5, 8 images per prompt, 16 prompts per epoch, batches of 8, LoRA r 32, bfloat16, KL
# the reward: PickScore (Flow-GRPO's pickscore_sd3_1gpu), a CLIP ViT-H/14 of 986 M parameters in float32
RECIPE = RunSizes(group=8, sampling_steps=10, trained_steps=9, prompts=16, transitions_per_pass=8, lora_rank=32,
                  weight_bytes=2, compute_bytes=2, checkpointing=True, kl=True, cfg=True, device="cuda",
                  reward_params=REWARD_MODEL_PARAMS["pickscore"])
MODELS = {"sd3.5-medium": "SD3.5 Medium", "sd3.5-large": "SD3.5 Large", "flux.1-dev": "FLUX.1-dev"}


def gb(x: float) -> str:
    return f"{x / 1e9:.1f}"


def main() -> None:
    print("| model | px | weights + buffers | text encoders | reward model | LoRA + AdamW | activations "
          "(checkpointing) | rollout | VAE decode | allocator reserve | total | total without checkpointing | "
          "total, full fine-tuning |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, label in MODELS.items():
        for px in (512, 1024):
            model = architecture_sizes(name, px)
            run = RECIPE if name != "flux.1-dev" else replace(RECIPE, cfg=False)  # FLUX.1-dev: guidance-distilled
            e = estimate_memory(model, run)
            plain = estimate_memory(model, replace(run, checkpointing=False))
            full = estimate_memory(model, replace(run, lora_rank=0))
            print(f"| {label} | {px} | {gb(e.weights + e.buffers)} | {gb(e.text_encoders)} | {gb(e.rewards)} | "
                  f"{gb(e.trainable)} | {gb(e.activations)} | {gb(e.rollout)} | {gb(e.vae)} | {gb(e.reserve)} | "
                  f"**{gb(e.total)}** | {gb(plain.total)} | {gb(full.total)} |")


if __name__ == "__main__":
    main()
