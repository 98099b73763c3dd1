"""Handlers of the Generate, Attribution and Chunks tabs: short functions that call the library.

Each handler is a plain function `fn(wb, *inputs, session, progress=gr.Progress())` returning its
outputs as a tuple whose last item is the status Markdown (see `guard.guarded`); the layout binds `wb`
(the shared `Workbench`) with functools.partial. Tests call them directly.
"""

from __future__ import annotations

from dataclasses import replace

import gradio as gr

from workbench.core.errors import WorkbenchError
from workbench.core.fields import LIMITS
from workbench.core.imaging import speckle, to_pil
from workbench.flow.pictures import x0_filmstrip
from workbench.flow.trajectory import SamplingConfig
from workbench.rl.chunking import (
    CHUNKERS,
    chunk_boundaries,
    chunker_info,
    is_chunker_spec,
    merge_at,
    parse_chunk_spec,
    schedule,
    split_at,
    toggle_boundary,
)
from workbench.rl.credit import Z
from workbench.ui.classroom import held
from workbench.ui.figures import clicked_point
from workbench.ui.guard import cancel_check, escape, guarded, limited, noise, number, ok, parse_window, whole_number
from workbench.ui.state import Session, format_sizes
from workbench.ui.timing import record
from workbench.ui.workbench import Workbench
from workbench.viz import credit_view, plots
from workbench.viz.chunk_map import chunk_map_hint, chunk_map_html
from workbench.viz.dynamics_svg import dynamics_html

CHUNK_MAP_HINT = "measure credit in the Attribution tab to classify the chunks"  # the Chunks tab's map before credit
FILM_STEPS = 16  # most filmstrip columns: evenly spaced steps, the last one included
REFINE_BUDGET_MAX = LIMITS["budget"].high  # continuations one Refine press may spend (~20 default measurements)
THUMB = 64  # filmstrip cells larger than this (real models decode 512-1024 px) are shrunk to it


def _tracker(progress, label: str):
    """A library progress callback (done, total) that drives a gr.Progress bar and stops the work (raises
    `Cancelled`) once the event was cancelled."""
    check = cancel_check()

    def report(done: int, total: int) -> None:
        check()
        progress(done / max(total, 1), desc=f"{label} {done}/{total}")
    return report


def _sample(wb: Workbench, prompt: str, config: SamplingConfig, reward_spec: str, session: Session, progress):
    """Sample and score a group; returns the new session."""
    from workbench.flow.sampler import sample_group
    from workbench.rewards import build_reward, default_reward
    from workbench.rl.advantages import ADVANTAGES

    if config.group < 2:
        raise WorkbenchError("group size must be at least 2: advantages compare images of the same prompt")
    if reward_spec and reward_spec.strip():
        build_reward(reward_spec)  # a bad spec is refused before the model loads
    policy = wb.policy(session.source)
    policy.check_prompt(prompt)
    reward_spec = reward_spec.strip() if reward_spec and reward_spec.strip() else default_reward(policy.toy_world)
    reward_fn = build_reward(reward_spec)
    reward_fn.check_images(policy.image_size, [prompt.strip()], policy.toy_world)  # before sampling: can it score them?
    group = sample_group(policy, prompt.strip(), config, progress=_tracker(progress, "sampling step"))
    rewards = reward_fn(group.images, [group.prompt] * group.group_size)  # (G,)
    advantages = ADVANTAGES.get("grpo")(rewards[None]).values[0]  # (G,)
    return session.with_group(group, reward_spec, rewards, advantages)


