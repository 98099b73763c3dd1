"""Quick events the page sends itself: a chunk edit or a cell choice without Gradio's pass over every loading status.

Measured in chromium (issue 24): whenever Gradio's page dispatches an event with a server function it updates the
loading status of every component that any event has had as an input or an output so far (37 after a Generate, a
credit measurement and the Chunks tab opened; more with every tab used), once as the request leaves and again as the
reply lands. Each update takes a `$state.snapshot` of the component's props (one `structuredClone` per leaf value:
2479 per chunk edit) and re-renders its status tracker. With the page's main thread slowed twice (the Xeon's page,
`scripts/bench_app.py --slow-page 2`) a chunk edit took 211 ms with that pass and 162 ms without it
(`scripts/probe_loading_pass.py`). The pass is skipped only for an event with no server function; an event's `js=`
runs in the page either way. Against the commit before, alternated: a chunk edit 192 -> 134 ms, a curve click 223 ->
154, a map click 209 -> 151 at half speed, 111 -> 82, 121 -> 90, 119 -> 75 at full speed (docs/perf-data/epyc/README.md,
"Quick events sent by the page itself").

`direct()` binds a quick handler as two events:
- **The server's**: the handler on a button the page never shows, under its `api_name` (the API, `gradio_client` and
  the tests call it as before), without the queue.
- **The page's**: an event with no server function on the real triggers, whose `js` posts the inputs to that
  endpoint (`gradio_api/run/<api_name>`, the same route Gradio's own page posts a queue-free event to, with the
  page's session, so the handler reads and writes the session's `gr.State` as before) and returns the reply's
  values to Gradio, which shows them as it shows a reply. A State is held by the server: the page sends null for
  it (as Gradio's page does) and leaves it out of the outputs it updates.

Calls of a page are sent one at a time, in order (`window.wbDirect`), so replies land in the order of the edits (the
events were `trigger_mode="once"` or `"always_last"`). A handler's own errors are already a status message
(`ui.guard`); a failed call (a lost connection, a refused payload) is one as well, in the status, the last output.
"""

from __future__ import annotations

import json

import gradio as gr

DIRECT_JS = """
async (...values) => {
  const call = CALL;  // {api, data: index of the page's value for each handler input (null: a State), keep, forward}
  if (call.forward) values[0] = window.wbClicks?.[call.forward] ?? values[0];  // the clicked point (ui/clicks.py)
  const data = call.data.map((k) => k === null ? null : values[k]);
  const failed = (text) => [...call.keep.slice(1).map(() => ({__type__: "update"})),  // the status is the last
                            `⚠ ${text.replace(/[\\\\`*_<]/g, "\\\\$&")}`];  // shown literally, as ui/guard.py does
  const send = async () => {
    let reply;
    try {
      const address = new URL(`gradio_api/run/${call.api}${location.search}`, document.baseURI);  // as Gradio's
      reply = await fetch(address, {method: "POST", headers: {"Content-Type": "application/json"},
        body: JSON.stringify({data, event_data: null, session_hash: window.__gradio_session_hash__})});
    } catch (err) {
      return failed(`the app did not answer (${err?.message ?? err}): is it still running? Reload the page once it is`);
    }
    const body = await reply.json().catch(() => ({}));
    if (reply.ok && Array.isArray(body?.data)) return call.keep.map((k) => body.data[k]);
    return failed(`the app refused the call (${body?.error || `HTTP ${reply.status}`}); nothing changed`);
  };
  const turn = (window.wbDirect ?? Promise.resolve()).then(send);  // one call at a time, in order
  window.wbDirect = turn;
  return turn;
}
"""


def direct_js(api_name: str, inputs: list, outputs: list, forward: str | None = None) -> str:
    """The page's `js` calling `api_name` (handler `inputs` -> `outputs`): the page's event has the inputs and outputs
    that are not a `gr.State`; `forward` names a plot whose last clicked point replaces the first input."""
    page_inputs = [c for c in inputs if not isinstance(c, gr.State)]
    call = {"api": api_name, "data": [None if isinstance(c, gr.State) else page_inputs.index(c) for c in inputs],
            "keep": [k for k, c in enumerate(outputs) if not isinstance(c, gr.State)], "forward": forward}
    return DIRECT_JS.replace("CALL", json.dumps(call))


def direct(triggers: list, fn, inputs: list, outputs: list, api_name: str, api_visibility: str = "public",
           forward: str | None = None):
    """Bind `fn` (`inputs` -> `outputs`, the last output its status Markdown) to `triggers` as a call the page sends
    itself (the module's docstring); returns the page's event, for `.then`."""
    if not isinstance(outputs[-1], gr.Markdown):
        raise ValueError("a direct handler's last output must be its status Markdown (a failed call shows there)")
    server = gr.Button(visible=False)  # never shown: its event is the endpoint
    server.click(fn, inputs, outputs, api_name=api_name, api_visibility=api_visibility, queue=False,
                 show_progress="hidden")
    shown_in = [c for c in inputs if not isinstance(c, gr.State)]
    shown_out = [c for c in outputs if not isinstance(c, gr.State)]
    return gr.on(triggers, None, shown_in, shown_out, js=direct_js(api_name, inputs, outputs, forward),
                 show_progress="hidden", api_visibility="private")
