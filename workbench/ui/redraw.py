"""Draw each figure once per change: a page script that drops Gradio's wasted Plotly calls.

Measured in chromium (issue 24): Gradio's plot component re-mounts its plotly element whenever the figure changes
(a `{#key}` block in its Plot wrapper). Before the old element goes, its own effect calls `Plotly.react` on it
with the new figure, then the new element draws it again; each call is followed by `Plotly.Plots.resize`. A chunk
edit that updates two figures so drew four and resized four times, most of the edit's latency.

`REDRAW_JS` (bound with `demo.load(js=...)`) wraps both functions once plotly is loaded and runs each call a
microtask later, after Svelte's update has finished: a call on an element no longer in the page (the re-mounted
one) is dropped, a `react` with the figure the element already shows is dropped, and a `resize` that follows a
draw of an element whose size did not change is dropped. Any new figure on an element in the page is drawn.
`window.wbRedraw` counts drawn and dropped calls (read by the browser tests and scripts/bench_app.py), and the
changes applied by `Plotly.relayout` where a shape could not be moved in place (`relaid`).

REDRAW_JS also takes the href of Gradio's `<base href="./">` away when the page loads. With it, plotly wrote its clip
paths as `url('<the page's address>#clip…')`, the address of each element's first draw; once the share link had changed
the address (ui/share.py), chromium took a clip path plotly drew later on such an element (the curve's new lines after a
chunk edit) for a reference into another document: it fetched the whole page from the server (9 times in 14 edits,
~410 kB and ~35 ms of the server's CPU each) and did not clip. Without the href plotly writes `url(#clip…)`; the page's
relative addresses resolve as before, "./" being the page's own folder (docs/perf-data/epyc/README.md, "Where a chunk
edit's time goes in the page").

`preload_plotly_js()` (bound with `demo.load(js=...)` too) imports Gradio's plotly chunk (4.6 MB) once the page is
idle. Gradio imports it at the page's first figure, and evaluating it held the page's main thread ~1.1 s on the EPYC
(the trace of a first Generate: 0.86 s of the 1.9 s from the click to its status). A first Generate pressed after the
page had stayed idle 3 s took 1.12-1.18 s against 2.12-2.77 s before (`scripts/bench_app.py --read 3`, three runs of
each commit alternated; docs/perf-data/epyc/README.md). The module is the same one Gradio then imports, evaluated once.

A change to a figure can also ride on another output (`carried_relayout`, applied by `CARRIED_JS`): a chunk edit
changes only the title and the boundary lines of the temporal-dynamics curve, so the edit returns the chunk map
(HTML, viz/chunk_map.py) with that change in its `data-relayout`, and the map's own script applies it to the curve
with `Plotly.relayout` as the map changes. Measured in chromium (issue 24): a relayout of the curve takes ~10 ms,
drawing it afresh ~21 ms plus Gradio's re-mount, and the server no longer builds the curve on every edit (handler
32 -> 18 ms). The curve's value in Gradio keeps the schedule of the tab's last opening; the tab sends the whole
curve again whenever it opens. `window.wbRedraw.patched` counts the changes applied.

A change can also come alone (`shape_change`, applied by `SHAPE_JS` in an event's `.then`): a click on an objective
map, or a cell chosen with the controls below the maps, moves only the gold outline of the selected cell, so the
handler returns no figure and the page moves the shape, where Gradio re-mounted the whole figure of 40 panels and
plotly drew them all again. A rectangle on linear axes is moved in place (its layout, its SVG path and the clip of
its group, which plotly clips to the shape's subplot):
`Plotly.relayout` of one shape re-coerces every trace and axis of the figure, ~100 ms here. The element then no
longer shows the figure Gradio holds, so the next figure Gradio sends is always drawn (Gradio sends none equal to
the one it holds: the controls must move the outline back the same way). Measured in chromium (issue 24,
`scripts/bench_app.py`, G=8, T=16, two runs of each commit alternated): a map click to the first frame showing its
status, formula and outline 367 / 361 ms -> 137 / 135 ms (medians of 7 clicks).
"""

from __future__ import annotations

import json
from pathlib import Path

