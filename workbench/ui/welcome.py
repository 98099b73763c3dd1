"""A first visit: the welcome above the tabs that leads into Learn, the tab introductions that explain
their words where they first use them (`workbench.core.glossary.gloss`), and the Glossary tab.

Texts and the small builders that place them; the one time stated (Learn's example) is measured here.
"""

from __future__ import annotations

from functools import partial

import gradio as gr

from workbench.core.glossary import gloss, glossary_markdown
from workbench.toyworld.world import BACKGROUNDS, COLORS, POSITIONS, SHAPES, SIZES
from workbench.ui.jobs import objective_names
from workbench.ui.waits import timed

WELCOME = """
**New to GRPO?** GRPO fine-tunes an image model by sampling a group of images for one prompt, scoring
them, and pushing every denoising step of the better images up and of the worse ones down, each by one
advantage. This workbench measures what each step really did (its credit) and shows where that one number
gets a step wrong, and what grouping steps into chunks changes. **Learn** walks through it on one example
group {when}; the group then appears in every other tab. Hover a dotted word for its meaning;
the **Glossary** tab lists them all.
"""


def welcome_text(wb=None) -> str:
    """The welcome, with Learn's example timed at this machine's measured rate (`ui.timing`; written again as each
    page loads, so a rate measured as the model loaded is said from the next visit on)."""
    from workbench.ui.learn import LEARN
    from workbench.ui.timing import evaluations, seconds, shown

    took = None if wb is None else seconds(wb, evaluations(LEARN["group"], LEARN["steps"], LEARN["continuations"]))
    when = ("(its button says how long it takes on this machine once the model is timed)" if took is None
            else f"in about {shown(took)} on this machine (timed here)")
    return gloss(WELCOME.format(when=when))

GENERATE_INTRO = gloss(
    "Sample a group of G images of one prompt. Each image is a trajectory of T denoising steps from noise, and "
    "the SDE sampler adds fresh noise at each step, so the images differ; "
    "the reward scores the final images and GRPO turns each reward into one advantage. Below the images: the "
    "model's guess of the final image (x0) after every step, and each step's log-prob.")

CHUNKS_INTRO = gloss(
    "A chunk schedule groups consecutive steps; Chunk-GRPO gives each chunk one importance ratio. GCPO places "
    "the boundaries where the temporal dynamics change pace: the curve L1_rel below is how much the image "
    "changes at each step (the model's curve, averaged over trajectories of several prompts, not the "
    "Generate group), so steps of one chunk do similar work. Edit the schedule; the curve, the classified "
    "chunk credit and the misattribution rates update at once (the stored credit and its errors are "
    "re-chunked, nothing is sampled again).")

ATTRIBUTION_INTRO = (
    "Sample M continuations from every state of the group made in **Generate** and compare each step's measured "
    "credit (left) with the one advantage GRPO gives the whole trajectory (right). Every cell has a standard "
    "error: it is **misattributed** (x) or **aligned** (dot) only when its credit differs from 0 at the false-call "
    "rate z sets (z = 2: 4.6 % of cells without credit are called; a Student-t test, since each error comes from "
    "only M continuations, or an exact test where their rewards tie), **undetermined** (grey) otherwise; hover a "
    "cell for its error. The last step ends at the image, whose reward is taken as exact. **Refine** spends more "
    "continuations where cells are undetermined and tests a cell again at the rate divided by its looks. The "
    "*ode* and *x0* estimators value each state with one deterministic look-ahead "
    "(TP-GRPO; Stepwise-Flow-GRPO, DenseGRPO): cheaper, without Monte-Carlo error, and compared with your "
    "Monte-Carlo measurement of the same group.")

OBJECTIVES_INTRO = (
    "What each objective does to each step of the group made in **Generate**: the map of an objective shows "
    "its push −w = −dL/d log p on every (trajectory, step), blue raising that step's log-prob, red lowering "
    "it, on **one scale for all maps** (a map whose largest push is 10x or more below the scale's end "
    "says so in its title: GPG and Dr. GRPO divide by more, so their maps look pale; choose *a scale per "
    "objective* to see their pattern). The top row is the first update of an iteration (every ratio "
    "1); the bottom row comes after N AdamW updates on a copy of the model, where clipping switches units "
    "off (x). Chunk-GRPO uses the chunks of the **Chunks** tab; the credit comes from **Attribution**. "
    "**Click a cell** (trajectory i, step t; or set them below) to see that objective's formula with the cell's "
    "numbers.")

RUNS_INTRO = gloss(
    "Every fine-tuning run on disk, from this app or the command line: its objective (GRPO, Chunk-GRPO, ...), "
    "how far it got, its reward and its held-out accuracy. Choose runs to compare a metric across them; "
    "load one in the model picker at the top to measure its credit before and after.")

FINETUNE_INTRO = gloss(
    "Fine-tune the policy: every iteration samples a group of trajectories per prompt with the SDE sampler, "
    "turns rewards into "
    "advantages and updates the model with the chosen objective, which raises or lowers the log-prob of each "
    "trained step (Chunk-GRPO uses the chunk schedule below; every objective clips its importance ratio at the "
    f"clip range). The objectives: {', '.join(objective_names())}; "
    "the **Objectives** tab shows what each pushes on your group. Runs go in a separate process; Before / Now "
    "show the same held-out prompts and noise before and after.")

VOCABULARY = (f"**shapes** {', '.join(SHAPES)} · **colours** {', '.join(COLORS)} · **sizes** {', '.join(SIZES)} · "
              f"**positions** {', '.join(POSITIONS)} · **backgrounds** {', '.join(BACKGROUNDS)} "
              "(write e.g. *on a white background*). Unspecified attributes are left to the model.")
SPECKLE_NOTE = ("*Speckle* is the mean difference between neighbouring pixels (a clean render scores about 0.02). "
                "Flow-GRPO's SDE injects noise on its second-to-last step that the last, nearly noiseless step "
                "cannot remove, so its final images carry speckle that the rewards score; the CPS sampler, or an SDE "
                "window that ends a few steps before the end, gives clean images (docs/samplers.md).")


def welcome_panel(wb=None, demo: gr.Blocks | None = None) -> tuple[gr.Accordion, gr.Button]:
    """The welcome, open on every visit, and its button into Learn (wired by the layout to the tabs); its text is
    written again as each page loads (`waits.timed`), with the rate measured by then."""
    with gr.Accordion("Welcome: start here", open=True, elem_id="welcome") as panel:
        timed(demo, partial(welcome_text, wb), "welcome-text")
        start = gr.Button("Start with Learn", variant="primary", elem_id="welcome-btn")
    return panel, start


def go_to_learn():
    """Welcome button -> (tabs on Learn, welcome folded)."""
    return gr.Tabs(selected="learn"), gr.Accordion(open=False)


def glossary_tab() -> None:
    gr.Markdown(glossary_markdown("## Glossary", links=False), elem_id="glossary")
