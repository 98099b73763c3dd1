"""The Chunks tab: a chunk schedule edited by sizes, a chunker, Split / Merge at a step or a click on the temporal-
dynamics curve, each edit redrawing the curve's boundaries and the chunk credit map (`handlers.chunks_*`).

Registered with the other tabs by `layout`.
"""

from __future__ import annotations

from functools import partial

import gradio as gr

from workbench.core.glossary import gloss
from workbench.rl.chunking import chunker_info, chunker_names
from workbench.ui import figures
from workbench.ui import handlers as h
from workbench.ui.progress import QUIET
from workbench.ui.reveal import reveal
from workbench.ui.tabs import Page
from workbench.ui.welcome import CHUNKS_INTRO
from workbench.viz.chunk_map import chunk_map_hint
from workbench.viz.dynamics_svg import dynamics_hint


def chunks_tab(page: Page) -> gr.Textbox:
    wb, session, tab = page.wb, page.session, page.tab
    gr.Markdown(CHUNKS_INTRO, elem_id="chunks-intro")
    with gr.Row():
        spec = gr.Textbox("2,3,4,7", label="Chunk sizes (sum = T)", elem_id="chunk-spec", scale=3)
        apply = gr.Button("Apply sizes", elem_id="apply-spec-btn", scale=1)
    with gr.Row():
        chunker = gr.Dropdown(chunker_names(menu=True), value="temporal", label="Chunker", scale=2)
        option = gr.Number(4, precision=0, label=" / ".join(f"{chunker_info(n).option().label} ({n})" for n in
                                                             chunker_names(menu=True) if chunker_info(n).option()),
                           scale=2)
        use = gr.Button("Apply chunker", elem_id="apply-chunker-btn", scale=1)
    with gr.Row():
        step = gr.Slider(1, 15, 8, step=1, label="Step", scale=3,
                         info="Split: a new chunk starts at this step (the line left of it). Merge: the chunk that "
                              "starts here joins the one before.")
        split = gr.Button("Split here", elem_id="split-btn", scale=1)
        merge = gr.Button("Merge here", elem_id="merge-btn", scale=1)
    status = gr.Markdown(elem_id="chunks-status")
    rates = gr.Markdown(elem_id="chunks-rates")
    gr.Markdown(gloss("**Click the curve** at step t to add or remove the chunk boundary after step t (the "
                      "dashed line at t + 0.5).", ("denoising step",)))
    curve = figures.curve_view(dynamics_hint("the curve of the model's denoising steps is computed when the tab opens"),
                               label="Temporal dynamics", elem_id="curve-plot")
    chunk_map = figures.chunk_map_view(chunk_map_hint(h.CHUNK_MAP_HINT), label="Chunk credit",
                                       elem_id="chunk-credit-plot")  # markup: an edit redraws it in milliseconds
    outputs = [curve, chunk_map, spec, rates, session, status]  # an edit's
    tab.select(partial(h.chunks_view, wb), [session], [step, status], api_visibility="private",
               show_progress_on=[curve]).then(  # the views read the session once the curve is computed
        partial(h.chunks_shown, wb), [session], [curve, chunk_map, spec, rates, status], api_visibility="private",
        queue=False, **QUIET)
    # Milliseconds each, no progress flashes. Queued one at a time in the order they came, every one: two edits sent
    # at once (a click, then a button) each read the session the other left, where outside the queue both read the
    # same session and the second reply undid the first edit.
    quick = dict(**QUIET, concurrency_id="chunk-edit", concurrency_limit=1, trigger_mode="multiple")
    # The link and the address bar follow each edit as they follow any change of the session (share.wire).
    # The buttons above the status line: their answer is brought into view (an edit on the curve is made where
    # its answer is drawn, and the page stays there).
    gr.on([apply.click, spec.submit], partial(h.chunks_from_spec, wb), [spec, session], outputs,
          api_name="chunks_from_spec", **quick).then(**reveal("chunks-status"))
    use.click(partial(h.chunks_from_chunker, wb), [chunker, option, session], outputs, api_name="chunks_from_chunker",
              **quick).then(**reveal("chunks-status"))
    split.click(partial(h.chunks_split, wb), [step, session], outputs, api_name="chunks_split", **quick)
    merge.click(partial(h.chunks_merge, wb), [step, session], outputs, api_name="chunks_merge", **quick)
    curve.toggle(h.curve_clicked(wb), [session], outputs, api_visibility="private", **quick)  # a click on the curve
    point = gr.Textbox(label="Step t after which to toggle the boundary", visible=False)  # the API's click
    api = gr.Button(visible=False)
    api.click(partial(h.chunks_toggle, wb), [point, session], outputs, api_name="chunks_toggle", **quick)
    return spec
