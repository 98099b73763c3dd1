"""The Learn tab: a guided walk on live numbers of one example group (docs/methods.md "Advantages",
"Objectives", "Monte-Carlo credit" and "Credit uncertainty").

`learn_walk` samples the group, explains what step GRPO and Chunk-GRPO push on each step
(`workbench.rl.explain`), measures the credit and streams one short paragraph and one figure per stage.
Every number in a paragraph is formatted from the objects the walk computed; the fixed texts (INTRO)
state no measurement.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path

import gradio as gr
import torch

from workbench.core.errors import WorkbenchError
from workbench.core.glossary import gloss
from workbench.rl.chunking import CHUNKERS
from workbench.rl.credit import Credit, Z
from workbench.rl.credit_stats import MISATTRIBUTED
from workbench.rl.explain import Explanation, explain
from workbench.rl.objectives import ObjectiveSettings
from workbench.rl.significance import false_call_rate
from workbench.ui import handlers, policies
from workbench.ui.guard import escape, guarded, ok
from workbench.ui.learn_exercise import exercise_section
from workbench.ui.progress import QUIET
from workbench.ui.reveal import reveal
from workbench.ui.state import BASE, LESSON, Session, format_sizes
from workbench.ui.timing import record
from workbench.ui.waits import timed
from workbench.ui.workbench import Workbench
from workbench.viz import explain_plots

LEARN_PROMPT = "a large red circle in the top left on a white background"
REAL_LEARN_PROMPT = "a photo of a red apple on a white table"  # of the shipped real prompts, for SD3 / FLUX
LEARN = {"group": 8, "steps": 16, "continuations": 4}  # the example: the papers' 16 steps, M=4 continuations

INTRO = """
### Why chunks? Two loaves of bread

Two bakers each bake a loaf in 16 steps. **Loaf A** comes out good, but its baker made one mistake:
the oven ran too hot for one step. **Loaf B** comes out worse, yet one of its steps was excellent.
Judge every step by the final loaf alone and you praise the too-hot oven of A and blame the excellent
step of B.

**Step GRPO judges steps this way.** Each image of a group gets one advantage
A = (reward - group mean) / group std, and every denoising step of that image is pushed up or down by
the same A.

**What the workbench measures.** From every intermediate state it samples M continuations and averages
their rewards: the value of that state. A step's *credit* is the value after the step minus the value
before it; the credits of one image add up to its reward minus the group mean. M continuations give
each credit a standard error: a cell is *misattributed* (marked x) when its credit is significantly
against the image's advantage, *aligned* (dot) when it is significantly with it, and *undetermined*
(grey) otherwise: there the continuations cannot tell the sign apart from noise. "Significantly" means
that a step with no credit at all would be called either way only 4.6 % of the time (a Student-t test:
an error estimated from four continuations is itself uncertain, so "two errors" would not be enough;
an exact test where a 0/1 reward makes the continuations tie).

