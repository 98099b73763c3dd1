"""The page: its tabs (registered in `ui.tabs.TABS`; Chunks is built in `chunks_tab`, Learn in `learn`) and their
wiring. Handlers live in `handlers`, `objectives` and `run_handlers`.

`build_app(wb)` returns the `gr.Blocks`; `app.py` launches it with `launch.launch_options()`. Per-user data is one
`gr.State(Session())`, so two browser sessions never share a group, a credit measurement, a chunk schedule or a run.
"""

from __future__ import annotations

from functools import partial

import gradio as gr

from workbench.core.fields import LIMITS, field_docs
from workbench.core.glossary import gloss
from workbench.core.precision import PRECISIONS, resolve_precision
from workbench.flow.sde import SDE_KINDS
from workbench.flow.trajectory import SamplingConfig
from workbench.rewards import default_note, default_reward, rewards_for
from workbench.rl.chunking import chunker_names, parse_chunk_spec
from workbench.rl.credit import Z
from workbench.rl.credit_estimators import estimator_help, estimator_names
from workbench.rl.explain import CLIP, INNER_LR, INNER_UPDATES
from workbench.train.config import TrainConfig
from workbench.train.config_checks import RANGES
from workbench.train.model_settings import model_defaults
from workbench.train.prompt_sets import is_pipeline_folder, world_prompts
from workbench.ui import classroom_view as cv
from workbench.ui import figures, share, waits
from workbench.ui import handlers as h
from workbench.ui import objectives as ob
from workbench.ui import policies as pol
from workbench.ui import run_handlers as rh
from workbench.ui import step_handlers as sh
from workbench.ui import train_form as tf
from workbench.ui.chunks_tab import chunks_tab
from workbench.ui.guard import guard_numbers
from workbench.ui.jobs import objective_names
from workbench.ui.launch import MATH_FONT_PRELOAD
from workbench.ui.learn import learn_tab
from workbench.ui.objectives import ROWS
from workbench.ui.progress import QUIET
from workbench.ui.reveal import reveal
from workbench.ui.state import Session
from workbench.ui.tabs import TABS, Page, TabInfo, tab_ids
from workbench.ui.welcome import (
    ATTRIBUTION_INTRO,
    FINETUNE_INTRO,
    GENERATE_INTRO,
    OBJECTIVES_INTRO,
    RUNS_INTRO,
    SPECKLE_NOTE,
    VOCABULARY,
    glossary_tab,
    go_to_learn,
    welcome_panel,
)
from workbench.ui.workbench import Workbench
from workbench.viz import credit_view
from workbench.viz.plots import empty_figure
from workbench.viz.push_maps import maps_hint

EXAMPLE_PROMPTS = ["a large red circle in the top left on a white background",
                   "a small blue ring in the center on a black background",
                   "a large yellow cross in the bottom right on a gray background",
                   "a small green bar in the middle left on a white background",
                   "a purple circle"]
DEFAULT_BUDGET = 480  # continuations of one default measurement (G=8, T=16, M=4): a refinement doubles the compute
BEFORE_NOW_HEIGHT = 340  # px of the Before / Now grids: 8 prompts x 2 rows show cells of about 150 px
HEAVY = dict(concurrency_id="model", concurrency_limit=1)  # sampling events share the model one at a time
LOADING = dict(concurrency_id="load", concurrency_limit=1)  # a picker's load: one at a time, never in sampling's way
SDE_NOTE = ("flow_grpo leaves speckle in pixel space (its last noisy step cannot be undone); cps and an SDE window "
            "that ends before the last steps give clean images (docs/samplers.md)")
REAL_VOCABULARY = ("SD3 / FLUX read any text. The examples come from the shipped real prompt set "
                   "(workbench/data/real_prompts.txt: objects, counts, colours and positions in GenEval's style), "
                   "which fine-tunes of a real model train on; the toy world's rewards and grammar do not apply.")
DEFAULT_REWARD_NOTE = default_note()


