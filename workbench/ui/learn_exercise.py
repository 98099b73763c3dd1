"""Learn's "your turn" exercises on a fresh group: mark the cells you expect to be misattributed, then predict
which chunk schedule lowers the misattributed share; each answer is then measured (docs/methods.md
"Monte-Carlo credit", "Credit uncertainty").

The fresh group is sampled with a seed the student can change; its credit is measured only when the student
asks for the answer, with the example's M, so the marks are made before anything is known. The exercise keeps
its own `Session` in a `gr.State`: the session's group, credit and comparison in the other tabs are left alone.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import gradio as gr
import pandas as pd

from workbench.core.errors import WorkbenchError
from workbench.core.glossary import gloss
from workbench.rl.credit import Z
from workbench.rl.credit_stats import ALIGNED, MISATTRIBUTED
from workbench.ui import handlers
from workbench.ui.guard import escape, guarded, ok
from workbench.ui.learn_set import EXAMPLE_M, SCHEDULES, figure, load_set, schedule_sizes
from workbench.ui.reveal import reveal
from workbench.ui.state import Session, format_sizes
from workbench.ui.timing import estimate, evaluations, record
from workbench.ui.waits import timed
from workbench.ui.workbench import Workbench
from workbench.viz import credit_view

EXERCISE_PROMPT = "a small blue ring in the center on a black background"  # not the example's prompt
EXERCISE = {"group": 8, "steps": 16}  # the example's G and T; M is the example's (EXAMPLE_M)
CHOICES = ["step", "uniform4", "temporal"]  # one chunk of all steps is left out: it agrees with A by construction
INSTRUCTIONS = f"""
### Your turn

**1. Mark the cells.** Press *Sample a fresh group*: {EXERCISE['group']} new images of *"{EXERCISE_PROMPT}"*, their
advantages and their x0 predictions along the {EXERCISE['steps']} steps (one row per image). In the table, tick the
(image, step) cells where you expect the step to have worked **against** its image's advantage: a step that made a
good image (A > 0) worse, or a bad one (A < 0) better. Then press *Check my marks*: the group's credit is measured
(M={EXAMPLE_M} continuations per state) and your marks are scored against it.