**What chunking changes.** Chunk-GRPO (GCPO, arXiv 2510.21583) groups consecutive steps into chunks
and gives each chunk one importance ratio (the geometric mean of its steps' ratios). Summing credit over
a chunk can cancel opposite-sign steps, and the objective's push on a step changes with the size of its
chunk. The walk below shows both on a group sampled now.
"""


def set_claim() -> str:
    """The headline measured over the shipped set of groups (`learn_set`), or what is missing and how to remake it."""
    from workbench.ui.learn_set import claim_text, load_set

    try:
        return gloss(claim_text(load_set()), ("held-out",))
    except WorkbenchError as err:
        return f"*{err}*"


def learn_example(toy_world: bool) -> tuple[str, str]:
    """(prompt, reward spec) of the walk's example: the toy world's, or for a real model a shipped real prompt
    scored by the real model's default reward (the toy world's rewards and grammar never reach it)."""
    from workbench.rewards import default_reward

    return (LEARN_PROMPT, "adherence") if toy_world else (REAL_LEARN_PROMPT, default_reward(False))


def example_text(toy_world: bool = True, wb: Workbench | None = None) -> str:
    """What the button does, and how long it takes on this machine (`ui.timing`, measured here)."""
    from workbench.ui.timing import estimate, evaluations

    prompt, reward = learn_example(toy_world)
    evals = evaluations(LEARN["group"], LEARN["steps"], LEARN["continuations"])
    took = "" if wb is None else " (time: " + estimate(wb, evals) + ")"
    return (f"The button samples {LEARN['group']} images of *\"{prompt}\"* with the loaded model "
            f"({LEARN['steps']} steps), scores them with the `{reward}` reward, shows what step GRPO and "
            f"Chunk-GRPO push on each step, and measures credit with M={LEARN['continuations']} continuations per "
            f"state{took}. The group then also appears in the other tabs.")


def group_text(session: Session) -> str:
    """Stage 1: the group, its rewards and advantages."""
    r, a, g = session.rewards, session.advantages, session.group
    best, worst = int(a.argmax()), int(a.argmin())
    return (f"**1. The group and its advantages.** The model drew G={g.group_size} images in T={g.num_steps} "
            f"denoising steps each. The reward ranges from {float(r.min()):.3f} to {float(r.max()):.3f} (mean "
            f"{float(r.mean()):.3f}). GRPO turns each reward into one advantage: image {best} gets "
            f"A = {float(a[best]):+.2f}, image {worst} gets A = {float(a[worst]):+.2f}.")


def step_grpo_text(ex: Explanation, advantages: torch.Tensor) -> str:
    """Stage 2: step GRPO's push at ratio 1, one value per image."""
    g, t = ex.log_ratio.shape
    push = -ex.weight[ex.index("step_grpo")]  # (G, T)
    best, worst = int(advantages.argmax()), int(advantages.argmin())
    return (f"**2. What step GRPO pushes on each step.** At the first update of an iteration every ratio is 1, "
            f"so step GRPO's push on step t of image i is A(i) / (B T) with B = {g} images and T = {t} steps: "
            f"every step of image {best} is raised by {float(push[best, 0]):.4f}, every step of image {worst} "
            f"lowered by {-float(push[worst, 0]):.4f}. Each row of the map has one colour: good and bad steps of "
            "an image are pushed alike.")


def credit_text(credit: Credit, ex: Explanation) -> str:
    """Stage 3: the measured credit, its classes, and where it disagrees."""
    r = credit.rates(Z).step
    wrong = ((credit.step_classes(Z) == MISATTRIBUTED) & credit.step_valid).sum(1)  # (G,) misattributed steps
    corr = float(ex.correlation(credit.step_credit)[ex.index("step_grpo")])
    k = credit.continuation_rewards.shape[-1]
    return (f"**3. The measured credit, and where it disagrees.** With M={k} continuations from every state, "
            f"{r.determined_cells} of the {r.cells} (image, step) cells are determined (their credit differs from 0 "
            f"at a {100 * false_call_rate(Z):.1f} % false-call rate); among them "
            f"**{_pct(r.misattributed, r.misattributed_se)}** are misattributed "
            f"(x): the step moved the expected reward against the sign of the image's advantage. The grey cells are "
            f"within noise; counting every cell by its sign alone would give {_pct(r.plain, r.plain_se)}, pulled "
            f"towards a coin flip's 50 %. " + _worst_image_text(credit, wrong) + f" Over all cells, step GRPO's push "
            f"correlates with the credit at {corr:+.2f}." + _halves_text(credit))


def _worst_image_text(credit: Credit, wrong: torch.Tensor) -> str:
    """The image with the most misattributed steps, and what step GRPO does to them; or that there is none."""
    worst = int(wrong.argmax())
    n, a = int(wrong[worst]), float(credit.advantages[worst])
    if n == 0:
        return (f"No step of this group is determined against its image's advantage at M="
                f"{credit.continuation_rewards.shape[-1]}; the set of groups above finds such steps in most groups.")
    way = "raises" if a > 0 else "lowers"
    return (f"Image {worst} (A = {a:+.2f}) has {n} of its {credit.num_steps} steps misattributed: their credit "
            f"is {'negative' if a > 0 else 'positive'}, yet step GRPO {way} all {credit.num_steps} steps alike, "
            "these included.")


def _halves_text(credit: Credit) -> str:
    """How far the rate moves with the continuation noise: two disjoint halves of the continuations."""
    split = credit.halves()
    if split is None:
        return (" These ± are over images; measured again with other continuation noise, the rates move by "
                "several points more (docs/misattribution.md).")
    a, b = (half.step_rates(Z).misattributed for half in split)
    return (f" These ± are over images; the continuation noise moves the rate too: two disjoint halves of the "
            f"continuations (M={int(split[0].counts.max())} each) find {_pct(a, float('nan'))} and "
            f"{_pct(b, float('nan'))}.")