@TABS.register("generate", info=TabInfo("Generate", order=10))
def _generate_tab(page: Page) -> dict:
    """Generate tab; returns its button and outputs so the Attribution outputs can be wired after they exist. A real
    model's examples, hints and rewards come from the real prompt set and the rewards that serve it."""
    wb, session = page.wb, page.session
    toy = not is_pipeline_folder(wb.model_path)
    examples = EXAMPLE_PROMPTS if toy else world_prompts(False, len(EXAMPLE_PROMPTS))
    gr.Markdown(GENERATE_INTRO, elem_id="generate-intro")
    with gr.Row():
        with gr.Column(scale=3):
            prompt = gr.Textbox(examples[0], label="Prompt", elem_id="prompt")
            gr.Examples(examples, inputs=prompt, label="Example prompts")
            gr.Markdown(VOCABULARY if toy else REAL_VOCABULARY, elem_id="prompt-hints")
        with gr.Column(scale=2):
            group = gr.Slider(*LIMITS["group"].range(app=True), 8, step=1, label="Group size G (images per prompt)",
                              elem_id="gen-group")  # the ranges of every control: the one table (core/fields.py)
            steps = gr.Slider(*LIMITS["steps"].range(app=True), 16, step=1, label="Denoising steps T",
                              elem_id="gen-steps")
            noise = gr.Slider(*LIMITS["noise_level"].range(app=True), 0.7, step=0.05,
                              label="Noise level a (eta for dance_grpo; 0 = ODE)",
                              info="the randomness each step adds; at 0 every image of a group is the same (the "
                                   "deterministic ODE), and GRPO has nothing to compare")
            with gr.Row():
                sde = gr.Dropdown(list(SDE_KINDS), value=SamplingConfig.sde, label="SDE kind", elem_id="gen-sde",
                                  info="how a step adds that noise: Flow-GRPO's, DanceGRPO's or coefficients-"
                                       "preserving (cps) sampling")
                window = gr.Textbox("", label="SDE window START,END (empty = all steps)", elem_id="gen-window")
            with gr.Row():
                seed = gr.Number(0, precision=0, label="Seed")
                reward = gr.Textbox("", label="Reward spec (name:weight,...)", placeholder=DEFAULT_REWARD_NOTE,
                                    elem_id="gen-reward",
                                    info=f"empty: {DEFAULT_REWARD_NOTE}; rewards: " + ", ".join(rewards_for(toy)))
            run = gr.Button("Generate", variant="primary", elem_id="generate-btn")
            waits.line(partial(waits.generate_wait, wb), [group, steps], "generate-wait")
    status = gr.Markdown(elem_id="generate-status")
    # 640 px: both rows of four of G = 8 with their captions (450 px hid the second row's); a larger group scrolls
    gallery = gr.Gallery(label="Final images (reward, GRPO advantage, speckle)", columns=4, format="png",
                         height=640, elem_id="gallery")
    gr.Markdown(SPECKLE_NOTE)
    strip = gr.Image(label="x0 predictions: one row per trajectory, one column per step", type="pil",
                     format="png", elem_id="filmstrip")
    logprob = gr.Plot(label="Log-probs", elem_id="logprob-plot")
    return dict(run=run, inputs=[prompt, group, steps, noise, seed, reward, session, sde, window],
                outputs=[gallery, strip, logprob], status=status,
                shown=[prompt, group, steps, noise, seed, reward, sde, window, gallery, strip, logprob, status])




def _per_step_section(wb, session) -> list:
    """Attribution: ppo's and dense_grpo's per-step advantages beside the measured credit (`step_handlers`)."""
    gr.Markdown(gloss("### Per-step advantages\nGRPO gives every step of image i its advantage A(i). **ppo** learns a "
                      "critic V(x_t, t, prompt) and gives each step its GAE advantage A(i,t); **dense_grpo** (TP-GRPO) "
                      "the gain of the reward of an ODE completion from its states. Here all three are set beside the "
                      "Monte-Carlo credit measured above.", ("ppo", "dense_grpo", "GAE", "reward")))
    with gr.Row():
        critic = gr.Dropdown(sh.critic_choices(wb), value=sh.FIT, allow_custom_value=True, filterable=True,
                             label="ppo's critic", info="fitted on this group, or the critic a ppo run saved",
                             elem_id="step-critic", scale=3)
        go_ = gr.Button("Compare advantages", elem_id="step-compare-btn", scale=1)
    empty, text = sh.empty_view()
    table = gr.Markdown(text, elem_id="step-compare-text")
    plot = gr.Plot(empty, label="Per-step advantages", elem_id="step-compare-plot")
    status = gr.Markdown(elem_id="step-compare-status")
    go_.click(partial(sh.compare_advantages, wb), [critic, session], [plot, table, session, status],
              api_name="compare_advantages", **cv.long_work(wb, HEAVY))
    return [plot, table, status]  # the section's view (`step_advantages_view`)


