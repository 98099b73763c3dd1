"""Draw each figure once per change: a page script that drops Gradio's wasted Plotly calls.

Measured in chromium (issue 24): Gradio's plot component re-mounts its plotly element whenever the figure changes
(a `{#key}` block in its Plot wrapper). Before the old element goes, its own effect calls `Plotly.react` on it
with the new figure, then the new element draws it again; each call is followed by `Plotly.Plots.resize`. A chunk
edit that updates two figures so drew four and resized four times, most of the edit's latency.

`REDRAW_JS` (bound with `demo.load(js=...)`) wraps both functions once plotly is loaded and runs each call a
microtask later, after Svelte's update has finished: a call on an element no longer in the page (the re-mounted
one) is dropped, a `react` with the figure the element already shows is dropped, and a `resize` that follows a
draw of an element whose size did not change is dropped. Any new figure on an element in the page is drawn.
`window.wbRedraw` counts drawn and dropped calls (read by the browser tests and scripts/bench_app.py).

Chunk edits do not send the temporal-dynamics curve again: only its title and boundary lines change, sent as a
`layout_patch` and applied in place (`relayout_js`); the curve is redrawn whole when the Chunks tab opens.
"""

from __future__ import annotations

REDRAW_JS = """
() => {
  const later = (gd, work) => new Promise((resolve, reject) => queueMicrotask(() => {
    if (!gd || !gd.isConnected) { window.wbRedraw.dropped++; resolve(gd); return; }
    try { Promise.resolve(work()).then(resolve, reject); } catch (err) { reject(err); }
  }));
  const size = (gd) => gd.clientWidth + "x" + gd.clientHeight;
  const patch = (P) => {
    if (!P || P.wbOnce || typeof P.react !== "function" || !P.Plots) return;
    P.wbOnce = true;
    window.wbRedraw = {drawn: 0, dropped: 0, relayouts: 0};
    const react = P.react.bind(P), resize = P.Plots.resize.bind(P.Plots);
    P.react = (gd, data, layout, config) => later(gd, () => {
      const figure = JSON.stringify([data, layout]);
      if (gd.wbFigure === figure && gd._fullLayout) { window.wbRedraw.dropped++; return gd; }
      gd.wbFigure = figure;
      window.wbRedraw.drawn++;
      const drawn = react(gd, data, layout, config);
      gd.wbSize = size(gd);  // react sized the plot to its container (autosize)
      return drawn;
    });
    P.Plots.resize = (gd) => later(gd, () => {
      if (gd.wbSize === size(gd)) { window.wbRedraw.dropped++; return gd; }
      gd.wbSize = size(gd);
      return resize(gd);
    });
  };
  if (window.Plotly) { patch(window.Plotly); return; }
  let plotly;
  Object.defineProperty(window, "Plotly", {configurable: true, enumerable: true,
    get: () => plotly, set: (value) => { plotly = value; patch(value); }});
}
"""


def layout_patch(figure, keys: tuple[str, ...] = ("title", "shapes")):
    """The parts of a figure's layout that a chunk edit changes ({"title": ..., "shapes": [...]}), sent instead of
    the figure: `RELAYOUT_JS` applies them to the element already in the page with `Plotly.relayout`.

    Measured in chromium: Gradio re-mounts a plot for every new figure and draws it from scratch (~30 ms for the
    temporal-dynamics curve); a relayout of the boundary lines and title on the drawn curve costs a few ms, and
    the curve's data does not change with the chunks. Anything that is not a figure (`gr.skip()` after a refused
    edit) passes through."""
    if not hasattr(figure, "layout"):
        return figure
    layout = figure.layout.to_plotly_json()
    return {key: layout.get(key) for key in keys}


def relayout_js(plot: str) -> str:
    """The `js=` of a hidden JSON component's change event: apply a `layout_patch` to the plot with elem_id."""
    return (f"(patch) => {{ const gd = document.querySelector('#{plot} .js-plotly-plot'); "
            "if (gd && patch && window.Plotly) { window.Plotly.relayout(gd, patch); "
            "window.wbRedraw && window.wbRedraw.relayouts++; } }")