def _pct(value: float, se: float) -> str:
    if value != value:
        return "– (no determined cell)"
    return f"{100 * value:.0f} % ± {100 * se:.0f} %" if se == se else f"{100 * value:.0f} %"


def chunks_text(ex: Explanation, credit: Credit) -> str:
    """Stage 4: Chunk-GRPO's push pattern A / (K |c|) and the chunk credit."""
    sizes = ex.settings.chunks
    o = ex.index("chunk_grpo")
    best = int(credit.advantages.argmax())
    w = ex.weight[o, best]  # (T,)
    first, last = float(w[0]), float(w[-1])
    r = credit.rechunk(sizes).rates(Z).chunk
    corr = ex.correlation(credit.step_credit)
    return (f"**4. What chunks change.** With chunks {format_sizes(sizes)} Chunk-GRPO's push on a step is "
            f"A(i) / (B K |c|) at ratio 1 (B images, K = {len(sizes)} chunks of |c| steps): in image {best} a "
            f"step of the first chunk ({_steps(sizes[0])}) is "
            f"pushed {first / last:.1f} times as hard as a step of the last chunk ({_steps(sizes[-1])}). "
            f"Summed over chunks, the credit is determined in {r.determined_cells} of {r.cells} (image, chunk) "
            f"cells and disagrees with the advantage in **{_pct(r.misattributed, r.misattributed_se)}** of them "
            f"(x on the right). The push correlates with the step credit at "
            f"{float(corr[o]):+.2f} (step GRPO: {float(corr[ex.index('step_grpo')]):+.2f}). Other schedules, "
            "from the same measurement:\n\n" + schedule_table(credit) + "\n\n" + _against_set(credit, sizes))


def _against_set(credit: Credit, sizes: list[int]) -> str:
    """The example's step and chunk shares set against the shipped set of groups (`learn_set`)."""
    from workbench.ui.learn_set import example_against_set, load_set

    try:
        data = load_set()
    except WorkbenchError as err:
        return f"*{err}*"
    r = credit.rechunk(sizes).rates(Z)
    return example_against_set(r.step.misattributed, r.chunk.misattributed, format_sizes(sizes), data)


def _steps(n: int) -> str:
    return f"{n} step" + ("" if n == 1 else "s")


def schedule_table(credit: Credit) -> str:
    """Markdown table: chunk misattribution of the credit under several schedules (no new sampling)."""
    t = credit.num_steps
    rows = [("every step its own chunk (step GRPO)", [1] * t), ("GCPO temporal chunks", CHUNKERS.get("temporal")(t)),
            ("chunks of 4", CHUNKERS.get("uniform")(t, size=4)), ("one chunk (GSPO)", [t])]
    lines = ["| schedule | chunks | misattributed among determined | determined | plain sign rate |",
             "|---|---|---|---|---|"]
    for label, sizes in rows:
        r = credit.rechunk(sizes).rates(Z).chunk
        if r.by_construction:
            lines.append(f"| {label} | {format_sizes(sizes)} | 0 % *by construction* | {r.determined_cells} of "
                         f"{r.cells} | 0 % *by construction* |")
            continue
        lines.append(f"| {label} | {format_sizes(sizes)} | {_pct(r.misattributed, r.misattributed_se)} "
                     f"| {r.determined_cells} of {r.cells} | {_pct(r.plain, r.plain_se)} |")
    return "\n".join(lines) + "\n\n" + SCHEDULE_CAVEAT


SCHEDULE_CAVEAT = (
    "*Read the rows with care.* One chunk of all steps runs from the shared start noise to the image, so its "
    "credit is r - mean r, the raw advantage itself: it agrees with A by construction, and its 0 % says nothing "
    "about the policy. The other rows are not compared at equal power either, and this walk cannot make them "
    "so: they regroup the same continuations, and a bigger chunk adds up more credit against about the same "
    "error, so more of its cells are determined and the rate among them is taken over different cells. Compare "
    "the *determined* column before the rates; the misattribution experiment (docs/misattribution.md) gives "
    "their spread over continuation seeds.")


def invitation_text(session: Session) -> str:
    """Stage 5: where to go next."""
    return ("**5. Your turn** comes next, on a fresh group. Then open **Chunks** and click the curve to add or "
            f"remove boundaries of "
            f"{format_sizes(session.sizes)}: the classified chunk credit and the rates follow at once; in "
            "**Attribution**, *Refine* spends more continuations where cells are still grey. Open **Objectives** "
            "to see every objective the workbench trains with on this group, also after a few updates, when clipping "
            "switches off whole chunks at once.")