@TABS.register("attribution", info=TabInfo("Attribution", order=20, needs_credit=True))
def _attribution_tab(page: Page) -> dict:
    wb, session, choices = page.wb, page.session, page.choices
    gr.Markdown(gloss(ATTRIBUTION_INTRO), elem_id="attribution-intro")
    with gr.Row():
        continuations = gr.Slider(*LIMITS["continuations"].range(app=True), 4, step=1,
                                  label="Continuations per state M", elem_id="credit-k")
        estimator = gr.Dropdown(estimator_names(), value="mc", label="Credit estimator", info=estimator_help(),
                                elem_id="credit-estimator")
        crn = gr.Checkbox(True, label="Common random numbers", info="continuations of a trajectory share noise",
                          elem_id="credit-crn")
        z = gr.Number(Z, label=credit_view.Z_LABEL, elem_id="credit-z")  # no minimum: the handlers' message
        # names the field ("z (sets the false-call rate) must be >= 0"), where Gradio's toast did not, twice
        auto = resolve_precision("auto", wb.device)
        precision = gr.Dropdown(list(PRECISIONS), value="auto", label="Numerics", elem_id="credit-precision",
                                info=f"of the continuations; auto: {auto} on this device")
        run = gr.Button("Measure credit", variant="primary", elem_id="credit-btn")
    with gr.Row():
        budget = gr.Number(DEFAULT_BUDGET, precision=0, minimum=1, maximum=h.REFINE_BUDGET_MAX,
                           label="Refinement budget (continuations)",
                           elem_id="refine-budget", scale=3)
        refine = gr.Button("Refine", elem_id="refine-btn", scale=1)
    waiting = [continuations, estimator, budget, session]  # what Measure credit and Refine cost
    waits.line(partial(waits.credit_wait, wb), waiting, "credit-wait")
    status = gr.Markdown(elem_id="credit-status")
    rates = gr.Markdown(elem_id="credit-rates")
    heatmap = gr.Plot(empty_figure("Step credit", "generate a group, then measure credit"), label="Credit",
                      elem_id="credit-plot")
    per_step = _per_step_section(wb, session)
    gr.Markdown(gloss("### Before and after\nThe same prompt and noise under a second policy (default: the base "
                      "model of the policy loaded at the top, i.e. *before* a fine-tune): both groups are measured "
                      "with the M, estimator and continuation seed above and drawn on one colour scale.", ("policy",)))
    with gr.Row():
        other = gr.Dropdown([("the base model of this session's policy", pol.RUN_BASE), *choices],
                            value=pol.RUN_BASE, allow_custom_value=True, filterable=True, label="Compare with",
                            info="a run, one of its checkpoints, the base model, or a model folder path",
                            elem_id="compare-policy", scale=3)
        compare = gr.Button("Compare", elem_id="compare-credit-btn", scale=1)
    waits.line(partial(waits.compare_wait, wb), [continuations, estimator, crn, precision, session], "compare-wait")
    empty, text = pol.empty_comparison()
    compare_plot = gr.Plot(empty, label="Before and after", elem_id="compare-credit-plot")
    compare_text = gr.Markdown(text, elem_id="compare-credit-text")
    compare_images = gr.Image(label="Final images of both groups (the caption names each row after Compare)",
                              type="pil", format="png", elem_id="compare-images")
    outputs = [heatmap, rates, session, status]
    both = [compare_plot, compare_images, compare_text, status]
    busy = dict(show_progress_on=[heatmap], **cv.long_work(wb, HEAVY))  # progress over the map
    steps_view = dict(fn=partial(sh.step_advantages_view, wb), inputs=[session], outputs=per_step,
                      api_visibility="private", **QUIET)  # a new measurement: the last comparison goes
    for measured in (run.click(cv.handler(wb, h.attribute), [continuations, session, estimator, crn, z, precision],
                               outputs, api_name="attribute", **busy),
                     refine.click(partial(h.refine_credit, wb), [budget, session, z], outputs, api_name="refine",
                                  **busy)):
        measured.then(**steps_view)
        measured.then(**reveal("credit-status"))  # the answer's line, with the map under it
        waits.after(measured)  # the rates it measured, said in the tab's time lines
    z.submit(partial(h.attribution_z, wb), [z, session], outputs, api_name="attribution_z").then(
        partial(pol.comparison_view, wb), [session], both, api_visibility="private", **QUIET)
    compared = compare.click(partial(pol.compare, wb), [other, continuations, session, estimator, crn, z, precision],
                             [compare_plot, compare_images, compare_text, session, status], api_name="compare_credit",
                             **cv.long_work(wb, HEAVY))
    compared.then(**reveal("compare-credit-plot"))  # the comparison, under its button
    waits.after(compared)
    page.tab.select(partial(h.attribution_view, wb), [session], [heatmap, rates, status],  # a redraw: no progress
                    api_visibility="private", **QUIET)  # flashes
    page.tab.select(partial(pol.comparison_view, wb), [session], both, api_visibility="private", **QUIET)
    page.tab.select(**steps_view)  # each section shows the group it belongs to
    gen = page.built["generate"]
    gen["run"].click(partial(h.generate, wb), gen["inputs"], [*gen["outputs"], heatmap, rates, session, gen["status"]],
                     api_name="generate", show_progress_on=gen["outputs"][:1], **HEAVY)  # progress over the gallery
    return dict(heatmap=heatmap, rates=rates, status=status, other=other, compare_plot=compare_plot,
                compare_text=compare_text, both=both, continuations=continuations, estimator=estimator,
                steps_view=steps_view)


