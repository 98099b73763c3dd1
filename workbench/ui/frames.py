"""An idle page draws no frames: a script served first in the page's head that parks Gradio's leaked timer loops.

Measured in chromium (issue 24): an idle page of the app (nothing pending, nothing moving) still drew 60 frames a
second, for as long as it stayed open, and any Gradio 6 page did the same (a page of one textbox and one button).
Chromium spent 0.067-0.068 CPU-seconds per second on the idle page, 0.009-0.014 with this module's script
(`scripts/bench_idle.py --page`, the EPYC), and 0.22 against 0.17-0.18 while a lesson was watched
(docs/perf-data/epyc/README.md). The loop is Gradio's
status tracker (js/statustracker/static/index.svelte): while its status is "pending" it asks for an animation frame
on every frame, to count the seconds it shows, and stops when the status changes. Its Svelte 4 version also stopped
when the tracker was removed (`onDestroy`); the Svelte 5 one does not, so a tracker removed while pending keeps
asking for frames for ever: here from the page's load on (the page's loading tracker, inferred: no tracker in the page
was pending).

`FRAMES_JS` wraps `requestAnimationFrame` before any of Gradio's modules takes it: a frame asked for from the
tracker's module while no tracker in the page shows a pending status is given a second later, by a timer, instead.
A leaked loop then runs once a second, without drawing; a tracker that shows its seconds runs at the frame rate, and
so do the leaked loops while it does. Everything else asks for frames as before. The script has to come before
Gradio's modules (they keep the function they find when they load), which neither `launch(head=...)` nor
`demo.load(js=...)` do (Gradio adds both once its modules run): `HeadScript` puts it at the top of every HTML page
the server sends. If a later Gradio names its chunks otherwise, nothing is parked and nothing breaks.
"""

from __future__ import annotations

FRAMES_JS = """(() => {
    const ask = window.requestAnimationFrame.bind(window);
    const shown = () => document.querySelector('[data-testid="status-tracker"]:not(.hide) .progress-text') !== null;
    window.requestAnimationFrame = (callback) => {
        if (!shown() && (new Error().stack || "").includes("/statustracker-")) {
            setTimeout(() => callback(performance.now()), 1000);
            return 0;
        }
        return ask(callback);
    };
})();"""


class HeadScript:
    """ASGI middleware: every HTML page the app sends gets `<script>script</script>` first in its head. Any other
    response (the API, the event stream, files) passes through untouched."""

    def __init__(self, app, script: str = FRAMES_JS):
        self.app = app
        self.tag = f"<script>{script}</script>".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, body = None, []

        async def rewrite(message):
            nonlocal start
            if message["type"] == "http.response.start" and _plain_html(message["headers"]):
                start = message  # held until the whole body is in
                return None
            if start is None or message["type"] != "http.response.body":
                return await send(message)
            body.append(message.get("body", b""))
            if message.get("more_body"):
                return None
            sent = b"".join(body)
            page = _with_tag(sent, self.tag)
            if page != sent:  # else (no head, a HEAD request's empty body) the headers stay as they were
                headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
                start = {**start, "headers": [*headers, (b"content-length", str(len(page)).encode())]}
            await send(start)
            return await send({"type": "http.response.body", "body": page})

        return await self.app(scope, receive, rewrite)


def _plain_html(headers) -> bool:
    """An uncompressed HTML response."""
    fields = {k.lower(): v for k, v in headers}
    return fields.get(b"content-type", b"").startswith(b"text/html") and b"content-encoding" not in fields


def _with_tag(page: bytes, tag: bytes) -> bytes:
    """page with tag right after its first <head>; unchanged without one."""
    at = page.find(b"<head>")
    return page if at < 0 else page[: at + 6] + tag + page[at + 6:]
