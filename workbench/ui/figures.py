"""The figures a learner clicks or edits, as `gr.HTML` components: markup the server draws, a few lines of script each.

- **The temporal-dynamics curve** (Chunks tab, viz/dynamics_svg.py): a click on a step's column triggers the
  component's `toggle` event with {step}; the layout binds it to `handlers.chunks_toggle` (`handlers.curve_clicked`).
- **The objectives' maps** (Objectives tab, viz/push_maps.py): a click on a cell triggers `cell` with {trace, x: step
  t, y: trajectory i}, bound to `objectives.objectives_click`; hovering a cell shows its values. The component's
  `selected` prop ({trace, i, t}) places the gold outline: a handler that only chooses a cell returns
  `gr.HTML(selected=...)` (`selection`) and the maps, 20 of them, are not sent again.
- **The chunk map** (Chunks tab, viz/chunk_map.py): markup only.

Their style rules are the page's (`CSS`, in `launch(css=...)`), not each component's `css_template`: gr.HTML writes a
css_template into the page's stylesheet again on every update of the component, a new selection included, and
chromium then restyles every element the rules name (the maps' 2,500 cells: ~90 ms of a map click on a busy core).

Everything here is gr.HTML's documented API (`html_template`, `js_on_load` with `element`, `props`, `trigger` and
`watch`; `gr.EventData` for a triggered event's data, props updated by returning `gr.HTML(prop=...)`),
working on markup the server drew: no script reads Plotly's or Gradio's private state (tests/test_no_private_js.py).
"""

from __future__ import annotations

import json

import gradio as gr

from workbench.core.errors import WorkbenchError, shorten
from workbench.viz.chunk_map import CSS as CHUNK_MAP_CSS
from workbench.viz.dynamics_svg import CSS as CURVE_CSS
from workbench.viz.push_maps import CSS as MAPS_CSS

CSS = CURVE_CSS + CHUNK_MAP_CSS + MAPS_CSS  # the figures' rules, each under its drawing's own class

CURVE_JS = """
element.addEventListener('click', (event) => {
  const column = event.target.closest('rect.step');
  if (column) trigger('toggle', {step: Number(column.dataset.step)});
});
"""

