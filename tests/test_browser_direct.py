"""In headless chromium: the quick events the page sends itself (`workbench/ui/direct.py`)."""

from __future__ import annotations

import json

from browser_support import BROWSER, LONG, expect, generate

pytestmark = BROWSER

CLONES = """() => {
  const clone = window.structuredClone;
  window.wbClones = 0;
  window.structuredClone = (...args) => { window.wbClones++; return clone(...args); };
}"""  # Svelte's $state.snapshot clones every leaf value with it: Gradio's loading-status pass counted


def chunks_tab(page, address: str):
    page.add_init_script(f"({CLONES})()")
    page.goto(address)
    generate(page, group=2, steps=8)
    page.get_by_role("tab", name="Chunks").click()
    status = page.locator("#chunks-status")
    expect(status).to_contain_text("over T=8 steps", timeout=LONG)
    expect(page.locator("#curve-plot .gtitle")).to_contain_text("[1, 2, 2, 3]", timeout=LONG)
    return status, page.locator("#chunk-spec textarea")


def test_an_edit_is_one_call_of_its_endpoint_without_gradios_pass(page, url):
    status, spec = chunks_tab(page, url)
    sent = []
    page.on("request", lambda request: sent.append(request) if "/gradio_api/" in request.url else None)
    page.wait_for_timeout(300)
    sent.clear()
    clones = page.evaluate("() => window.wbClones")
    spec.fill("4,4")
    spec.press("Enter")
    expect(status).to_contain_text("typed: chunks 4,4", timeout=LONG)
    expect(page.locator("#curve-plot .gtitle")).to_contain_text("[4, 4]", timeout=LONG)
    page.wait_for_timeout(300)
    edit_clones = page.evaluate("() => window.wbClones") - clones
    calls = [r for r in sent if r.method == "POST"]
    paths = [r.url.split("/gradio_api/")[1].split("?")[0] for r in calls]
    assert paths == ["run/chunks_from_spec"], [r.url for r in calls]
    body = json.loads(calls[0].post_data)
    assert body["data"] == ["4,4", None] and body["session_hash"]  # the State is the server's: null, as Gradio sends
    page.get_by_role("tab", name="Generate").click()  # an event with a server function: Gradio's pass runs
    clones = page.evaluate("() => window.wbClones")
    page.click("#generate-btn")
    expect(page.locator("#generate-status")).to_contain_text("sampled G=2", timeout=LONG)
    page.wait_for_timeout(300)
    generate_clones = page.evaluate("() => window.wbClones") - clones
    assert generate_clones > 200 and edit_clones < generate_clones / 4, (edit_clones, generate_clones)


def test_a_failed_call_is_a_status_message_and_the_next_call_goes_through(page, url):
    status, spec = chunks_tab(page, url)
    page.route("**/gradio_api/run/chunks_from_spec*", lambda route: route.fulfill(
        status=500, content_type="application/json", body=json.dumps({"error": "the server is *down*_now"})))
    spec.fill("4,4")
    spec.press("Enter")
    expect(status).to_contain_text("⚠ the app refused the call (the server is *down*_now); nothing changed",
                                   timeout=LONG)  # escaped Markdown: the * and _ show
    expect(spec).to_have_value("4,4")  # what was typed stays; the map and the curve keep the last valid chunks
    expect(page.locator("#curve-plot .gtitle")).to_contain_text("[1, 2, 2, 3]")
    page.unroute("**/gradio_api/run/chunks_from_spec*")
    page.route("**/gradio_api/run/chunks_from_spec*", lambda route: route.abort())  # no answer at all
    spec.fill("8")
    spec.press("Enter")
    expect(status).to_contain_text("⚠ the app did not answer (", timeout=LONG)
    expect(status).to_contain_text("is it still running? Reload the page once it is")
    expect(page.locator("#curve-plot .gtitle")).to_contain_text("[1, 2, 2, 3]")
    page.unroute("**/gradio_api/run/chunks_from_spec*")
    spec.fill("2,6")
    spec.press("Enter")
    expect(status).to_contain_text("typed: chunks 2,6", timeout=LONG)
    expect(page.locator("#curve-plot .gtitle")).to_contain_text("[2, 6]", timeout=LONG)


FETCHES = """() => {
  const fetch = window.fetch.bind(window);
  window.wbCalls = [];
  window.fetch = async (...args) => {
    const call = {url: String(args[0]), sent: performance.now()};
    window.wbCalls.push(call);
    try { return await fetch(...args); } finally { call.done = performance.now(); }
  };
}"""  # every request the page sends, with when it left and when its reply came


def test_quick_edits_are_sent_one_at_a_time_and_land_in_order(page, url):
    page.add_init_script(f"({FETCHES})()")
    status, spec = chunks_tab(page, url)
    page.evaluate("() => { window.wbCalls = []; }")
    for button in ("#split-btn", "#merge-btn", "#split-btn", "#merge-btn"):  # the slider sits at T/2 = 4
        page.click(button)
    expect(status).to_contain_text("merged the chunk starting at step 4 into the one before: chunks 1,2,2,3",
                                   timeout=LONG)
    expect(spec).to_have_value("1,2,2,3")
    page.wait_for_timeout(300)
    calls = [c for c in page.evaluate("() => window.wbCalls") if "/gradio_api/run/" in c["url"]]
    assert [c["url"].split("?")[0].rsplit("/", 1)[1] for c in calls] == ["chunks_split", "chunks_merge"] * 2, calls
    assert all(b["sent"] >= a["done"] for a, b in zip(calls, calls[1:])), calls  # each waited for the one before
