"""The running app through gradio_client: the public endpoints answer, errors come back as messages."""

from __future__ import annotations

import pytest
from app_support import free_port

PROMPT = "a small blue ring in the center on a black background"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    from gradio_client import Client

    from app import create_app
    from workbench.models.embedded import build_embedded, save_embedded

    model = save_embedded(build_embedded(seed=0), tmp_path_factory.mktemp("model"))
    demo, _ = create_app(str(model), device="cpu", runs_root=str(tmp_path_factory.mktemp("runs")))
    port = free_port()
    demo.queue().launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    try:
        yield Client(f"http://127.0.0.1:{port}/", verbose=False)
    finally:
        demo.close()


def test_generate_endpoint(client):
    gallery, strip, logprob, heatmap, rates, status = client.predict(PROMPT, 3, 4, 0.7, 0, "adherence",
                                                                     api_name="/generate")
    assert status.startswith("✓ sampled G=3 trajectories of T=4 steps")
    assert len(gallery) == 3 and all(item["caption"].startswith(f"#{i} reward ") for i, item in enumerate(gallery))
    assert strip.endswith(".png")
    assert logprob["type"] == "plotly" and "Per-step log-prob" in logprob["plot"]


def test_bad_prompt_is_a_message_not_an_error(client):
    *_, status = client.predict("a red hexagon", 3, 4, 0.7, 0, "adherence", api_name="/generate")
    assert status.startswith("⚠ unknown word 'hexagon'")


def test_timer_and_internal_events_are_private(client):
    names = set(client.view_api(print_info=False, return_format="dict")["named_endpoints"])
    assert {"/generate", "/attribute", "/chunks_from_spec", "/start_run", "/stop_run"} <= names
    assert not any(name.startswith("/partial") for name in names)


def test_importing_app_builds_and_launches_nothing():
    import gradio as gr

    import app

    args = app.parse_args([])
    assert (args.host, args.port, args.model, args.runs) == ("127.0.0.1", 7860, None, "runs")
    assert not any(isinstance(value, gr.Blocks) for value in vars(app).values())


def test_a_terminated_app_asks_its_runs_to_stop():
    """SIGTERM runs the atexit handlers, where the app asks its fine-tunes to stop (`JobManager.shutdown`)."""
    import subprocess
    import sys
    from pathlib import Path

    child = ("import atexit, os, signal, time\nimport app\napp.exit_on_terminate()\n"
             "atexit.register(lambda: print('shutdown', flush=True))\nos.kill(os.getpid(), signal.SIGTERM)\n"
             "time.sleep(30)\n")
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.stdout == "shutdown\n" and done.returncode == 128 + 15, (done.returncode, done.stderr[-500:])


def test_objectives_and_boundary_endpoints(client):
    names = set(client.view_api(print_info=False, return_format="dict")["named_endpoints"])
    assert {"/objectives", "/objectives_cell", "/chunks_toggle", "/learn_example"} <= names
    client.predict(PROMPT, 3, 4, 0.7, 0, "adherence", api_name="/generate")  # this client's session: G=3, T=4
    curve, chunk_map, spec, rates, status = client.predict("1", api_name="/chunks_toggle")  # 1,1,1,1
    assert status == "✓ removed the boundary after step 1: chunks 1,2,1" and spec == "1,2,1"
    assert "Temporal dynamics and chunks [1, 2, 1]" in curve and 'class="wb-chunk-map"' in chunk_map
    *_, status = client.predict("3", api_name="/chunks_toggle")
    assert status.startswith("⚠ a boundary can follow steps 0..2")
    maps, summary, formula, status = client.predict(1, 1e-3, 1e-4, "step_grpo", api_name="/objectives")
    assert status.startswith("✓ explained") and "| gspo | grpo |" in summary and "<math" in formula
    # an update of the maps' markup (outlined) and of their selected cell, the prop the page places the outline by
    assert 'data-trace="moved|chunk_grpo"' in maps["value"] and 'class="wb-outline"' in maps["value"]
    assert maps["props"]["selected"] == {"trace": "moved|chunk_grpo", "i": 0, "t": 0}
    maps, formula, status = client.predict("gpg", "ratio1", 2, 3, api_name="/objectives_cell")
    assert status == "✓ gpg at i=2, t=3" and "<b>gpg</b> at trajectory i = 2, step t = 3, at ratio 1" in formula


def test_the_lesson_endpoint_fills_the_form(client):
    *form, about, status = client.predict("crosses", api_name="/load_lesson")
    assert status.startswith("✓ loaded the lesson") and "Lesson: crosses" in about
    assert form[1] == "shape_match" and form[9] == "0,8"
