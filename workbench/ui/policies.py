"""Handlers of the model picker (the app's header) and of the before/after comparison in Attribution.

The picker names the policy every tab of a session uses: the model the app was started with, a run's
newest checkpoint or a chosen iteration, another model folder typed as a path, or a base folder with a LoRA adapter
typed as 'BASE + ADAPTER' (`train.sources`).
Sessions pick independently; the shared `Workbench` keeps the last few loaded policies. A running
fine-tune is a separate process and is never touched by a switch.
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial

import gradio as gr
import torch

from workbench.core.errors import WorkbenchError
from workbench.core.glossary import gloss
from workbench.core.imaging import grid
from workbench.rl.credit import Credit, Z
from workbench.ui.classroom import held
from workbench.ui.guard import escape, guarded, limited, ok
from workbench.ui.handlers import _tracker, _z, rates_markdown
from workbench.ui.state import BASE, Session
from workbench.ui.workbench import Workbench
from workbench.viz import credit_view, plots

RUN_BASE = "run base"  # the comparison's default key: the base model of the session's policy
NO_COMPARISON = ("Pick a second policy and press **Compare** to sample this group's prompt with the same noise "
                 "under it and measure both groups' credit the same way.")


def header(wb: Workbench, session: Session) -> str:
    """The header line: which policy this session's tabs use, on which device."""
    try:
        label = wb.source(session.source).label
    except WorkbenchError as err:
        label = f"{session.source} (no longer loadable: {err})"
    from workbench.train.prompt_sets import is_pipeline_folder

    dtype = wb.dtype if is_pipeline_folder(wb.model_path) else "float32"
    return gloss(f"Every tab uses **{escape(label)}** (the *policy*, the model fine-tuning trains), computed on "
                 f"**{wb.device}** in **{dtype}** numbers.", ("policy",))


def refresh_choices(wb: Workbench):
    """Refresh button / page load -> the picker and the comparison menu with the runs on disk now. Their values
    are left alone: a path being typed while the page loads is not overwritten."""
    listed = wb.sources()
    compare = [("the base model of this session's policy", RUN_BASE), *listed]
    return gr.Dropdown(choices=listed, allow_custom_value=True), gr.Dropdown(choices=compare, allow_custom_value=True)


@guarded(9)
def pick_policy(wb: Workbench, key: str | None, session: Session, progress=gr.Progress()):
    """Load -> (picker, header, session, gallery, credit map, rates, comparison map, comparison text, status).

    A run folder is pinned to the checkpoint it names now (its newest complete one). Another policy drops the
    session's group and what was measured on it: they belong to the old policy."""
    key = (key or BASE).strip()
    start = time.perf_counter()
    progress(0.1, desc="loading the policy")
    source = wb.pin(key)[0]  # a run: its newest checkpoint, loaded now
    stored = source.checkpoint or (source.key if source.adapter else key)  # an adapter's key names both folders
    seconds = time.perf_counter() - start
    menu = gr.Dropdown(choices=wb.sources(), value=stored, allow_custom_value=True)  # shows what was loaded
    if stored == session.source:
        return menu, header(wb, session), session, *(gr.skip(),) * 5, ok(f"{escape(source.label)} is already loaded")
    dropped = session.group is not None
    session = session.with_source(stored)
    note = f"loaded {escape(source.label)} in {seconds:.1f} s"
    if dropped:
        note += "; the group made under the previous policy was dropped: generate one under this policy"
    cleared = plots.empty_figure("Step credit", "generate a group, then measure credit")
    return (menu, header(wb, session), session, [], cleared, rates_markdown(session),
            *empty_comparison(), ok(note))


def empty_comparison() -> tuple:
    """(figure, text) of the Before and after section with no comparison."""
    return plots.empty_figure("Two policies", "generate a group, then compare"), NO_COMPARISON


def comparison_outputs(session: Session) -> tuple:
    """(comparison figure, its images, its text) of the session's stored comparison, re-classified (the images are
    left as they are), or the empty section when there is none: a new group or policy drops the comparison, whose
    figure and text stayed on the page beside the new group (chunks and T of the old one)."""
    if session.comparison is None:
        figure, text = empty_comparison()
        return figure, None, text
    from workbench.ui.compare_text import headline

    return (credit_view.comparison_figure(session.comparison, session.z), gr.skip(),
            headline(session.comparison, session.z) + "\n\n" + credit_view.comparison_text(session.comparison,
                                                                                             session.z))


@guarded(4)
def comparison_view(wb: Workbench, session: Session):
    """Attribution opened or z changed -> (comparison figure, images, text, status) re-classified under the
    session's z and chunks (nothing is sampled)."""
    figure, images, text = comparison_outputs(session)
    return figure, images, text, gr.skip()


def session_credit(wb: Workbench, session: Session, continuations: int, estimator: str, crn: bool,
                   precision: str) -> Credit | None:
    """The session's credit (its latest measurement, else its latest Monte-Carlo one) when it is the measurement
    Compare makes of the session's group with these settings (`credit_compare.same_measurement`; both scored with
    the session's reward), else None: Compare measures it."""
    from workbench.rl.credit_compare import same_measurement
    from workbench.rl.credit_estimators import measured_precision

    group = session.group
    if group is None:
        return None
    numerics = measured_precision(wb.policy(session.source), estimator or "mc", precision or "auto")
    for credit in (session.credit, session.reference):
        if credit is not None and same_measurement(credit, group, continuations, group.config.seed, estimator or "mc",
                                                   bool(crn), numerics):
            return credit
    return None