**2. Predict the schedule.** Which chunk schedule gives the lowest share of misattributed cells on this group? Pick
one and press *Check my prediction*: the same measurement is summed under each schedule.
"""


def _table(session: Session, marks=None) -> pd.DataFrame:
    """The marking table: one row per image (its label and advantage), one tick box per step."""
    g = session.group
    columns = [f"t={t}" for t in range(g.num_steps)]
    rows = [[f"#{i} A {float(a):+.2f}", *([False] * g.num_steps)] for i, a in enumerate(session.advantages)]
    frame = pd.DataFrame(rows, columns=["image", *columns])
    if marks is not None:
        frame[columns] = marks
    return frame


def marked_cells(table, steps: int) -> set[tuple[int, int]]:
    """The (image, step) cells ticked in the table (a DataFrame or rows of lists); anything else is a clear error."""
    frame = table if isinstance(table, pd.DataFrame) else pd.DataFrame(table)
    values = frame.iloc[:, 1:1 + steps].to_numpy()
    if values.shape[1] != steps:
        raise WorkbenchError(f"the marking table has {values.shape[1]} step columns, not {steps}: sample a fresh "
                             "group again")
    return {(i, t) for i in range(values.shape[0]) for t in range(steps)
            if values[i, t] is True or str(values[i, t]).strip().lower() in ("true", "1")}


def score_text(credit, marked: set[tuple[int, int]], z: float = Z) -> str:
    """How the marks fare against the measured classes, with what marking the same number at random would hit."""
    classes = credit.step_classes(z)  # (G, T)
    valid = credit.step_valid  # (G, T)
    wrong = {(i, t) for i, t in zip(*[x.tolist() for x in ((classes == MISATTRIBUTED) & valid).nonzero(as_tuple=True)])}
    right = {(i, t) for i, t in zip(*[x.tolist() for x in ((classes == ALIGNED) & valid).nonzero(as_tuple=True)])}
    hits, against = marked & wrong, marked & right
    cells = int(valid.sum())
    chance = len(marked) * len(wrong) / max(cells, 1)
    listing = "; ".join(f"image {i}: step{'s' if len(ts) > 1 else ''} {', '.join(map(str, ts))}"
                        for i, ts in _by_image(wrong)) or "none at this M"
    if not marked:
        verdict = "You marked no cell."
    else:
        verdict = (f"You marked {len(marked)} cells: **{len(hits)}** are measured misattributed, {len(against)} "
                   f"measured aligned (the step worked with A), {len(marked) - len(hits) - len(against)} undetermined "
                   f"(M={EXAMPLE_M} continuations cannot tell their sign). Marking {len(marked)} cells at random "
                   f"would hit {chance:.1f} misattributed cells on average.")
    return (f"**Your score.** {verdict} The measurement finds {len(wrong)} misattributed cells of {cells} "
            f"({listing}); you found {len(hits)} of them. The map below shows them as x.")


def _by_image(cells: set[tuple[int, int]]) -> list[tuple[int, list[int]]]:
    images = sorted({i for i, _ in cells})
    return [(i, sorted(t for j, t in cells if j == i)) for i in images]


def schedule_answer(credit, choice: str, data: dict | None, z: float = Z) -> str:
    """The measured share under each schedule on this group, whether the prediction was right, and the set's."""
    if choice not in CHOICES:
        raise WorkbenchError(f"choose one of the schedules ({', '.join(SCHEDULES[c] for c in CHOICES)})")
    shares = {}
    lines = ["| schedule | chunks | this group: misattributed among determined | determined | over the set "
             f"(M={EXAMPLE_M}) |", "|---|---|---|---|---|"]
    for name in CHOICES:
        sizes = schedule_sizes(name, credit.num_steps)
        r = credit.rechunk(sizes).rates(z).chunk
        shares[name] = r.misattributed
        share = "–" if r.misattributed != r.misattributed else f"{100 * r.misattributed:.0f} %"
        on_set = figure(data, name, EXAMPLE_M).text() if data is not None else "–"
        lines.append(f"| {SCHEDULES[name]} | {format_sizes(sizes)} | {share} | {r.determined_cells} of {r.cells} "
                     f"| {on_set} |")
    known = {k: v for k, v in shares.items() if v == v}
    if not known:
        verdict = f"No cell of this group is determined at M={EXAMPLE_M}: no schedule can be scored here."
    else:
        best = min(known, key=known.get)
        ties = [k for k, v in known.items() if v == known[best]]
        verdict = (f"**{'Right' if choice in ties else 'Not this time'}.** You chose {SCHEDULES[choice]}; on this "
                   f"group the lowest share is {100 * known[best]:.0f} %, with "
                   f"{' and '.join(SCHEDULES[k] for k in ties)}.")
    return verdict + _set_note(data) + "\n\n" + "\n".join(lines)


def _set_note(data: dict | None) -> str:
    """What the last column is, and what the set says at its own M (read from the shipped set)."""
    if data is None:
        return " One group is a noisy sample."
    m = data["settings"]["continuations"]
    step = figure(data, "step", m).mean
    lower = [SCHEDULES[n] for n in ("uniform4", "temporal") if figure(data, n, m).mean < step]
    said = f", where {' and '.join(lower)} lower the share" if lower else ""
    return (f" One group is a noisy sample. The last column is the set of groups behind the claim above, at this "
            f"exercise's M={EXAMPLE_M}: noisier than the claim's M={m}{said}.")


@guarded(5)
def exercise_sample(wb: Workbench, seed: float, session: Session, progress=gr.Progress()):
    """Sample a fresh group -> (gallery, x0 filmstrip, marking table, exercise session, status)."""
    from workbench.flow.trajectory import SamplingConfig
    from workbench.ui.guard import whole_number

    seed = whole_number(seed, "seed of the fresh group", 0)
    config = SamplingConfig(group=EXERCISE["group"], steps=EXERCISE["steps"], noise_level=0.7, seed=seed)
    fresh = handlers._sample(wb, EXERCISE_PROMPT, config, "adherence", Session(source=session.source), progress)
    if not bool(fresh.advantages.any()):
        raise WorkbenchError(f"every image of seed {seed} got the same reward: there is nothing to mark; try "
                             "another seed")
    strip = handlers._filmstrip(wb.policy(fresh.source), fresh.group)
    return (handlers._gallery(fresh, short=True), strip, _table(fresh), fresh,
            ok(f"fresh group sampled (seed {seed}): tick the cells, then press Check my marks"))


