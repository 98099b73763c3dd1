"""A standalone HTML page of one group, to hand out: its images, credit maps, chunk view, the objectives' maps,
the numbers with their errors, the settings and the command that reproduces them.

The page opens in a browser without Python and without network: plotly's JavaScript is inlined once, the
pictures are PNG data URIs. `group_page` collects the parts from a measured group, `render_page` writes them
as HTML, `write_page` puts a measured group's page on disk (the app's Export button and `workbench export`).
"""

from __future__ import annotations

import base64
import html
import io
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import plotly.graph_objects as go
from markdown_it import MarkdownIt
from PIL import Image

from workbench.core.errors import WorkbenchError

PAGE_LIMIT = 10_000_000  # bytes: a page stays small enough to e-mail


@dataclass
class Page:
    title: str
    settings: dict  # name -> value, shown as a table
    command: str  # the command line that reproduces the page
    numbers: str  # Markdown: the rates with their errors
    pictures: list[tuple[str, Image.Image]] = field(default_factory=list)  # (caption, picture)
    figures: list[tuple[str, go.Figure]] = field(default_factory=list)  # (heading, figure)
    link: str = ""  # the app address that opens the same view, if known


def _png(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def render_page(page: Page) -> str:
    """The page as one self-contained HTML string (no external resource)."""
    from plotly.offline import get_plotlyjs

    md = MarkdownIt("commonmark").enable("table")
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
                   for k, v in page.settings.items())
    pictures = "".join(f'<figure><img alt="{html.escape(c)}" src="{_png(img)}"><figcaption>{html.escape(c)}'
                       "</figcaption></figure>" for c, img in page.pictures)
    figures = "".join(f"<h2>{html.escape(h)}</h2>" + fig.to_html(full_html=False, include_plotlyjs=False,
                                                                   config={"responsive": True})
                      for h, fig in page.figures)
    link = (f'<p>Open the same view in the app: <a href="{html.escape(page.link)}">{html.escape(page.link)}</a></p>'
            if page.link.startswith(("http://", "https://")) else "")  # never another scheme in an href
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(page.title)}</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 8px;text-align:left}}
figure{{display:inline-block;margin:0 1em 1em 0}}img{{image-rendering:pixelated;max-width:100%}}
pre{{background:#f4f4f4;padding:0.5em;white-space:pre-wrap}}a{{word-break:break-all}}</style>
<script type="text/javascript">{get_plotlyjs()}</script></head><body>
<h1>{html.escape(page.title)}</h1>
<h2>Settings</h2><table>{rows}</table>
<p>Reproduce it (the same seeds give the same numbers):</p><pre>{html.escape(page.command)}</pre>{link}
<h2>Numbers</h2>{md.render(page.numbers)}
<h2>Pictures</h2>{pictures}
{figures}
<p><small>Made by the Chunk-GRPO Workbench; the words are explained in docs/glossary.md.</small></p>
</body></html>
"""


def group_page(group, rewards, advantages, credit, z: float, x0_strip: Image.Image, settings: dict, command: str,
               link: str = "", curve=None) -> Page:
    """The parts of a group's page: final images and x0 filmstrip, log-probs, step and chunk credit, the
    temporal-dynamics curve (`curve`: a DynamicsCurve, optional) and every objective's push at ratio 1."""
    from workbench.core.imaging import grid
    from workbench.rl.explain import explain, paired_advantages
    from workbench.rl.objectives import OBJECTIVES, ObjectiveSettings
    from workbench.train.presets import gfpo_scores
    from workbench.viz import credit_view, plots
    from workbench.viz.explain_plots import objective_maps_figure

    names = OBJECTIVES.names()
    old = group.log_probs  # (G, T): at ratio 1 the policy is the sampling policy
    paired = paired_advantages(rewards, names, metric=gfpo_scores(group))  # gfpo filters by its second score
    ex = explain(old, old, paired, ObjectiveSettings(chunks=list(credit.sizes)), names,
                 group.config.sde_mask().expand_as(old))
    captions = ", ".join(f"{i}: r {float(r):.3f}, A {float(a):+.2f}" for i, (r, a) in enumerate(zip(rewards,
                                                                                                   advantages)))
    figures = [("Log-probs of the sampled steps", plots.logprob_figure(group.log_probs, rewards, group.stds)),
               ("Step credit and the GRPO advantage", credit_view.attribution_figure(credit, z)),
               ("Chunk credit", credit_view.chunk_figure(credit, z))]
    if curve is not None:
        low, high = curve.quantiles
        figures.append(("Temporal dynamics and the chunks", plots.dynamics_figure(
            curve.mean, low, high, credit.sizes, curve.per_trajectory.shape[0])))
    figures.append(("What each objective pushes (at ratio 1)",
                    objective_maps_figure([("ratio1", "at ratio 1", ex)], credit.step_credit)))
    pictures = [(f"final images, left to right ({captions})", grid(group.images, ncol=group.group_size, scale=3)),
                ("x0 predictions: one row per trajectory, one column per step", x0_strip)]
    return Page(title=f"Chunk-GRPO Workbench: '{group.prompt}'", settings=settings, command=command,
                numbers=credit_view.rates_text(credit, z), pictures=pictures, figures=figures, link=link)


def export_command(settings: dict) -> str:
    """The `workbench export` command line that reproduces a page with these settings."""
    flags = [("--prompt", settings["prompt"]), ("--group", settings["G"]), ("--steps", settings["T"]),
             ("--noise-level", settings["noise level"]), ("--sde", settings["sampler"]), ("--seed", settings["seed"]),
             ("--reward", settings["reward"]), ("--chunks", settings["chunks"]),
             ("--continuations", settings["continuations"]), ("--estimator", settings["estimator"]),
             ("--z", settings["z"])]
    if "precision" in settings:  # the continuations' numerics, resolved: a rerun elsewhere measures the same way
        flags.append(("--precision", settings["precision"]))
    if settings.get("model") not in (None, "", "base", "embedded model"):
        flags.append(("--model", settings["model"]))
    return "python -m workbench export " + " ".join(f"{k} {shlex.quote(str(v))}" for k, v in flags) + " --out page.html"


def write_page(policy, group, rewards, advantages, credit, z: float, settings: dict, out: Path,
               link: str = "", curve=None) -> Path:
    """Render the page of a measured group to `out` (with the model's L1_rel `curve`, a DynamicsCurve, when
    given); refuses a page over `PAGE_LIMIT` bytes."""
    from workbench.flow.pictures import x0_filmstrip

    strip = x0_filmstrip(policy, group, max_columns=16, thumb=64)
    text = render_page(group_page(group, rewards, advantages, credit, z, strip, settings, export_command(settings),
                                  link, curve))
    size = len(text.encode("utf-8"))
    if size > PAGE_LIMIT:
        raise WorkbenchError(f"the page would be {size / 1e6:.1f} MB (limit {PAGE_LIMIT / 1e6:.0f} MB): "
                             "export a smaller group (--group, --steps)")
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    except OSError as err:
        raise WorkbenchError(f"cannot write {out}: {err.strerror or err}; choose a writable path") from None
    return out