TABS.register("chunks", info=TabInfo("Chunks", order=30, needs_credit=True))(chunks_tab)


@TABS.register("objectives", info=TabInfo("Objectives", order=40, needs_credit=True))
def _objectives_tab(page: Page) -> None:
    wb, session, tab = page.wb, page.session, page.tab
    view = gr.State(None)  # ui.objectives.ObjectivesView of this session
    gr.Markdown(gloss(OBJECTIVES_INTRO), elem_id="objectives-intro")
    with gr.Row():
        updates = gr.Slider(*LIMITS["inner_updates"].range(app=True), INNER_UPDATES, step=1, label="Inner updates N",
                            elem_id="obj-updates")
        lr = gr.Number(INNER_LR, label="Learning rate of the inner updates", elem_id="obj-lr")
        clip = gr.Number(CLIP, label="Clip range ε", elem_id="obj-clip")
        inner = gr.Dropdown(objective_names(), value=TrainConfig.objective, label="Objective of the inner updates")
        run = gr.Button("Compute", variant="primary", elem_id="objectives-btn")
    waits.line(partial(waits.objectives_wait, wb), [updates, view, session], "objectives-wait")
    status = gr.Markdown(elem_id="objectives-status")
    summary = gr.Markdown(elem_id="objectives-summary")
    scale = gr.Radio(list(ob.SCALES), value="shared", label="Colour scale", elem_id="obj-scale")
    maps = figures.maps_view(maps_hint(ob.NO_VIEW_HINT), label="Push of every objective", elem_id=ob.PLOT)
    with gr.Row():
        name = gr.Dropdown(objective_names(), value=TrainConfig.objective, label="Objective", elem_id="cell-objective")
        row = gr.Radio([(label, key) for key, label in ROWS], value="moved", label="Maps", elem_id="cell-row")
        traj = gr.Number(0, precision=0, label="Trajectory i", elem_id="cell-traj")
        step = gr.Number(0, precision=0, label="Step t", elem_id="cell-step")
        show = gr.Button("Show the cell", elem_id="cell-btn")
    formula = gr.HTML("", elem_id="cell-formula", head=MATH_FONT_PRELOAD)  # HTML and MathML (ui/mathml.py)
    gr.Markdown(gloss("### Before and after\nThe push maps of the two groups compared in **Attribution** (the same "
                      "prompt and noise under two policies), each beside its own measured credit.", ("policy",)))
    versus = gr.Button("Compare push maps", elem_id="objectives-compare-btn")
    versus_plot = gr.Plot(label="Push under two policies", elem_id="objectives-compare-plot")
    versus.click(partial(ob.objectives_compare, wb), [clip, session], [versus_plot, status],
                 api_name="objectives_compare")
    computed = run.click(partial(ob.objectives_compute, wb), [updates, lr, clip, inner, view, session],
                         [maps, summary, formula, view, status], api_name="objectives", **cv.long_work(wb, HEAVY))
    computed.then(lambda *args: ob.objectives_scale(wb, *args)[:2], [scale, view, session], [maps, view],
                  api_visibility="private", **QUIET).then(**reveal("objectives-status"))
    waits.after(computed)  # its view and rates, said in the time line
    scale.input(partial(ob.objectives_scale, wb), [scale, view, session], [maps, view, status],
                api_name="objectives_scale", **QUIET)
    tab.select(partial(ob.objectives_view, wb), [view, session], [maps, summary, formula, view, status],
               api_visibility="private")
    # A cell chosen by the controls or by a click on a map: the maps stay, their outline moves (ui/figures.py)
    cell_inputs = [name, row, traj, step, view, session]
    # Outside the queue: the page skips the queued event's status round over every component (a map click in
    # about two thirds of the time, docs/performance.md). A choice is absolute, so two sent at once need no order:
    # the cell of the reply that lands last shows.
    quick = dict(**QUIET, queue=False)
    gr.on([show.click, name.input, row.input, traj.submit, step.submit], partial(ob.objectives_select, wb),
          cell_inputs, [maps, formula, view, status], api_name="objectives_select", api_visibility="private", **quick)
    maps.cell(ob.maps_clicked(wb), [view, session], [name, row, traj, step, maps, formula, view, status],
              api_name="objectives_click", api_visibility="private", **quick)
    api = gr.Button(visible=False)  # the API's objectives_cell: the same choice, answered with the whole maps
    api.click(partial(ob.objectives_cell, wb), cell_inputs, [maps, formula, view, status], api_name="objectives_cell")


