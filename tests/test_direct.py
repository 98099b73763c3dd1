"""The quick events the page sends itself (`workbench/ui/direct.py`): how they are bound. In chromium:
tests/test_browser_direct.py."""

from __future__ import annotations

import json

import gradio as gr
import pytest

from workbench.ui.direct import direct, direct_js


def call_of(js: str) -> dict:
    """The call a page script sends (its CALL object)."""
    return json.loads(js.split("const call = ", 1)[1].split(";  //", 1)[0])


def test_the_page_sends_its_values_and_null_for_each_state():
    with gr.Blocks():
        spec, session, view, chart, status = gr.Textbox(), gr.State(), gr.State(), gr.Plot(), gr.Markdown()
        call = call_of(direct_js("edit", [spec, session, view], [chart, session, status], forward="curve-plot"))
    assert call == {"api": "edit", "data": [0, None, None], "keep": [0, 2], "forward": "curve-plot"}


def test_a_direct_event_is_a_page_event_beside_a_server_endpoint():
    def edit(spec, session):
        return spec, session, "✓ done"

    with gr.Blocks() as demo:
        spec, session, text, status = gr.Textbox(), gr.State(), gr.Textbox(), gr.Markdown()
        button = gr.Button()
        direct([button.click, spec.submit], edit, [spec, session], [text, session, status], api_name="edit_it")
    deps = demo.get_config_file()["dependencies"]
    server = [d for d in deps if d["api_name"] == "edit_it"]
    assert len(server) == 1 and server[0]["backend_fn"] and not server[0]["queue"]
    assert server[0]["inputs"] == [spec._id, session._id] and server[0]["outputs"] == [text._id, session._id,
                                                                                        status._id]
    page = [d for d in deps if [list(t) for t in d["targets"]] == [[button._id, "click"], [spec._id, "submit"]]]
    assert len(page) == 1 and not page[0]["backend_fn"]  # no server function: Gradio's loading-status pass skipped
    assert page[0]["inputs"] == [spec._id] and page[0]["outputs"] == [text._id, status._id]
    assert call_of(page[0]["js"]) == {"api": "edit_it", "data": [0, None], "keep": [0, 2], "forward": None}


def test_the_last_output_must_be_the_status():
    with gr.Blocks(), pytest.raises(ValueError, match="status Markdown"):
        spec, status = gr.Textbox(), gr.Markdown()
        direct([spec.submit], lambda s: (s, ""), [spec], [status, spec], api_name="bad")


def test_the_apps_quick_events_are_sent_by_the_page():
    from app import create_app

    demo, _ = create_app()
    deps = demo.get_config_file()["dependencies"]
    by_api = {d["api_name"]: d for d in deps}
    quick = ("chunks_from_spec", "chunks_from_chunker", "chunks_split", "chunks_merge", "chunks_toggle",
             "objectives_select", "objectives_click")
    sent = {call_of(d["js"])["api"]: d for d in deps if d["js"] and "const call = " in d["js"]}
    assert set(sent) == set(quick)
    for name in quick:
        assert by_api[name]["backend_fn"] and not by_api[name]["queue"], name  # the endpoint the page calls
        assert not sent[name]["backend_fn"] and sent[name]["targets"], name
    assert call_of(sent["chunks_toggle"]["js"])["forward"] == "curve-plot"
