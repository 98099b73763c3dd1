"""Handlers of the Generate, Attribution and Chunks tabs: short functions that call the library.

Each handler is a plain function `fn(wb, *inputs, session, progress=gr.Progress())` returning its
outputs as a tuple whose last item is the status Markdown (see `guard.guarded`); the layout binds `wb`
(the shared `Workbench`) with functools.partial. Tests call them directly.
"""

from __future__ import annotations

from dataclasses import replace

import gradio as gr

from workbench.core.errors import WorkbenchError
from workbench.core.imaging import speckle, to_pil
from workbench.flow.pictures import x0_filmstrip
from workbench.flow.trajectory import SamplingConfig
from workbench.rl.chunking import CHUNKERS, chunk_boundaries, parse_chunk_spec
from workbench.ui import plots
from workbench.ui.clicks import clicked_point
from workbench.ui.guard import escape, guarded, number, ok, parse_window, whole_number
from workbench.ui.state import Session, format_sizes, merge_at, split_at, toggle_boundary
from workbench.ui.workbench import Workbench

CHUNKER_OPTION = {"uniform": "size", "adaptive": "max_size", "equal_mass": "num_chunks", "temporal": None}
FILM_STEPS = 16  # most filmstrip columns: evenly spaced steps, the last one included
THUMB = 64  # filmstrip cells larger than this (real models decode 512-1024 px) are shrunk to it


def _tracker(progress, label: str):
    """A library progress callback (done, total) that drives a gr.Progress bar."""
    def report(done: int, total: int) -> None:
        progress(done / max(total, 1), desc=f"{label} {done}/{total}")
    return report


def _sample(wb: Workbench, prompt: str, config: SamplingConfig, reward_spec: str, session: Session, progress):
    """Sample and score a group; returns the new session."""
    from workbench.flow.sampler import sample_group
    from workbench.rewards import build_reward
    from workbench.rl.advantages import ADVANTAGES

    if config.group < 2:
        raise WorkbenchError("group size must be at least 2: advantages compare images of the same prompt")
    reward_fn = build_reward(reward_spec)
    policy = wb.policy()
    policy.check_prompt(prompt)
    group = sample_group(policy, prompt.strip(), config, progress=_tracker(progress, "sampling step"))
    rewards = reward_fn(group.images, [group.prompt] * group.group_size)  # (G,)
    advantages = ADVANTAGES.get("grpo")(rewards[None]).values[0]  # (G,)
    return session.with_group(group, reward_spec, rewards, advantages)


