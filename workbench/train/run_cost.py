"""The transformer work a fine-tuning run does, counted from its TrainConfig before it starts.

A run's time is nearly all transformer passes (docs/performance.md: the rewards, the optimizer and the saving are a
few per cent of an iteration on the embedded model). They are counted in two units whose times the app measures on
its machine (`ui.timing`): an image evaluation (one forward pass of one image, without gradient) and a trained
transition (one image-step scored with gradient: a forward, a backward and its share of the optimizer step).

    iteration  = rollout: N prompts x G trajectories x (T + 1) sampling steps         image evaluations
               + update: inner epochs x N x G x trained steps                          trained transitions
               + KL reference (kl_beta > 0): one evaluation per trained transition     image evaluations
    evaluation = held-out prompts x (T + 1) ODE steps, once unguided, once more at the model's CFG (eval_cfg)

a classifier-free-guided pass counting twice (conditional and unconditional; a guidance-distilled FLUX makes one,
so its eval_cfg is counted high). Evaluations come before training,
every eval_every iterations and at the last (the count the running ETA, `ui.eta`, makes too).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.train.config import TrainConfig


@dataclass
class RunWork:
    """What a run computes, summed over its iterations."""

    sampled: int  # image evaluations of the rollouts and the KL reference (no gradient)
    trained: int  # trained transitions of the updates (a forward and a backward each)
    evaluated: int  # image evaluations of the held-out evaluations
    evaluations: int  # held-out evaluations made (before training, every eval_every iterations, at the last)
    uncounted: list[str] = field(default_factory=list)  # work that depends on the run's own numbers: not counted


def evaluations_left(done: int, total: int, eval_every: int | None) -> int:
    """Held-out evaluations after iteration `done`: at every multiple of eval_every and at the last iteration (the
    trainer's rule; the running ETA counts them from the run's iteration, `ui.eta`)."""
    if not eval_every or eval_every < 1:
        return 0
    return sum(1 for it in range(done + 1, total + 1) if it % eval_every == 0 or it == total)


def evaluations_made(iterations: int, eval_every: int, eval_prompts: int) -> int:
    """Held-out evaluations of a run: the one before training and `evaluations_left` from its start."""
    if eval_prompts < 1:
        return 0
    return 1 + evaluations_left(0, iterations, eval_every)


def run_work(config: TrainConfig) -> RunWork:
    """The work of `config` from its start to its last iteration."""
    guided = 2 if config.guidance_scale != 1.0 else 1  # a CFG pass: conditional and unconditional
    groups, steps = config.prompts_per_iteration * config.group, config.sampling_steps
    trained = sum(len(config.trained_steps(it)) for it in range(1, config.iterations + 1))  # MixGRPO's window moves
    transitions = config.inner_epochs * groups * trained * guided  # (iterations x N x G x S) over the epochs
    sampled = config.iterations * groups * steps * guided + (transitions if config.kl_beta > 0 else 0)
    held_out = len(config.held_out_prompts())  # the first eval_prompts: none when it is 0
    per_evaluation = held_out * steps * (guided + (2 if config.eval_cfg else 0))  # eval_cfg: at the model's CFG
    made = evaluations_made(config.iterations, config.eval_every, held_out)
    uncounted = []
    if config.refills:
        uncounted.append("the rounds sampled again to replace flat groups")
    if config.objective in ("ppo", "dense_grpo"):
        uncounted.append("ppo's critic" if config.objective == "ppo" else "dense_grpo's look-ahead")
    return RunWork(sampled, transitions, made * per_evaluation, made, uncounted)