@TABS.register("finetune", info=TabInfo("Fine-tune", order=50))
def _finetune_tab(page: Page) -> None:
    """Every control starts at TrainConfig's default and says what its field's docstring says."""
    wb, session, tab = page.wb, page.session, page.tab
    defaults, docs = model_defaults(TrainConfig()), field_docs(TrainConfig)  # the embedded model's values
    gr.Markdown(FINETUNE_INTRO, elem_id="finetune-intro")

    def hint(name: str, limit: int = 150) -> str:
        return docs[name] if len(docs[name]) <= limit else docs[name][:limit].rsplit(" ", 1)[0] + " ..."

    real_model = tf.real_model(wb)  # an SD3 / FLUX model: no toy lessons, and its memory settings
    with gr.Row(visible=not real_model):
        lesson = gr.Dropdown([rh.NO_LESSON, *([] if real_model else rh.lesson_names())], value=rh.NO_LESSON,
                             label="Lesson (task preset)", elem_id="train-lesson", scale=1,
                             info="crosses: teach the model to draw crosses; the form takes the lesson's settings")
        about = gr.Markdown(elem_id="lesson-text")
    with gr.Row():
        objective = gr.Dropdown(objective_names(), value=defaults.objective, label="Objective",
                                info="dapo, gpg, gspo, gfpo start from their presets (dynamic sampling, "
                                     "GPG advantages, ...); ppo trains a critic, dense_grpo samples ODE "
                                     "look-aheads (~3.7x the cost of an iteration)")
        reward = gr.Textbox(defaults.reward, label="Reward spec and weights", elem_id="train-reward",
                            placeholder=f"the model's default ({default_reward(False)})" if real_model
                            else DEFAULT_REWARD_NOTE,
                            info=hint("reward"))
        chunks = gr.Textbox(defaults.chunks, label="Chunk schedule: sizes (sum = trained steps) or a chunker ("
                            + ", ".join(chunker_names(menu=True, without_curve=True)) + ", uniform:size=4)",
                            elem_id="train-chunks", info=hint("chunks"))
    with gr.Row():
        lr = gr.Number(defaults.lr, label="Learning rate", info=hint("lr"))
        iterations = gr.Number(defaults.iterations, precision=0, minimum=1, maximum=rh.APP_LIMITS["iterations"],
                               label=f"Iterations (at most {rh.APP_LIMITS['iterations']} here)",
                               elem_id="train-iterations")
        group = gr.Slider(RANGES["group"][0], rh.APP_LIMITS["group"], defaults.group, step=1, label="Group size G",
                          elem_id="train-group", info=hint("group"))
        steps = gr.Slider(2, rh.APP_LIMITS["steps"], defaults.steps, step=1, label="Trained steps T",
                          elem_id="train-steps", info=hint("steps"))
        lora = gr.Number(tf.REAL_MODEL_LORA_RANK if is_pipeline_folder(wb.model_path) else defaults.lora_rank,
                         precision=0, label="LoRA rank (0 = full fine-tuning; SD3 / FLUX default: 32, Flow-GRPO's)")
    with gr.Row():
        sde = gr.Dropdown(list(SDE_KINDS), value=defaults.sde, label="SDE kind", info=SDE_NOTE, elem_id="train-sde")
        window = gr.Textbox("", label="SDE window START,END (empty = every trained step)", info=hint("window"),
                            elem_id="train-window")
    real = tf.real_controls(wb, hint) if real_model else []
    memory = gr.Markdown(elem_id="train-memory")
    with gr.Row():
        start = gr.Button("Start", variant="primary", elem_id="start-btn")
        stop = gr.Button("Stop", variant="stop", elem_id="stop-btn")
    status = gr.Markdown(elem_id="train-status")
    with gr.Row():
        shown = gr.Dropdown([], label="Show run", info="any run on disk, finished or not (listed when the tab opens)",
                            elem_id="show-run", scale=1)
        state = gr.Markdown("No run started in this session.", elem_id="run-state")
    bar = gr.HTML(elem_id="run-progress")
    with gr.Row():
        live = gr.Plot(label="Training curves", elem_id="train-plot", scale=3)
        sample = gr.Image(label="Newest samples", type="pil", format="png", elem_id="train-sample", scale=1)
    gr.Markdown("**Before / Now**: the first held-out prompts drawn with the same noise at every evaluation.")
    with gr.Column():  # stacked, not side by side: a lesson's grid of 8 prompts needs the width
        before = gr.Image(label="Before", type="pil", format="png", elem_id="train-before", height=BEFORE_NOW_HEIGHT)
        now = gr.Image(label="Now", type="pil", format="png", elem_id="train-now", height=BEFORE_NOW_HEIGHT)
    heldout = gr.Plot(label="Held-out evaluation", elem_id="train-heldout")
    timer = gr.Timer(1.0, active=False)
    form = [objective, reward, chunks, lr, iterations, group, steps, lora, sde, window]
    lesson.input(partial(rh.load_lesson, wb), [lesson], [*form, about, status], api_name="load_lesson")
    estimate = dict(fn=partial(rh.memory_estimate, wb), inputs=[*form, lesson, *real], outputs=[memory],
                    api_visibility="private", **QUIET)
    for control in [*form, lesson, *real]:  # the estimate follows the form, before Start
        control.change(**estimate)
    tab.select(**estimate)
    start.click(cv.handler(wb, rh.start_run), [*form, lesson, session, *real], [live, sample, session, timer, status],
                api_name="start_run", concurrency_id="train")
    stop.click(cv.handler(wb, rh.stop_run), [session], [timer, status], api_name="stop_run")
    cv.wire_stop(wb, [timer.tick, tab.select], session, stop)  # class mode: Stop only where it may stop
    shown_keys = gr.State(())  # what the panel's pictures are drawn from (run_handlers.panel_keys): sent once each
    panel = [live, sample, before, now, heldout, bar, timer, shown_keys, state]
    poll = dict(fn=partial(rh.poll_run, wb), inputs=[session, shown_keys], outputs=panel, api_visibility="private",
                **QUIET)
    timer.tick(**poll)
    tab.select(**{**poll, "fn": partial(rh.poll_run, wb, opened=True)})  # a session that opens the tab sees (and
    # can stop) the run using the device
    tab.select(partial(rh.run_choices, wb), [session], [shown], api_visibility="private", **QUIET)
    shown.input(partial(rh.show_run, wb), [shown, session], [*panel, session, status], api_name="show_run")