def _gallery(session: Session) -> list[tuple]:
    """[(PIL image, caption)] of the group's final images; small images are enlarged to about 128 px."""
    images = session.group.images  # (G, 3, H, W)
    scale = max(1, 128 // images.shape[-1])
    noise = speckle(images)  # (G,)
    return [(to_pil(img, scale), f"traj {i}: reward {float(r):.3f}, A {float(a):+.2f}, speckle {float(n):.3f}")
            for i, (img, r, a, n) in enumerate(zip(images, session.rewards, session.advantages, noise))]


def _filmstrip(policy, group):
    """The group's x0 filmstrip as the Generate tab shows it: at most FILM_STEPS columns of THUMB-pixel cells."""
    return x0_filmstrip(policy, group, max_columns=FILM_STEPS, thumb=THUMB)


@guarded(7)
def generate(wb: Workbench, prompt: str, group: float, steps: float, noise_level: float, seed: float,
             reward_spec: str, session: Session, sde: str = SamplingConfig.sde, window: str = "",
             progress=gr.Progress()):
    """Generate tab -> (gallery [(image, caption)], x0 filmstrip, log-prob figure, cleared credit heatmap,
    rates, session, status). `window` is "START,END" (the SDE's steps; ODE elsewhere) or empty for all."""
    config = SamplingConfig(group=whole_number(group, "group size", 1), steps=whole_number(steps, "steps", 1),
                            noise_level=number(noise_level, "noise level"), seed=whole_number(seed, "seed", 0),
                            sde=sde or "", window=parse_window(window))
    session = _sample(wb, prompt or "", config, reward_spec, session, progress)
    group = session.group
    figure = plots.logprob_figure(group.log_probs, session.rewards)
    note = f"sampled G={group.group_size} trajectories of T={group.num_steps} steps for '{escape(group.prompt)}'"
    cleared = plots.empty_figure("Step credit", "measure credit for the new group")
    strip = _filmstrip(wb.policy(), group)
    return _gallery(session), strip, figure, cleared, rates_markdown(session), session, ok(note)


def rates_markdown(session: Session) -> str:
    """Step and chunk misattribution rates with their bootstrap errors, as Markdown."""
    credit = session.credit
    if credit is None:
        return "Measure credit in the **Attribution** tab to see misattribution rates for this schedule."
    m = credit.misattribution()
    g, k = credit.branch_rewards.shape[0], credit.branch_rewards.shape[-1]
    return (f"**Step misattribution:** {100 * m['step_misattribution']:.1f} % ± "
            f"{100 * m['step_misattribution_se']:.1f} % of (trajectory, step) cells  \n"
            f"**Chunk misattribution:** {100 * m['chunk_misattribution']:.1f} % ± "
            f"{100 * m['chunk_misattribution_se']:.1f} % of (trajectory, chunk) cells, chunks {credit.sizes}  \n"
            f"G={g}, T={credit.num_steps}, K={k} continuations per state; ± is the bootstrap standard error "
            "over the continuations. Trajectories with advantage 0 are left out.")


def credit_plot(session: Session):
    credit = session.credit
    return plots.credit_figure(credit.step_credit, credit.advantages, credit.misattributed_steps(), credit.sizes)


@guarded(4)
def attribute(wb: Workbench, branches: float, session: Session, progress=gr.Progress()):
    """Attribution tab -> (credit heatmap, rates Markdown, session, status)."""
    from workbench.rewards import build_reward
    from workbench.rl.credit import measure_credit

    if session.group is None:
        raise WorkbenchError("no group yet: generate one in the Generate tab first")
    k = whole_number(branches, "branches (K)", 1)
    group = session.group
    credit = measure_credit(wb.policy(), group, build_reward(session.reward_spec), branches=k, chunks=session.sizes,
                            seed=group.config.seed, progress=_tracker(progress, "continuations from state"))
    session = replace(session, credit=credit)
    return credit_plot(session), rates_markdown(session), session, ok(f"measured credit with K={k} continuations")


def _chunk_outputs(wb: Workbench, session: Session, note: str, slider=None) -> tuple:
    """(curve figure, spec text, slider update, rates, session, status) for the current schedule.

    The slider is only reset (to the range 1..T-1 of a new group) when the tab opens, not on every edit.
    The Attribution heatmap is redrawn when that tab opens (`attribution_view`), keeping edits fast."""
    t = session.steps
    noise = session.group.config.noise_level if session.group is not None else 0.7
    curve = wb.curve(t, noise)
    low, high = curve.quantiles  # (T,) each
    figure = plots.dynamics_figure(curve.mean, low, high, session.sizes, curve.per_trajectory.shape[0])
    slider = gr.skip() if slider is None else slider
    return figure, format_sizes(session.sizes), slider, rates_markdown(session), session, ok(note)


def _edit(wb: Workbench, session: Session, make_sizes, what: str) -> tuple:
    """Apply one schedule edit; an invalid one raises and the last valid schedule stays."""
    try:
        sizes = parse_chunk_spec(make_sizes(session.steps), session.steps)
    except WorkbenchError as err:
        raise WorkbenchError(f"{err} (kept the last valid chunks {format_sizes(session.sizes)})") from None
    return _chunk_outputs(wb, session.with_sizes(sizes), f"{what}: chunks {format_sizes(sizes)}")


@guarded(3)
def attribution_view(wb: Workbench, session: Session):
    """Attribution tab opened -> (heatmap, rates, status) under the session's current chunks."""
    if session.credit is None:
        return gr.skip(), gr.skip(), ""
    return credit_plot(session), rates_markdown(session), ok(f"chunks {format_sizes(session.sizes)}")


@guarded(6)
def chunks_view(wb: Workbench, session: Session):
    """Chunks tab opened -> the curve and rates for the session's current schedule."""
    t = session.steps
    slider = gr.Slider(minimum=1, maximum=max(t - 1, 1), value=max(t // 2, 1), step=1, interactive=t > 1)
    return _chunk_outputs(wb, session, f"chunks {format_sizes(session.sizes)} over T={t} steps", slider)


@guarded(6)
def chunks_from_spec(wb: Workbench, spec: str, session: Session):
    """Typed sizes such as "2,3,4,7"."""
    return _edit(wb, session, lambda t: spec if spec is not None else "", "typed")


@guarded(6)
def chunks_from_chunker(wb: Workbench, name: str, option: float, session: Session):
    """A chunker (uniform, temporal, adaptive, equal_mass) with its one option."""
    chunker = CHUNKERS.get(name)
    key = CHUNKER_OPTION.get(name)
    options = {} if key is None else {key: whole_number(option, f"the {name} option ({key})", 1)}

    def make(t: int) -> list[int]:
        noise = session.group.config.noise_level if session.group is not None else 0.7
        return chunker(t, wb.curve(t, noise).mean, **options)
    return _edit(wb, session, make, f"{name} chunker")


@guarded(6)
def chunks_split(wb: Workbench, step: float, session: Session):
    """Split button: a new chunk starts at the slider's step."""
    at = whole_number(step, "step", 0)
    return _edit(wb, session, lambda t: split_at(session.sizes, at), f"split at step {at}")


@guarded(6)
def chunks_merge(wb: Workbench, step: float, session: Session):
    """Merge button: the boundary at the slider's step goes away."""
    at = whole_number(step, "step", 0)
    return _edit(wb, session, lambda t: merge_at(session.sizes, at), f"merged at step {at}")


@guarded(6)
def chunks_toggle(wb: Workbench, point, session: Session):
    """A click on the curve at step t (or an API call with t): toggle the boundary after step t."""
    after = whole_number(clicked_point(point)["x"], "clicked step", 0)
    verb = "removed" if after + 1 in chunk_boundaries(session.sizes) else "added"
    return _edit(wb, session, lambda t: toggle_boundary(session.sizes, after),
                 f"{verb} the boundary after step {after}")