MAPS_JS = """
const root = () => element.querySelector('svg[data-rows]');
const panelOf = (trace) => [...element.querySelectorAll('g.panel')].find((g) => g.dataset.trace === trace);
const place = () => {  // the gold outline on props.selected ({trace, i, t}); none where no map shows it
  const svg = root(), s = props.selected, panel = s && panelOf(s.trace);
  let box = svg?.querySelector('rect.wb-outline');
  if (!svg || !panel) { box?.remove(); return; }
  if (!box) {
    box = document.createElementNS('http://www.w3.org/2000/svg', 'rect');
    for (const [k, v] of Object.entries({class: 'wb-outline', fill: 'none', stroke: 'gold', 'stroke-width': 3,
                                         'pointer-events': 'none'})) box.setAttribute(k, v);
    svg.appendChild(box);
  }
  const d = panel.dataset, w = d.w / svg.dataset.cols, h = d.h / svg.dataset.rows;
  box.setAttribute('x', (+d.x + s.t * w).toFixed(1));
  box.setAttribute('y', (+d.y + s.i * h).toFixed(1));
  box.setAttribute('width', w.toFixed(1));
  box.setAttribute('height', h.toFixed(1));
};
watch(Object.keys(props), place);  // value and selected; a prop's name in quotes here would make Gradio take it
place();                            // for an event of this component (HTML.__getattr__) and send that in its updates
const cellAt = (event) => {  // the map and cell under the pointer, from the map's place in the drawing
  const panel = event.target.closest?.('g.panel'), svg = root();
  if (!panel || !svg) return null;
  const p = new DOMPoint(event.clientX, event.clientY).matrixTransform(svg.getScreenCTM().inverse());
  const d = panel.dataset, rows = +svg.dataset.rows, cols = +svg.dataset.cols;
  const t = Math.min(cols - 1, Math.max(0, Math.floor((p.x - d.x) / d.w * cols)));
  const i = Math.min(rows - 1, Math.max(0, Math.floor((p.y - d.y) / d.h * rows)));
  return {panel, i, t};
};
element.addEventListener('click', (event) => {
  const c = cellAt(event);
  if (c) trigger('cell', {trace: c.panel.dataset.trace, x: c.t, y: c.i});
});
const read = new WeakMap();  // a map's values, parsed once
const tip = (c) => {
  const d = c.panel.dataset;
  if (!read.has(c.panel)) read.set(c.panel, {z: JSON.parse(d.z), ratio: d.ratio && JSON.parse(d.ratio)});
  const {z, ratio} = read.get(c.panel), v = z[c.i][c.t], at = `traj ${c.i}, step ${c.t}`;
  if (d.kind === 'credit') return `${at}: credit ${v}`;
  if (d.kind === 'l') return `${at}: l = ${v}`;
  const clipped = d.clipped[c.i * z[0].length + c.t] === '1' ? ', clipped: no gradient' : '';
  return `${d.trace.split('|')[1]}: ${at}: push −w = ${v}, ratio used ${ratio[c.i][c.t]}${clipped}`;
};
element.addEventListener('mousemove', (event) => {
  const box = element.querySelector('.wb-tip'), c = cellAt(event);
  if (!box) return;
  if (!c) { box.style.display = 'none'; return; }
  const frame = element.getBoundingClientRect();
  box.textContent = tip(c);
  box.style.left = `${event.clientX - frame.left + 14}px`;
  box.style.top = `${event.clientY - frame.top + 14}px`;
  box.style.display = 'block';
});
element.addEventListener('mouseleave', () => {
  const box = element.querySelector('.wb-tip');
  if (box) box.style.display = 'none';
});
"""


def curve_view(value: str, **options) -> gr.HTML:
    """The temporal-dynamics curve; its `toggle` event carries the clicked step."""
    return gr.HTML(value, js_on_load=CURVE_JS, apply_default_css=False, **options)


def maps_view(value: str, **options) -> gr.HTML:
    """The objectives' maps; its `cell` event carries the clicked cell, its `selected` prop places the outline."""
    return gr.HTML(value, selected=None, js_on_load=MAPS_JS, apply_default_css=False,
                   **options)


def chunk_map_view(value: str, **options) -> gr.HTML:
    """The classified chunk map: markup, no script."""
    return gr.HTML(value, js_on_load=None, apply_default_css=False, **options)


def maps(markup: str, selected: dict | None) -> gr.HTML:
    """New maps with their outline on `selected` ({trace, i, t} or None)."""
    return gr.HTML(value=markup, selected=selected)


def selection(selected: dict | None) -> gr.HTML:
    """The outline moved to `selected`; the maps stay as they are."""
    return gr.HTML(selected=selected)


CLICK_LIMIT = 1000  # characters of a clicked point: {"trace": ..., "x": ..., "y": ...}


def clicked_point(value) -> dict:
    """{"trace", "x", "y"} from a clicked point (a dict, as a figure's event carries it, or its JSON), or from a plain
    number (the step, for API callers)."""
    if isinstance(value, (int, float)):
        return {"trace": "", "x": value, "y": None}
    if isinstance(value, dict):
        point, text = value, json.dumps(value)
    else:
        text = str(value or "").strip()
        if len(text) > CLICK_LIMIT:
            raise WorkbenchError(f"a clicked point is a few numbers, not {len(text)} characters")
        try:
            point = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            raise WorkbenchError(f"a click must be a step number or a clicked point, got {shorten(text)}") from None
    if isinstance(point, (int, float)):
        return {"trace": "", "x": point, "y": None}
    if not isinstance(point, dict) or "x" not in point:
        raise WorkbenchError(f"a clicked point needs an x, got {shorten(text)}")
    return {"trace": str(point.get("trace", "")), "x": point["x"], "y": point.get("y")}