def _gallery(session: Session, short: bool = False) -> list[tuple]:
    """[(PIL image, caption)] of the group's final images; small images are enlarged to about 128 px.

    Captions fit their thumbnail (a gallery cuts longer ones): "#i reward r, A a, speckle s", or with
    short=True (Learn's eight columns) "#i r r, A a"."""
    images = session.group.images  # (G, 3, H, W)
    scale = max(1, 128 // images.shape[-1])
    noise = speckle(images)  # (G,)
    return [(to_pil(img, scale), f"#{i} r {float(r):.3f}, A {float(a):+.2f}" if short else
             f"#{i} reward {float(r):.3f}, A {float(a):+.2f}, speckle {float(n):.3f}")
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
    config = SamplingConfig(group=limited(group, "group", "group size"), steps=limited(steps, "steps"),
                            noise_level=noise(noise_level), seed=whole_number(seed, "seed", 0), sde=sde or "",
                            window=parse_window(window))
    held(wb, group=config.group, steps=config.steps)  # class mode: the teacher's caps
    session = _sample(wb, prompt or "", config, reward_spec, session, progress)
    group = session.group
    figure = plots.logprob_figure(group.log_probs, session.rewards, group.stds)
    note = (f"sampled G={group.group_size} trajectories of T={group.num_steps} steps for '{escape(group.prompt)}', "
            f"scored with `{session.reward_spec}`")  # a spec build_reward accepted: names and numbers only
    cleared = plots.empty_figure("Step credit", "measure credit for the new group")
    strip = _filmstrip(wb.policy(session.source), group)
    return _gallery(session), strip, figure, cleared, rates_markdown(session), session, ok(note)


@guarded(12)
def generate_view(wb: Workbench, session: Session):
    """The session's group (from Learn or a shared link) shown in Generate -> (prompt, G, T, noise, seed,
    reward, sde, window controls set to the group's settings, gallery, filmstrip, log-prob figure, status)."""
    group = session.group
    if group is None:
        raise WorkbenchError("no group yet: generate one, or run the example in Learn")
    c = group.config
    window = f"{c.window[0]},{c.window[1]}" if c.window is not None else ""
    figure = plots.logprob_figure(group.log_probs, session.rewards, group.stds)
    strip = _filmstrip(wb.policy(session.source), group)
    return (group.prompt, c.group, c.steps, c.noise_level, c.seed, session.reward_spec, c.sde, window,
            _gallery(session), strip, figure,
            ok(f"the group of G={c.group} trajectories of T={c.steps} steps for '{escape(group.prompt)}'"))


def rates_markdown(session: Session) -> str:
    """The significance-aware rates of steps and chunks (and the plain sign rate), as Markdown."""
    if session.credit is None:
        return "Measure credit in the **Attribution** tab to see misattribution rates for this schedule."
    return credit_view.rates_text(session.credit, session.z, session.reference)


def credit_plot(session: Session):
    return credit_view.attribution_figure(session.credit, session.z)


def chunk_plot(session: Session) -> str:
    """The Chunks tab's classified chunk map (HTML, viz/chunk_map.py), or a hint before any credit exists."""
    if session.credit is None:
        return chunk_map_hint(CHUNK_MAP_HINT)
    return chunk_map_html(session.credit, session.z)


def _z(value) -> float:
    z = number(value, "z (sets the false-call rate)")
    if z < 0:
        raise WorkbenchError(f"z (sets the false-call rate) must be >= 0, got {z:g}")
    return z


@guarded(4)
def attribute(wb: Workbench, continuations: float, session: Session, estimator: str = "mc", crn: bool = True,
              z: float = Z, precision: str = "auto", progress=gr.Progress()):
    """Attribution tab -> (credit heatmap, rates Markdown, session, status).

    estimator: an ESTIMATORS name (M continuations per state, or one look-ahead per state, M unused); crn: common
    random numbers across a trajectory's continuations; precision: the continuations' numerics
    (core/precision.py)."""
    from workbench.rewards import build_reward
    from workbench.rl.credit import measure_credit
    from workbench.rl.credit_estimators import ESTIMATORS

    if session.group is None:
        raise WorkbenchError("no group yet: generate one in the Generate tab first")
    k, z = limited(continuations, "continuations", "continuations (M)"), _z(z)
    estimator = estimator or "mc"
    info = ESTIMATORS.info(estimator)  # an unknown name: the message lists the valid ones
    held(wb, continuations=k)  # class mode: the teacher's caps
    group, policy = session.group, wb.policy(session.source)
    with wb.batched_threads():
        credit = measure_credit(policy, group, build_reward(session.reward_spec), continuations=k, chunks=session.sizes,
                                seed=group.config.seed, estimator=estimator, crn=bool(crn),
                                progress=_tracker(progress, "continuations from state"), precision=precision or "auto")
    record(wb, credit)  # this machine's rate, from the measurement's own seconds (`ui.timing`, the time lines)
    reference = session.reference if credit.deterministic else credit
    session = replace(session, credit=credit, reference=reference, z=z)
    what = f"M={k} continuations" if info.continuations else f"the {escape(estimator)} estimator"
    if info.transformer:  # an estimator that evaluates no transformer (x0) has the sampler's numerics
        what += f" in {credit.precision}"
    seconds = credit.cost.get("seconds", 0.0)
    return credit_plot(session), rates_markdown(session), session, ok(f"measured credit with {what} ({seconds:.1f} s)")


def _batched(wb: Workbench, rounds):
    """The items of `rounds`, each computed under `wb.batched_threads()` in the thread that asks for it."""
    while True:
        with wb.batched_threads():
            item = next(rounds, None)
        if item is None:
            return
        yield item


@guarded(4)
def refine_credit(wb: Workbench, budget: float, session: Session, z: float = Z, progress=gr.Progress()):
    """Refine button (streams after every round) -> (heatmap, rates, session, status)."""
    from workbench.rewards import build_reward
    from workbench.rl.credit import refine_rounds

    credit = session.credit
    if credit is None:
        raise WorkbenchError("no credit yet: press Measure credit first")
    n, z = whole_number(budget, "budget (continuations)", 1), _z(z)
    if n > REFINE_BUDGET_MAX:
        raise WorkbenchError(f"budget (continuations) is at most {REFINE_BUDGET_MAX} per press (got {n}); "
                             "press Refine again to spend more")
    held(wb, refine_budget=n)
    before = credit.rates(z).step.determined
    track = _tracker(progress, "continuations")
    reward_fn = build_reward(session.reward_spec)
    rounds = refine_rounds(credit, wb.policy(session.source), session.group, reward_fn, n, z, track)
    latest = session = replace(session, z=z)
    for refined in _batched(wb, rounds):
        latest = replace(session, credit=refined, reference=refined)
        spent = int((refined.counts - credit.counts).sum())
        yield credit_plot(latest), rates_markdown(latest), latest, f"… refining: {spent}/{n} continuations spent"
    if latest is session:
        undetermined = credit.rates(z).step.determined < 1 or credit.rates(z).chunk.determined < 1
        note = ("no undetermined cell can be refined: what is left depends only on the shared start and the "
                "final rewards, which more continuations do not change" if undetermined
                else "every cell is determined: nothing to refine")
        yield credit_plot(session), rates_markdown(session), session, ok(note)
        return
    after = latest.credit.rates(z).step.determined
    yield gr.skip(), gr.skip(), latest, ok(f"refined with {spent} continuations: determined steps "
                                           f"{100 * before:.0f} % -> {100 * after:.0f} %")


@guarded(4)
def attribution_z(wb: Workbench, z: float, session: Session):
    """z changed -> the same credit classified again (no sampling)."""
    session = replace(session, z=_z(z))
    if session.credit is None:
        return gr.skip(), gr.skip(), session, ""
    return credit_plot(session), rates_markdown(session), session, ok(f"classified at z = {session.z:g}")


def curve_plot(wb: Workbench, session: Session) -> str:
    """The Chunks tab's temporal-dynamics curve under the session's chunks (HTML, viz/dynamics_svg.py); the curve of
    its T is computed once (`Workbench.curve`)."""
    curve = wb.curve(session.steps, _noise(session), session.source)
    low, high = curve.quantiles  # (T,) each
    return dynamics_html(curve.mean, low, high, session.sizes, curve.per_trajectory.shape[0], wb.curve_prompts)


def _noise(session: Session) -> float:
    return session.group.config.noise_level if session.group is not None else 0.7


def _edit(wb: Workbench, session: Session, make_sizes, what: str) -> tuple:
    """Apply one schedule edit -> (curve, chunk credit map, spec text, rates, session, status); an invalid edit raises
    and the last valid schedule stays. The step slider is left where it is."""
    try:
        sizes = parse_chunk_spec(make_sizes(session.steps), session.steps)
    except WorkbenchError as err:
        raise WorkbenchError(f"{err} (kept the last valid chunks {format_sizes(session.sizes)})") from None
    session = session.with_sizes(sizes)
    return (curve_plot(wb, session), chunk_plot(session), format_sizes(sizes), rates_markdown(session), session,
            ok(f"{what}: chunks {format_sizes(sizes)}"))


@guarded(3)
def attribution_view(wb: Workbench, session: Session):
    """Attribution tab opened -> (heatmap, rates, status) under the session's current chunks (the rates name them).
    The status is left alone, and without credit everything is: this reply can land after that of a Measure credit
    pressed right after opening the tab, and would wipe its message ("no group yet" vanished so in one browser test
    run, under an empty status; a "chunks ..." status could hide an error in the same way)."""
    if session.credit is None:
        return gr.skip(), gr.skip(), gr.skip()
    return credit_plot(session), rates_markdown(session), gr.skip()


@guarded(2)
def chunks_view(wb: Workbench, session: Session):
    """Chunks tab opened -> (slider, status): computes the temporal-dynamics curve of the session's T (its first
    computation for a T takes a while) and gives the slider the range 1..T-1. The views follow in `chunks_shown`,
    which reads the session once the curve is there and never returns it, so an edit made meanwhile is kept. (This
    handler used to return the session it was given, and its reply, landing after such an edit's, put the old
    schedule back.) Which of the two replies the page shows last is still a race when the edit waited for the
    curve too: under load the views could show the schedule of the tab's opening; the next edit or opening shows
    the session's."""
    t = session.steps
    wb.curve(t, _noise(session), session.source)
    return step_slider(t), gr.skip()


def step_slider(t: int) -> gr.Slider:
    """The Chunks tab's step slider for T steps: the steps a chunk can start at, 1..T-1. Gradio refuses a slider
    whose minimum is not below its maximum, so at T = 2 (one such step) it shows 0..1 at 1, fixed."""
    if t <= 2:
        return gr.Slider(minimum=0, maximum=1, value=1, step=1, interactive=False)
    return gr.Slider(minimum=1, maximum=t - 1, value=t // 2, step=1, interactive=True)


@guarded(5)
def chunks_shown(wb: Workbench, session: Session):
    """After `chunks_view` -> (curve, chunk credit map, spec text, rates, status) of the session's schedule as
    it is now. The session is not an output: this only shows it. The Attribution heatmap is redrawn when that tab
    opens (`attribution_view`), keeping edits fast."""
    return (curve_plot(wb, session), chunk_plot(session), format_sizes(session.sizes), rates_markdown(session),
            ok(f"chunks {format_sizes(session.sizes)} over T={session.steps} steps"))


@guarded(6)
def chunks_from_spec(wb: Workbench, spec: str, session: Session):
    """Typed sizes such as "2,3,4,7", or a chunker such as "uniform:size=4" (cut by the model's curve)."""
    def make(t: int):
        if not is_chunker_spec(spec):
            return spec if spec is not None else ""
        return schedule(spec, t, wb.curve(t, _noise(session), session.source).mean)
    return _edit(wb, session, make, "typed")


@guarded(6)
def chunks_from_chunker(wb: Workbench, name: str, option: float, session: Session):
    """A chunker of the menu with its one option (its ChunkerInfo names the option and its minimum)."""
    chunker, key = CHUNKERS.get(name), chunker_info(name).option()
    options = {} if key is None else {key.name: whole_number(option, f"the {name} option ({key.name})", key.minimum)}

    def make(t: int) -> list[int]:
        return chunker(t, wb.curve(t, _noise(session), session.source).mean, **options)
    return _edit(wb, session, make, f"{name} chunker")


@guarded(6)
def chunks_split(wb: Workbench, step: float, session: Session):
    """Split button: a new chunk starts at the slider's step."""
    at = whole_number(step, "step", 1)  # chunks start at steps 1..T - 1
    return _edit(wb, session, lambda t: split_at(session.sizes, at), f"a new chunk starts at step {at}")


@guarded(6)
def chunks_merge(wb: Workbench, step: float, session: Session):
    """Merge button: the boundary at the slider's step goes away."""
    at = whole_number(step, "step", 1)  # chunks start at steps 1..T - 1
    return _edit(wb, session, lambda t: merge_at(session.sizes, at),
                 f"merged the chunk starting at step {at} into the one before")


@guarded(6)
def chunks_toggle(wb: Workbench, point, session: Session):
    """A click on the curve at step t (or an API call with t): toggle the boundary after step t."""
    after = whole_number(clicked_point(point)["x"], "clicked step", 0)
    verb = "removed" if after + 1 in chunk_boundaries(session.sizes) else "added"
    return _edit(wb, session, lambda t: toggle_boundary(session.sizes, after),
                 f"{verb} the boundary after step {after}")


def curve_clicked(wb: Workbench):
    """The listener of the curve's `toggle` event (ui/figures.py): `chunks_toggle` at the clicked step, which the
    event's data carries (a gr.EventData parameter, which Gradio fills by its annotation)."""
    def toggle(session: Session, evt: gr.EventData):
        return chunks_toggle(wb, getattr(evt, "step", None), session)
    return toggle