@guarded(12)
def learn_walk(wb: Workbench, session: Session, progress=gr.Progress()):
    """Learn button (streams) -> (gallery, 5 paragraphs with 4 figures between them, session, status)."""
    from workbench.flow.trajectory import SamplingConfig
    from workbench.rewards import build_reward
    from workbench.rl.credit import measure_credit

    skip = gr.skip()
    yield (skip,) * 10 + (skip, "… sampling the group")
    config = SamplingConfig(group=LEARN["group"], steps=LEARN["steps"], noise_level=0.7, seed=0)
    prompt, reward = learn_example(wb.policy(session.source).toy_world)
    session = handlers._sample(wb, prompt, config, reward, session, progress)
    if not bool(session.advantages.any()):
        raise WorkbenchError("every image of the example got the same reward, so GRPO has no signal to show; "
                             "try the Generate tab with another prompt")
    old = session.group.log_probs  # (G, T): at ratio 1 the policy is the sampling policy
    ex = explain(old, old, session.advantages, ObjectiveSettings(chunks=session.sizes), ["step_grpo", "chunk_grpo"],
                 step_mask=session.group.config.sde_mask().expand_as(old))
    waiting = f"Sampling M={LEARN['continuations']} continuations from every state to value it..."
    yield (handlers._gallery(session, short=True), group_text(session),
           explain_plots.advantage_figure(session.rewards, session.advantages),
           step_grpo_text(ex, session.advantages), explain_plots.push_figure(ex, "step_grpo", "Step GRPO's push "
                                                                             "−w at ratio 1: one value per image"),
           waiting, skip, skip, skip, skip, session, "… measuring credit")
    policy = wb.policy(session.source)
    with wb.batched_threads():
        credit = measure_credit(policy, session.group, build_reward(reward), continuations=LEARN["continuations"],
                                chunks=session.sizes, progress=handlers._tracker(progress, "continuations from state"))
    record(wb, credit)
    session = replace(session, credit=credit, reference=credit)  # Monte-Carlo: what cheap estimators are set against
    yield (skip,) * 5 + (credit_text(credit, ex), handlers.credit_plot(session), chunks_text(ex, credit),
                         explain_plots.chunk_push_figure(ex, credit, Z),
                         invitation_text(session), session, ok("example ready; it is also in the other tabs"))


LESSON_POINTER = """
### Then: a fine-tune you can see, and its credit before and after

The embedded model draws a cross as a blob or a ring. In **Fine-tune**, choose the lesson **crosses** and
press **Start**: every 10 iterations the same held-out cross prompts are drawn again with the same noise, so
**Before** and **Now** show what the fine-tune changed, and the plot below them follows the share of held-out
crosses drawn right, without and with the model's CFG (docs/crosses.md has the measured curve). The button
below samples a held-out cross prompt under the base model and under the lesson's newest checkpoint (before
you have run one: the lesson result shipped with the package), with the same noise, and measures both groups'
credit the same way: the **Before and after** view of **Attribution** (load a run with the picker at the top
to explore it in every tab).
"""
LESSON_CROSS = "a large yellow cross in the bottom right on a gray background"  # held out: never trained on


def after_estimate(wb: Workbench) -> str:
    """How long the Before and after button takes here: two groups, each sampled and measured."""
    from workbench.train import preset
    from workbench.ui.timing import estimate, evaluations

    steps = preset("crosses").sampling_config(1).steps
    return "Two groups sampled and measured; time: " + estimate(wb, 2 * evaluations(LEARN["group"], steps,
                                                                              LEARN["continuations"])) + "."


def lesson_run(wb: Workbench) -> str | None:
    """The newest crosses-lesson run on disk with a complete checkpoint (its folder), or None."""
    from workbench.train.store import list_runs

    for info in list_runs(wb.jobs.root):
        if info.config.get("task") != "crosses":
            continue
        try:
            wb.source(str(info.path))
        except WorkbenchError:  # no complete checkpoint yet
            continue
        return str(info.path)
    return None