def _measured(wb: Workbench, fresh: Session, progress) -> Session:
    """The exercise session with its credit (measured once, M = EXAMPLE_M)."""
    from workbench.rewards import build_reward
    from workbench.rl.credit import measure_credit

    if fresh is None or fresh.group is None:
        raise WorkbenchError("no fresh group yet: press Sample a fresh group first")
    if fresh.credit is not None:
        return fresh
    with wb.batched_threads():
        credit = measure_credit(wb.policy(fresh.source), fresh.group, build_reward(fresh.reward_spec),
                                continuations=EXAMPLE_M, chunks=fresh.sizes,
                                progress=handlers._tracker(progress, "continuations from state"))
    record(wb, credit)
    return replace(fresh, credit=credit)


@guarded(4)
def exercise_check(wb: Workbench, table, fresh: Session, progress=gr.Progress()):
    """Check my marks -> (score text, credit map, exercise session, status)."""
    fresh = _measured(wb, fresh, progress)
    marked = marked_cells(table, fresh.group.num_steps)
    return (score_text(fresh.credit, marked), credit_view.attribution_figure(fresh.credit, Z), fresh,
            ok(f"measured in {fresh.credit.cost.get('seconds', 0.0):.0f} s; your score is below"))


@guarded(3)
def exercise_predict(wb: Workbench, choice: str, fresh: Session, progress=gr.Progress()):
    """Check my prediction -> (answer text, exercise session, status)."""
    if choice not in CHOICES:
        raise WorkbenchError(f"choose one of the schedules ({', '.join(SCHEDULES[c] for c in CHOICES)}) first")
    fresh = _measured(wb, fresh, progress)
    try:
        data = load_set()
    except WorkbenchError:
        data = None
    return schedule_answer(fresh.credit, choice, data), fresh, ok(f"measured: {escape(SCHEDULES[choice])}")


def check_estimate(wb: Workbench) -> str:
    """How long Check my marks takes here: the fresh group's credit (it is sampled already)."""
    g, t = EXERCISE["group"], EXERCISE["steps"]
    return "Measuring the fresh group's credit; time: " + estimate(wb, evaluations(g, t, EXAMPLE_M) - g * t) + "."


def exercise_section(wb: Workbench, session, heavy: dict, demo: gr.Blocks | None = None) -> None:
    """The two exercises under Learn's walk."""
    fresh = gr.State(None)
    gr.Markdown(gloss(INSTRUCTIONS), elem_id="exercise-intro")
    with gr.Row():
        seed = gr.Number(1, precision=0, label="Seed of the fresh group", elem_id="exercise-seed", scale=1)
        sample = gr.Button("Sample a fresh group", elem_id="exercise-sample-btn", scale=2)
    status = gr.Markdown(elem_id="exercise-status")
    gallery = gr.Gallery(label="The fresh group (#image, reward r, advantage A)", columns=8, height=200,
                         format="png", elem_id="exercise-gallery")
    strip = gr.Image(label="x0 predictions: one row per image, one column per step", type="pil", format="png",
                     elem_id="exercise-filmstrip")
    table = gr.Dataframe(headers=["image", *[f"t={t}" for t in range(EXERCISE["steps"])]],
                         datatype=["str", *["bool"] * EXERCISE["steps"]], interactive=True, static_columns=[0],
                         label="Tick the cells you expect to be misattributed", elem_id="exercise-table")
    check = gr.Button("Check my marks", variant="primary", elem_id="exercise-check-btn")
    timed(demo, partial(check_estimate, wb), "exercise-check-estimate")
    checked = gr.Markdown(elem_id="exercise-check-status")
    score = gr.Markdown(elem_id="exercise-score")
    answer = gr.Plot(label="The measured credit of the fresh group (x: misattributed)", elem_id="exercise-plot")
    with gr.Row():
        choice = gr.Radio([(SCHEDULES[c], c) for c in CHOICES], value=None, label="Which schedule gives the lowest "
                          "misattributed share on this group?", elem_id="exercise-choice", scale=3)
        predict = gr.Button("Check my prediction", elem_id="exercise-predict-btn", scale=1)
    predicted = gr.Markdown(elem_id="exercise-predict-status")
    verdict = gr.Markdown(elem_id="exercise-verdict")
    sample.click(partial(exercise_sample, wb), [seed, session], [gallery, strip, table, fresh, status],
                 api_name="exercise_sample", **heavy).then(**reveal("exercise-status"))
    check.click(partial(exercise_check, wb), [table, fresh], [score, answer, fresh, checked],
                api_name="exercise_check", **heavy).then(**reveal("exercise-check-status"))
    predict.click(partial(exercise_predict, wb), [choice, fresh], [verdict, fresh, predicted],
                  api_name="exercise_predict", **heavy).then(**reveal("exercise-predict-status"))