REDRAW_JS = """
() => {
  // plotly's clip paths stay within the page when the share link changes its address (the module's docstring); this
  // runs before the page draws its first figure, a shared link's too
  const base = document.querySelector("base[href]");
  if (base && new URL(base.getAttribute("href"), location.href).href === new URL("./", location.href).href) {
    base.removeAttribute("href");
  }
  const later = (gd, work) => new Promise((resolve, reject) => queueMicrotask(() => {
    if (!gd || !gd.isConnected) { window.wbRedraw.dropped++; resolve(gd); return; }
    try { Promise.resolve(work()).then(resolve, reject); } catch (err) { reject(err); }
  }));
  const size = (gd) => gd.clientWidth + "x" + gd.clientHeight;
  const patch = (P) => {
    if (!P || P.wbOnce || typeof P.react !== "function" || !P.Plots) return;
    P.wbOnce = true;
    window.wbRedraw = {drawn: 0, dropped: 0, patched: 0, relaid: 0};
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

CARRIED_JS = """
// an HTML component's js_on_load (Gradio binds element and watch): each new value's data-relayout, a change to
// another plot, is applied to that plot as the value is shown
watch("value", () => {
  const carrier = element.querySelector("[data-relayout]");
  const change = carrier && JSON.parse(carrier.dataset.relayout);
  const gd = change && document.querySelector(`#${change.elem} .js-plotly-plot`);
  if (!gd || !gd._fullLayout || !window.Plotly) return;
  gd.wbFigure = undefined;  // no longer the figure Gradio sent: REDRAW_JS draws the next one, even the same
  if (window.wbRedraw) window.wbRedraw.patched++;
  window.Plotly.relayout(gd, change.relayout);
});
"""


def carried_relayout(elem: str, update: dict) -> dict:
    """The change `CARRIED_JS` applies: `update` (a `Plotly.relayout` argument) to the plot with elem_id `elem`."""
    return {"elem": elem, "relayout": update}


SHAPE_JS = """
(change) => {
  const c = change ? JSON.parse(change) : null;
  const gd = c && document.querySelector(`#${c.elem} .js-plotly-plot`);
  if (!gd || !gd._fullLayout || !window.Plotly) return [""];
  const shapes = gd.layout.shapes || [];
  const k = shapes.findIndex((shape) => shape.name === c.name);
  if (k < 0 && !c.shape) return [""];
  gd.wbFigure = undefined;  // no longer the figure Gradio sent: REDRAW_JS draws the next one, even the same
  if (window.wbRedraw) window.wbRedraw.patched++;
  // A rectangle on linear axes is moved in place: its input and full layout, and the path plotly drew for it
  // ("M x0,y0 H x1 V y1 H x0 Z" in page pixels of its axes). Plotly.relayout re-coerces the whole figure (every
  // trace and axis: ~100 ms for the 40 maps on this machine class) to move one shape.
  // Its group is clipped to its subplot: the clip follows the shape to its new subplot. A shape whose group has no
  // such clip (paper coordinates, or another plotly that clips elsewhere) is left to plotly.
  const full = gd._fullLayout.shapes?.[k], path = gd.querySelector(`.shapelayer path[data-index="${k}"]`);
  const s = c.shape, xa = s && gd._fullLayout[s.xref?.replace("x", "xaxis")];
  const ya = s && gd._fullLayout[s.yref?.replace("y", "yaxis")];
  const group = path?.parentNode, clip = group?.getAttribute("clip-path");  // url(#clip<uid>x12y12)
  const subplot = full && clip?.match(new RegExp(`${full.xref}${full.yref}(['"]?[)])$`));
  if (subplot && path && s?.type === "rect" && full.type === "rect" && xa?.type === "linear" && ya?.type === "linear") {
    const x = (v) => xa._offset + xa.l2p(v), y = (v) => ya._offset + ya.l2p(v);
    group.setAttribute("clip-path", clip.slice(0, subplot.index) + `${s.xref}${s.yref}${subplot[1]}`);
    Object.assign(shapes[k], s);
    for (const key of ["x0", "x1", "y0", "y1", "xref", "yref"]) full[key] = s[key];
    path.setAttribute("d", `M${x(s.x0)},${y(s.y0)}H${x(s.x1)}V${y(s.y1)}H${x(s.x0)}Z`);
    return [""];
  }
  // otherwise plotly: an object at shapes[k] is inserted there and null removes the shape; a move sets its attributes
  const update = k < 0 ? {[`shapes[${shapes.length}]`]: s} : !s ? {[`shapes[${k}]`]: null}
    : Object.fromEntries(Object.entries(s).map(([key, value]) => [`shapes[${k}].${key}`, value]));
  if (window.wbRedraw) window.wbRedraw.relaid++;
  window.Plotly.relayout(gd, update);
  return [""];  // emptied: an event that fails leaves nothing for the next .then to apply again
}
"""


def shape_change(elem: str, name: str, shape: dict | None) -> str:
    """The change `SHAPE_JS` applies: the shape named `name` of the plot with elem_id `elem` becomes `shape` (added
    where the plot has none, removed where `shape` is None)."""
    return json.dumps({"elem": elem, "name": name, "shape": shape})


PRELOAD_JS = """
() => {
  const idle = window.requestIdleCallback ?? ((work) => setTimeout(work, 1000));
  idle(() => import(new URL("assets/CHUNK", document.baseURI).href).catch(() => {}), {timeout: 5000});
}
"""


def plotly_chunk() -> str | None:
    """The file name of Gradio's plotly chunk among its frontend's assets, or None where there is not exactly one."""
    import gradio

    found = list((Path(gradio.__file__).parent / "templates" / "frontend" / "assets").glob("PlotlyPlot-*.js"))
    return found[0].name if len(found) == 1 else None


def preload_plotly_js() -> str | None:
    """The page script that imports plotly's chunk once the page is idle (the module's docstring); None without one."""
    chunk = plotly_chunk()
    return None if chunk is None else PRELOAD_JS.replace("CHUNK", chunk)
