"""Clicks on plotly figures, forwarded to handlers: `gr.Plot` has no click event in Gradio 6.

A script run on page load (`CLICK_JS`, bound with `demo.load(js=...)`) listens for `plotly_click` on the
figures named in `ROUTES`, stores the clicked point as JSON {"trace", "x", "y"} in `window.wbClicks` and clicks a
hidden button; the button's event (`ui.direct.direct(..., forward=plot)`) sends that point as the handler's first
input, in place of the hidden textbox's value, so the handler gets it like any other input. Gradio re-renders a
figure with `Plotly.react` on the same element, which keeps the listener; a new element is bound by a
MutationObserver."""

from __future__ import annotations

import json

from workbench.core.errors import WorkbenchError, shorten

CLICK_LIMIT = 1000  # characters of a forwarded click: {"trace": ..., "x": ..., "y": ...}
ROUTES = {"curve-plot": "curve-click-btn", "objectives-plot": "objectives-click-btn"}  # plot elem_id -> button

CLICK_JS = """
() => {
  const routes = ROUTES_JSON;
  window.wbClicks = window.wbClicks || {};
  const bind = () => {
    for (const [plot, button] of Object.entries(routes)) {
      const gd = document.querySelector(`#${plot} .js-plotly-plot`);
      if (!gd || gd.wbBound || typeof gd.on !== "function") continue;
      gd.wbBound = true;
      gd.on("plotly_click", (event) => {
        const p = event.points[0];
        window.wbClicks[plot] = JSON.stringify({trace: p.data.name || "", x: p.x, y: p.y});
        document.getElementById(button).click();
      });
    }
  };
  new MutationObserver(bind).observe(document.body, {childList: true, subtree: true});
  bind();
}
""".replace("ROUTES_JSON", json.dumps(ROUTES))


def clicked_point(value) -> dict:
    """{"trace", "x", "y"} from a forwarded click, or from a plain number (the step, for API callers)."""
    if isinstance(value, (int, float)):
        return {"trace": "", "x": value, "y": None}
    text = str(value or "").strip()
    if len(text) > CLICK_LIMIT:
        raise WorkbenchError(f"a clicked point is a few numbers, not {len(text)} characters")
    try:
        point = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, a number of more than 4300 digits, brackets nested too deeply
        raise WorkbenchError(f"a click must be a step number or a clicked point, got {shorten(text)}") from None
    if isinstance(point, (int, float)):
        return {"trace": "", "x": point, "y": None}
    if not isinstance(point, dict) or "x" not in point:
        raise WorkbenchError(f"a clicked point needs an x, got {text!r}")
    return {"trace": str(point.get("trace", "")), "x": point["x"], "y": point.get("y")}