@TABS.register("runs", info=TabInfo("Runs", order=60))
def _runs_tab(page: Page) -> None:
    wb, tab = page.wb, page.tab
    gr.Markdown(RUNS_INTRO, elem_id="runs-intro")
    refresh = gr.Button("Refresh", elem_id="refresh-runs-btn")
    status = gr.Markdown(elem_id="runs-status")
    table = gr.Dataframe(headers=rh.RUN_COLUMNS, interactive=False, label="Runs on disk", elem_id="runs-table")
    with gr.Row():
        chosen = gr.Dropdown([], multiselect=True, label="Runs to compare", scale=3,
                             allow_custom_value=True)  # a new session's API call before Refresh: checked by name
        metric = gr.Dropdown([rh.DEFAULT_METRIC], value=rh.DEFAULT_METRIC, label="Metric", scale=2,
                             allow_custom_value=True)
        compare = gr.Button("Compare", scale=1, elem_id="compare-btn")
    overlay = gr.Plot(label="Comparison", elem_id="compare-plot")
    with gr.Row():
        pick = gr.Dropdown([], label="Run (shown below; the button downloads it)", elem_id="runs-pick", scale=3,
                           allow_custom_value=True)  # a new session's API call before Refresh: checked by name
        prepare = gr.Button("Prepare download (metrics CSV + checkpoint)", scale=2, elem_id="download-btn")
    files = gr.File(file_count="multiple", label="Files", interactive=False, elem_id="run-files")
    bar = gr.HTML(elem_id="runs-progress")
    line = gr.Markdown(elem_id="runs-line")
    curves = gr.Plot(label="Training curves", elem_id="runs-curves")
    with gr.Column():  # stacked, not side by side: a lesson's grid of 8 prompts needs the width
        before = gr.Image(label="Before", type="pil", format="png", elem_id="runs-before", height=BEFORE_NOW_HEIGHT)
        now = gr.Image(label="Now", type="pil", format="png", elem_id="runs-now", height=BEFORE_NOW_HEIGHT)
    heldout = gr.Plot(label="Held-out evaluation", elem_id="runs-heldout")
    listing = [table, chosen, pick, metric, status]
    shown = [curves, before, now, heldout, bar, line, status]
    gr.on([refresh.click, tab.select], partial(rh.refresh_runs, wb), None, listing, api_visibility="private").then(
        partial(rh.runs_show, wb), [pick], shown, api_visibility="private")
    pick.input(partial(rh.runs_show, wb), [pick], shown, api_name="show_run_files")
    compare.click(partial(rh.compare, wb), [chosen, metric], [overlay, status], api_name="compare_runs")
    prepare.click(partial(rh.download, wb), [pick], [files, status], api_name="download_run")


