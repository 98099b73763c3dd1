"""The words of the workbench, each explained once: shown in the app's Glossary tab, written to
docs/glossary.md (`python -m workbench.core.glossary > docs/glossary.md`; a test checks the file is current),
and hovered where a tab first uses them (`gloss`).

A `Term` has the words the app writes (`forms`, matched as whole words, case-insensitive), one plain
definition and, where it has one, the section of docs/methods.md that gives its formula.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    name: str  # the heading of the entry
    forms: tuple[str, ...]  # how the app writes it; the first occurrence of any form in a text is hovered
    text: str  # the definition, plain sentences (Markdown emphasis allowed)
    methods: str = ""  # the section of docs/methods.md with its formula, if any

    @property
    def anchor(self) -> str:
        return "term-" + re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")


TERMS = (
    Term("GRPO", ("GRPO", "Step GRPO", "step GRPO"),
         "Group Relative Policy Optimization: sample a *group* of G images for one prompt, score each, and "
         "raise the probability of the denoising steps of the better-than-average images and lower that of "
         "the worse ones. Flow-GRPO and DanceGRPO apply it to diffusion and flow models step by step "
         "(*step GRPO*).", "Advantages"),
    Term("advantage", ("advantage", "advantages"),
         "One number per image of a group: A = (reward - group mean) / group std. GRPO gives every denoising "
         "step of an image its advantage, however much the step itself contributed.", "Advantages"),
    Term("trajectory", ("trajectory", "trajectories"),
         "The path of one image from pure noise to the final picture: the states x_0 (the start noise), x_1, "
         "..., x_T (the image) that the sampler visits, numbered by denoising step. A group holds G trajectories of "
         "one prompt; its trajectories share their start noise unless told otherwise."),
    Term("x0 prediction", ("x0 prediction", "x0 predictions", "x0"),
         "The model's guess, at any step, of the final clean image: where the current state would end if the "
         "rest of the way were one straight jump. The name comes from diffusion papers, whose x0 is the clean "
         "image; this workbench numbers the states by step, so its x_0 is the start noise and x_T the image."),
    Term("policy", ("policy", "policies"),
         "The model being trained, seen as RL sees it: at each denoising step it chooses the next, slightly less "
         "noisy state, at random (the SDE's noise). Every tab uses the policy chosen at the top of the page: the "
         "base model or a fine-tuned run."),
    Term("SDE", ("SDE", "SDE window"),
         "The stochastic sampler: each step adds fresh noise, so the images of a group differ and each step has a "
         "log-prob GRPO can push. *SDE kind* is the recipe (Flow-GRPO's, DanceGRPO's, or coefficients-preserving "
         "cps); the *SDE window* limits the noisy, trained steps to part of the trajectory, the rest deterministic "
         "(ODE)."),
    Term("denoising step", ("denoising step", "denoising steps", "step t"),
         "One move of the sampler from state x_t to x_t+1, a little less noisy. T steps make an image; the "
         "steps that inject noise (the SDE window) are the ones GRPO trains."),
    Term("log-prob", ("log-prob", "log-probs", "log p"),
         "log p(x_t+1 | x_t): how likely the policy was to make the step it made. The sampler's noise makes "
         "each step a Gaussian draw, so the log-prob is that Gaussian's log-density (nats per latent "
         "element here). Training moves log-probs up or down."),
    Term("importance ratio", ("importance ratio", "ratio"),
         "exp(log p_new - log p_old) of a step: how much more likely the step is under the policy being "
         "trained than under the policy that sampled it. It is exactly 1 on the first update of an "
         "iteration (*ratio 1*) and drifts as the model changes.", "Objectives"),
    Term("clipping", ("clipping", "clip", "clipped", "clip range"),
         "PPO's guard: once a step's ratio leaves [1 - ε, 1 + ε] in the direction its advantage pushes, the "
         "step gives no more gradient in that iteration (marked x in the maps).", "Objectives"),
    Term("chunk", ("chunk", "chunks", "chunk schedule"),
         "A run of consecutive denoising steps treated as one unit (GCPO, arXiv 2510.21583): the chunk gets "
         "one importance ratio, the geometric mean of its steps' ratios. The *schedule* lists the sizes of "
         "its K chunks, e.g. 2,3,4,7 (K = 4) for 16 steps.", "Chunk schedules"),
    Term("temporal dynamics (L1_rel)", ("temporal dynamics", "L1_rel"),
         "How much the image changes at each step: L1_rel = |x_t - x_t+1|_1 / |x_t|_1, averaged over "
         "trajectories of several prompts (the model's curve, not one group's). GCPO puts chunk boundaries "
         "where this curve changes pace, so that steps of one chunk do similar work.", "Chunk schedules"),
    Term("credit", ("credit",),
         "What a step really did for the reward: the value of the state after the step minus the value "
         "before it, a value being the mean reward of continuations from that state. The credits of an "
         "image add up to its reward minus the group mean. The last step (and the last chunk) ends at the "
         "image, whose reward is taken as exact: if the reward model gives another number each time it scores "
         "the same image, that noise lands in the last step's credit (re-scoring the image, `rescore`, "
         "measures it).", "Monte-Carlo credit"),
    Term("continuation", ("continuation", "continuations"),
         "A completion of a trajectory from an intermediate state to a final image, with fresh noise. Each "
         "state is valued by the mean reward of its M continuations (`--continuations`); more continuations, "
         "smaller errors.",
         "Monte-Carlo credit"),
    Term("determined", ("determined", "undetermined"),
         "A cell (step or chunk of one image) whose credit differs from 0 beyond its standard error at the "
         "false-call rate z sets (a Student-t test; an exact test where the continuation rewards tie, as a "
         "0/1 reward's do, since a few agreeing continuations have a spread of 0 by chance). Undetermined cells "
         "(grey) cannot be told apart from noise.", "Credit uncertainty"),
    Term("misattributed", ("misattributed", "misattribution"),
         "A determined cell whose credit has the opposite sign of its image's advantage: GRPO pushes the "
         "step the wrong way (marked x).", "Credit uncertainty"),
    Term("aligned", ("aligned",),
         "A determined cell whose credit has the sign of its image's advantage: GRPO pushes it the right "
         "way (marked with a dot).", "Credit uncertainty"),
    Term("push (-w)", ("push", "−w", "-w"),
         "-dL/d log p of one step: how hard an objective's gradient raises (blue, > 0) or lowers (red, < 0) "
         "that step's log-prob. 0 where the step is clipped or untrained.", "Objectives"),
    Term("reward hacking", ("reward hacking", "Reward hacking"),
         "The policy raising its reward by something the reward pays for but nobody wanted: here a checkerboard "
         "texture and shifted colours that the shape reward scores as a better cross. The Fine-tune and Runs tabs "
         "say it when the held-out reward rises while the share of checkered pixel blocks rises too.",
         "Reward hacking"),
    Term("chunk_grpo", ("chunk_grpo", "Chunk-GRPO"),
         "GCPO's objective: the clipped ratio objective per chunk, each chunk's ratio the geometric mean of "
         "its steps', weighted by A / (B K |c|) for K chunks of size |c|.", "Objectives"),
    Term("step_grpo", ("step_grpo",),
         "Flow-GRPO's objective: the PPO-clipped ratio objective on every trained step, each step pushed "
         "by its image's advantage.", "Objectives"),
    Term("gspo", ("gspo", "GSPO"),
         "One ratio per whole trajectory (the geometric mean over all its steps), clipped once: the "
         "sequence-level variant.", "Objectives"),
    Term("dapo", ("dapo", "DAPO"),
         "Step GRPO with a higher upper clip bound (clip-higher), a mean over every trained step of the batch, "
         "and dynamic sampling that refills groups whose rewards are all equal.", "Objectives"),
    Term("gpg", ("gpg", "GPG"),
         "Group Policy Gradient: plain policy gradient, -log p times the advantage, with no ratio and no "
         "clipping; its advantage r - mean is not divided by the group's reward std, so when rewards differ "
         "by hundredths its push is ~100x smaller than GRPO's and its map looks pale on a shared colour "
         "scale.", "Objectives"),
    Term("gfpo", ("gfpo", "GFPO"),
         "Group Filtered Policy Optimization: keeps the half of each group that scores best on a second "
         "metric (here sharpness); only the kept images get an advantage.", "Objectives"),
    Term("dr_grpo", ("dr_grpo", "Dr. GRPO"),
         "GRPO Done Right: the advantage r - mean is not divided by the group's reward std and the loss is "
         "divided by a constant T instead of each trajectory's step count; like GPG's, its push is small "
         "when rewards differ by hundredths.", "Objectives"),
    Term("ppo", ("ppo", "PPO"),
         "Proximal Policy Optimization, the method GRPO was made to simplify: a learned critic V(x_t, t, prompt) "
         "values every state, and each step gets its own advantage from the critic's values by GAE, pushed by "
         "the clipped per-step ratio objective.", "Objectives"),
    Term("dense_grpo", ("dense_grpo",),
         "Per-step advantages from a look-ahead (TP-GRPO): the reward of an ODE completion from each state, "
         "each step credited with the change it made, normalised per step across the group, pushed by the "
         "clipped per-step ratio objective.", "Objectives"),
    Term("reward", ("reward", "rewards"),
         "The score a reward function gives a final image for its prompt (here, in the embedded world, how well "
         "the shape, colour, size, position and background match it). GRPO only sees rewards: it makes a group's "
         "better-scored images more likely.", "Rewards"),
    Term("CFG", ("CFG", "classifier-free guidance", "guidance scale"),
         "Classifier-free guidance: each step evaluates the model with and without the prompt and moves further "
         "in the direction the prompt adds, by the guidance scale (1 = off). It sharpens adherence at twice the "
         "evaluations per step."),
    Term("held-out", ("held-out", "held out", "held-out prompts"),
         "Prompts never trained on, drawn with the same noise at every evaluation of a run: their accuracy says "
         "whether the model learned the task or only the training prompts."),
    Term("common random numbers", ("common random numbers", "CRN"),
         "The continuations of one trajectory share their noise draws (continuation k uses the same noise from "
         "every state), so the difference between two states' values is not blurred by different luck; the "
         "credit's errors shrink.", "Monte-Carlo credit"),
    Term("false-call rate", ("false-call rate",),
         "The chance that a cell whose true credit is 0 is still called misattributed or aligned: P(|N(0,1)| > z) "
         "per cell, 4.6 % at z = 2. A larger z calls fewer cells and fewer of them wrongly.", "False-call rate"),
    Term("GAE", ("GAE",),
         "Generalized Advantage Estimation: each step's advantage from a critic's values of the states, the "
         "discounted sum of the changes of value it and the later steps made (ppo's per-step advantages).",
         "Per-step advantages"),
    Term("credit mass against A", ("credit mass against A", "credit mass against the advantage",
                                   "mass against A"),
         "Of all the credit of a group's determined cells (summed as |credit|), the share in cells whose credit "
         "has the opposite sign of the image's advantage A: how much of what the steps did GRPO pushes the wrong "
         "way, weighing a large misattribution more than a small one.", "Credit uncertainty"),
)


def term(name: str) -> Term:
    """The entry called `name` (its heading)."""
    for t in TERMS:
        if t.name == name:
            return t
    raise KeyError(f"no glossary entry '{name}'; entries: {', '.join(t.name for t in TERMS)}")


def _pattern(t: Term) -> re.Pattern:
    forms = sorted(t.forms, key=len, reverse=True)  # "clip range" before "clip"
    return re.compile(r"(?<![\w<>/\-])(" + "|".join(re.escape(f) for f in forms) + r")(?![\w\-])",
                      re.IGNORECASE if all(f.islower() for f in forms) else 0)


def _plain(text: str) -> str:
    """A definition as the hover text: Markdown emphasis dropped, HTML-escaped for an attribute."""
    return html.escape(text.replace("*", ""), quote=True)


SHIELDED = re.compile(r"`[^`]*`|\$[^$]*\$|<abbr[^>]*>.*?</abbr>|<[^>]+>|\]\([^)]*\)|^#{1,6} .*$",
                      re.MULTILINE)  # code, LaTeX, glossed spans, tags, link targets, headings


def _gloss_one(markdown: str, t: Term) -> str:
    """The first use of `t` outside code, LaTeX, tags and link targets wrapped in <abbr title=...>."""
    if f'<abbr title="{t.name}: ' in markdown:
        return markdown  # already glossed in this text
    pattern, pos = _pattern(t), 0
    spans = [(m.start(), m.end()) for m in SHIELDED.finditer(markdown)] + [(len(markdown), len(markdown))]
    for start, end in spans:
        m = pattern.search(markdown, pos, start)
        if m:
            wrapped = f'<abbr title="{t.name}: {_plain(t.text)}">{m.group(1)}</abbr>'
            return markdown[:m.start()] + wrapped + markdown[m.end():]
        pos = end
    return markdown


def gloss(markdown: str, names: tuple[str, ...] | None = None) -> str:
    """The text with the first use of each term (of `names`, default all) wrapped in
    <abbr title="definition">, so hovering it shows the glossary entry. Words inside `code`, LaTeX or an
    already glossed span are left alone; each term is glossed once per text."""
    for t in TERMS if names is None else [term(n) for n in names]:
        markdown = _gloss_one(markdown, t)
    return markdown


def glossary_markdown(heading: str = "# Glossary", links: bool = True) -> str:
    """Every entry, in order, as Markdown: docs/glossary.md (links=True, links into methods.md) and the app's
    Glossary tab (links=False: a relative link goes nowhere there, so the section is named instead)."""
    def where(section: str) -> str:
        anchor = re.sub(r"[^a-z0-9 -]", "", section.lower()).replace(" ", "-")
        return f"[methods.md, {section}](methods.md#{anchor})" if links else f"docs/methods.md, \"{section}\""

    lines = [heading, "",
             "The words the workbench uses, each in a few plain sentences. In the app, hovering a dotted word "
             "shows its entry.", ""]
    for t in TERMS:
        formula = f" *(formula: {where(t.methods)})*" if t.methods else ""
        lines += [f'<a id="{t.anchor}"></a>**{t.name}**: {t.text}{formula}', ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(glossary_markdown(), end="")