@guarded(5)
def learn_after(wb: Workbench, session: Session, progress=gr.Progress()):
    """Closing stage -> (comparison figure, images, text, session, status): a held-out cross group under the base
    model and under the newest crosses lesson's checkpoint (on the embedded model before any lesson ran here:
    the lesson result shipped with the package), the same noise and measurement (`policies`)."""
    from workbench.train import preset
    from workbench.train.prompt_sets import is_pipeline_folder

    if is_pipeline_folder(wb.model_path):
        raise WorkbenchError(f"the crosses lesson is a lesson of the embedded model's toy world, and this app runs "
                             f"{Path(wb.model_path).name}, a real SD3 / FLUX model; start the app without --model to "
                             "take it")
    run = lesson_run(wb)
    if run is None and wb.model_path is not None:
        raise WorkbenchError("no crosses lesson with a checkpoint on disk yet: in Fine-tune choose the lesson "
                             "crosses and press Start (the tab says beforehand how long it takes on this machine), "
                             "then come back")
    keys = (wb.base_key(run), run) if run is not None else (BASE, LESSON)  # the shipped result
    lesson = preset("crosses")
    config = replace(lesson.sampling_config(1), group=LEARN["group"], seed=0)  # the lesson's window and steps
    comparison = policies.measure_both(wb, keys, LESSON_CROSS, config, lesson.reward,
                                       LEARN["continuations"], lesson.credit_chunks(), progress=progress)
    session = replace(session, comparison=comparison)
    figure, images, text = policies.comparison_panel(comparison, Z)
    rewards = [float(c.rewards.mean()) for c in comparison.credits]
    lead = (f"**{LESSON_CROSS}**, {LEARN['group']} images with the same noise: mean `{lesson.reward}` reward "
            f"{rewards[0]:.2f} under {comparison.labels[0]}, {rewards[1]:.2f} under {comparison.labels[1]}. Only the "
            f"lesson's trained steps (its SDE window, chunks {lesson.chunks}) count in the rates.\n\n")
    return figure, images, lead + text, session, ok(f"compared the base model and {escape(comparison.labels[1])}")


def learn_tab(wb: Workbench, session, shown: list, heavy: dict, demo: gr.Blocks | None = None) -> None:
    """The tab's page; after the walk, Generate's `shown` controls and views take the example group. With a real
    model the crosses lesson's part is not offered (the walk runs on a real prompt and reward)."""
    from workbench.train.prompt_sets import is_pipeline_folder

    toy = not is_pipeline_folder(wb.model_path)
    gr.Markdown(gloss(INTRO), elem_id="learn-intro")
    gr.Markdown(set_claim() if toy else "", elem_id="learn-claim", visible=toy)  # measured on the embedded model
    timed(demo, partial(example_text, toy, wb), "learn-example-text")  # written again at each page load
    run = gr.Button("Run the example", variant="primary", elem_id="learn-btn")
    status = gr.Markdown(elem_id="learn-status")
    gallery = gr.Gallery(label="The group (#image, reward r, advantage A)", columns=8, height=240, format="png",
                         elem_id="learn-gallery")
    stages = []
    for n in range(1, 5):
        stages += [gr.Markdown(elem_id=f"learn-text-{n}"), gr.Plot(label=f"Stage {n}", elem_id=f"learn-plot-{n}")]
    last = gr.Markdown(elem_id="learn-text-5")
    if toy:  # the exercises' fresh groups are the toy world's
        exercise_section(wb, session, heavy, demo)
    gr.Markdown(gloss(LESSON_POINTER, ("CFG",)), elem_id="learn-lesson", visible=toy)
    after = gr.Button("Before and after the crosses lesson", elem_id="learn-after-btn", visible=toy)
    timed(demo, partial(after_estimate, wb), "learn-after-estimate", visible=toy)
    after_status = gr.Markdown(elem_id="learn-after-status")
    after_text = gr.Markdown(elem_id="learn-after-text", visible=toy)
    after_plot = gr.Plot(label="A held-out cross group before and after", elem_id="learn-after-plot", visible=toy)
    after_images = gr.Image(label="Final images of both groups (the caption names each row)", type="pil",
                            format="png", elem_id="learn-after-images", visible=toy)
    run.click(partial(learn_walk, wb), [session], [gallery, *stages, last, session, status],
              api_name="learn_example", **heavy).then(
        partial(handlers.generate_view, wb), [session], shown, api_visibility="private", **QUIET).then(
        **reveal("learn-status"))  # the answer's line, with the group under it
    after.click(partial(learn_after, wb), [session], [after_plot, after_images, after_text, session, after_status],
                api_name="learn_after", **heavy).then(**reveal("learn-after-status"))