TABS.register("learn", info=TabInfo("Learn", order=70))(
    lambda page: learn_tab(page.wb, page.session, page.built["generate"]["shown"], cv.long_work(page.wb, HEAVY),
                           page.demo))
TABS.register("glossary", info=TabInfo("Glossary", order=80))(lambda page: glossary_tab())


def build_app(wb: Workbench) -> gr.Blocks:
    """The whole workbench page around one shared `Workbench` (model, curves, training jobs)."""
    parse_chunk_spec("2,3,4,7", 16)  # the layout's defaults must stay valid
    with gr.Blocks(title="Chunk-GRPO Workbench", delete_cache=rh.EXPORT_CACHE) as demo, waits.Lines():
        session = gr.State(Session())  # the Lines: every time line, said again after a link or a policy loads
        gr.Markdown("# Chunk-GRPO Workbench\nSee where step-level GRPO misattributes credit, and what chunks change.")
        choices = wb.sources()  # the runs on disk, read once here; every page load refreshes them
        picker = pol.picker_panel(wb, session, choices, LOADING)
        welcome, start = welcome_panel(wb, demo)
        link = share.share_row()
        with gr.Tabs() as tabs:
            built: dict = {}
            for name in tab_ids():
                with gr.Tab(TABS.info(name).label, id=name) as tab, waits.Lines(tab):  # said as the tab opens
                    built[name] = TABS.get(name)(Page(wb, session, tab, link["link"], choices, built, demo))
            cv.class_tab(wb, demo)  # class mode only (app.py --class)
        gen, attribution, spec = built["generate"], built["attribution"], built["chunks"]
        start.click(go_to_learn, None, [tabs, welcome], api_visibility="private", queue=False)
        prompt, group, steps, noise, seed, reward, _, sde, window = gen["inputs"]
        k, estimator = attribution["continuations"], attribution["estimator"]
        opened = share.wire(wb, demo, link, tabs, session,
                            [prompt, group, steps, noise, seed, sde, window, reward, k, estimator],
                            [*gen["shown"][:8], picker["menu"], spec, k, estimator, picker["header"], *gen["outputs"],
                             attribution["heatmap"], attribution["rates"], *attribution["both"][:3]])
        waits.after(opened)  # a link's group, on whichever tab it opens
        waits.after(picker["load"](gen["outputs"][0], attribution))  # a new policy drops the group
        demo.load(partial(pol.refresh_choices, wb), None, [picker["menu"], attribution["other"]],
                  api_visibility="private", **QUIET)
    guard_numbers(demo)  # a string or null sent to a numeric control is a message naming it
    return demo
