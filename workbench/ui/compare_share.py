"""A Compare that can be shared: its link reopens both groups and the table, and Export writes both to one page.

The link of a view with a comparison adds `compare=KEY` (the second policy's picker key) to the view's query
(`share.view_link`); opening it samples the session's group, then compares it with KEY exactly as the Compare button
does (`open_compare`). `write_compare_page` renders both groups, the one-sentence headline and the table as one
standalone page (`viz.page`), the same parts the Attribution tab shows.
"""

from __future__ import annotations

from pathlib import Path

import torch

from workbench.core.errors import WorkbenchError, shorten
from workbench.ui.state import Session, format_sizes


def open_compare(wb, key: str, continuations: int, session: Session, estimator: str, progress=None) -> tuple:
    """(session with the comparison, (figure, images, text)) of a link's compare=KEY, or an error naming it."""
    from workbench.ui import policies

    try:  # the handler itself: its guarded form escapes its message, which open_link's guard escapes again
        out = policies.compare.__wrapped__(wb, key, continuations, session, estimator, progress=progress)
    except WorkbenchError as err:
        raise WorkbenchError(f"the link's compare={shorten(key)}: {err}") from None
    return out[3], out[:3]


def write_compare_page(session: Session, link: str, out: Path) -> Path:
    """Both groups of the session's comparison, their credit maps, the headline and the table, as one page."""
    from workbench.core.imaging import grid
    from workbench.ui.compare_text import headline, images_label
    from workbench.viz import credit_view
    from workbench.viz.page import PAGE_LIMIT, Page, render_page

    comparison, z = session.comparison, session.z
    first = comparison.credits[0]
    g = comparison.groups[0]
    settings = {"policy before (top row)": comparison.labels[0], "policy after (bottom row)": comparison.labels[1],
                "prompt": g.prompt, "seed": g.config.seed, "G": g.group_size, "T": g.num_steps,
                "noise level": g.config.noise_level, "sampler": g.config.sde, "reward": session.reward_spec,
                "chunks": format_sizes(session.sizes), "continuations": int(first.counts.max()),
                "estimator": first.estimator, "z": z}
    images = grid(torch.cat([group.images for group in comparison.groups]), ncol=g.group_size, scale=3)
    page = Page(title=f"Chunk-GRPO Workbench: '{g.prompt}' under two policies", settings=settings,
                command="open the link below in the app (it samples both groups again with the same seeds)",
                numbers=headline(comparison, z) + "\n\n" + credit_view.comparison_text(comparison, z),
                pictures=[(images_label(comparison), images)],
                figures=[("Step credit under two policies", credit_view.comparison_figure(comparison, z))], link=link)
    text = render_page(page)
    if len(text.encode("utf-8")) > PAGE_LIMIT:
        raise WorkbenchError("the comparison's page is over the size limit: compare a smaller group")
    out.write_text(text, encoding="utf-8")
    return out