def measure_both(wb: Workbench, keys: tuple[str, str], prompt: str, config, reward_spec: str, continuations: int,
                 sizes: list[int], estimator: str = "mc", crn: bool = True, progress=None, precision: str = "auto",
                 after: tuple = (None, None)):
    """The CreditComparison of two picker keys (first: before, second: after) on one prompt and noise. `after`:
    the second key's group already sampled with `config`, and its credit already measured the same way (or None
    each), which are used instead of sampling or measuring again (`compare_credit`'s `sampled` and `measured`)."""
    from workbench.rewards import build_reward
    from workbench.rl.credit_compare import compare_credit

    labels = tuple(wb.source(k).short for k in keys)
    policies = tuple(wb.policy(k) for k in keys)
    with wb.batched_threads():  # the groups' sampling and their credit's continuations
        comparison = compare_credit(policies, labels, prompt, config, build_reward(reward_spec),
                                    continuations=continuations, chunks=sizes, seed=config.seed,
                                    estimator=estimator or "mc", crn=bool(crn), precision=precision or "auto",
                                    progress=None if progress is None else _tracker(progress, "continuation batches"),
                                    sampled=(None, after[0]), measured=(None, after[1]))
    from workbench.ui.timing import record

    record(wb, comparison.credits[-1] if after[1] is None else comparison.credits[0])  # the last one measured now
    return comparison


def comparison_panel(comparison, z: float) -> tuple:
    """(figure, images of both groups: top row before, bottom row after, captioned with their names, text: the
    one-sentence headline over the table) of a CreditComparison."""
    from workbench.ui.compare_text import headline, images_label

    images = grid(torch.cat([g.images for g in comparison.groups]), ncol=comparison.groups[0].group_size)
    return (credit_view.comparison_figure(comparison, z), gr.update(value=images, label=images_label(comparison)),
            headline(comparison, z) + "\n\n" + credit_view.comparison_text(comparison, z))


@guarded(5)
def compare(wb: Workbench, other: str | None, continuations: float, session: Session, estimator: str = "mc",
            crn: bool = True, z: float = Z, precision: str = "auto", progress=gr.Progress()):
    """Compare button -> (comparison figure, images of both groups, text, session, status).

    The session's prompt is sampled with its group's SamplingConfig (same start noise, same SDE noise) under the
    chosen policy (default: the base model of the session's), and both groups' credit is measured with the same
    estimator, M, numerics and continuation seed (`rl.credit_compare`). The session's own group is that sampling
    under its policy already, and its credit is measured only when the session holds none measured this way
    (`session_credit`): one sampling and one or two measurements."""
    if session.group is None:
        raise WorkbenchError("no group yet: generate one in the Generate tab first")
    k, z = limited(continuations, "continuations", "continuations (M)"), _z(z)
    held(wb, continuations=k)  # class mode: the teacher's caps
    other = wb.base_key(session.source) if (other or RUN_BASE) == RUN_BASE else other.strip()
    group, start = session.group, time.perf_counter()
    known = session_credit(wb, session, k, estimator, crn, precision)  # measured the same way: not measured again
    comparison = measure_both(wb, (other, session.source), group.prompt, group.config, session.reward_spec, k,
                              session.sizes, estimator, crn, progress, precision, after=(group, known))
    session = replace(session, comparison=comparison, z=z, compared=other)
    same = (" (both sides are the same policy: pick a run to compare with)"
            if wb.source(other) == wb.source(session.source) else "")
    kept = "; this group's credit was already measured with these settings" if known is not None else ""
    return (*comparison_panel(comparison, z), session,
            ok(f"compared two policies on '{escape(group.prompt)}' ({time.perf_counter() - start:.1f} s{kept}){same}"))


def picker_panel(wb: Workbench, session, choices: list, heavy: dict) -> dict:
    """The model picker under the title: the header line and the menu; its Load is wired once the tabs exist."""
    line = gr.Markdown(header(wb, Session()), elem_id="model-header")
    with gr.Row():
        menu = gr.Dropdown(choices, value=BASE, allow_custom_value=True, filterable=True, scale=4,
                           label="Policy of every tab", elem_id="model-picker",
                           info="the base model, a run's newest checkpoint or one iteration, a model folder path "
                                "(SD3 / FLUX diffusers or embedded format), or BASE + ADAPTER: a LoRA adapter folder "
                                "(diffusers or PEFT format) on an SD3 / FLUX folder, e.g. base + loras/my-lora")
        load = gr.Button("Load", elem_id="model-load-btn", scale=1)
        refresh = gr.Button("Refresh the list", elem_id="model-refresh-btn", scale=1)
    status = gr.Markdown(elem_id="model-status")

    def wire(gallery, attribution: dict):
        """Wires Load and the menu to `pick_policy`; returns that event."""
        outputs = [menu, line, session, gallery, attribution["heatmap"], attribution["rates"],
                   attribution["compare_plot"], attribution["compare_text"], status]
        refresh.click(partial(refresh_choices, wb), None, [menu, attribution["other"]],
                      api_visibility="private")
        return gr.on([load.click, menu.select], partial(pick_policy, wb), [menu, session], outputs,
                     api_name="pick_policy", **heavy)
    return dict(load=wire, menu=menu, header=line)
