"""ui/frames.py's middleware puts its script first in every HTML page and leaves every other response as it was (the
page draws no frames while idle: tests/test_browser_redraw.py)."""

from __future__ import annotations

import gzip

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from workbench.ui.frames import HeadScript

PAGE = "<!doctype html><html><head><title>t</title></head><body>é</body></html>"


def client() -> TestClient:
    async def chunks():
        for part in ("<html><he", "ad><title>t</title></head>", "<body></body></html>"):
            yield part.encode()

    routes = [Route("/", lambda request: HTMLResponse(PAGE)),
              Route("/api", lambda request: JSONResponse({"head": "<head>"})),
              Route("/stream", lambda request: StreamingResponse(chunks(), media_type="text/html")),
              Route("/packed", lambda request: Response(gzip.compress(b"<head></head>"), media_type="text/html",
                                                        headers={"content-encoding": "gzip"})),
              Route("/headless", lambda request: HTMLResponse("<p>no head</p>"))]
    return TestClient(Starlette(routes=routes, middleware=[Middleware(HeadScript, script="ran()")]))


def test_every_html_page_starts_its_head_with_the_script():
    with client() as c:
        page = c.get("/")
        assert page.text == PAGE.replace("<head>", "<head><script>ran()</script>")
        assert int(page.headers["content-length"]) == len(page.content)  # the body grew: its length follows
        assert c.head("/").headers["content-length"] == c.get("/").headers["content-length"]  # HEAD says GET's
        streamed = c.get("/stream")
        assert streamed.text == "<html><head><script>ran()</script><title>t</title></head><body></body></html>"


def test_other_responses_pass_untouched():
    with client() as c:
        assert c.get("/api").json() == {"head": "<head>"}
        assert c.get("/headless").text == "<p>no head</p>"
        assert c.get("/packed").text == "<head></head>"  # compressed: not opened

