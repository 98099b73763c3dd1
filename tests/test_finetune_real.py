"""The Fine-tune tab with a real model (a tiny random SD3 folder): the resolution, dtype, micro-batch, KL, prompts,
checkpointing and offload controls reach the TrainConfig the app hands to the training process, the estimate line
names them and its verdict, Start is refused with that line when the run cannot fit, and every bad value is one
line naming its control; through the handlers, and through gradio_client up to a finished run and its LoRA file."""

from __future__ import annotations

import json
import socket
import time
from types import SimpleNamespace

import pytest

from workbench.models.lora import LORA_FILE
from workbench.ui import run_handlers as rh
from workbench.ui import train_form as tf
from workbench.ui.state import Session
from workbench.ui.workbench import Workbench

FORM = ("chunk_grpo", "", "1,1", 3e-5, 1, 2, 2, 4, "flow_grpo", "")  # objective ... window (G=2, T=2, LoRA r4)
REAL = (32, "float32", "auto", 0.01, 2, True, False)  # resolution, dtype, micro-batch, KL, prompts, ckpt, offload



@pytest.fixture
def wb(sd3_dir, tmp_path, monkeypatch):
    wb = Workbench(model=str(sd3_dir), device="cpu", runs_root=str(tmp_path / "runs"))
    started = []
    monkeypatch.setattr(wb.jobs, "start", lambda config: started.append(config) or SimpleNamespace(run_id="r1"))
    wb.started = started
    return wb


def test_the_controls_start_at_the_models_defaults(wb):
    defaults = tf.real_defaults(wb)
    assert list(defaults) == list(tf.REAL_FIELDS)
    assert defaults["resolution"] == 32 and defaults["micro_batch"] == tf.AUTO  # the model's own 32 px
    assert defaults["gradient_checkpointing"] is True  # on for LoRA runs of real models
    assert rh.form_config(wb, *FORM[:7], tf.REAL_MODEL_LORA_RANK, *FORM[8:], "none",
                          *defaults.values()).lora_rank == tf.REAL_MODEL_LORA_RANK


def test_the_controls_go_into_the_train_config_and_the_estimate_names_them(wb):
    out = rh.start_run(wb, *FORM, "none", Session(), *REAL)
    assert out[-1].startswith("✓ started run r1"), out[-1]
    config = wb.started[-1]
    assert (config.resolution, config.dtype, config.kl_beta, config.prompts_per_iteration) == (32, "float32", 0.01, 2)
    assert (config.gradient_checkpointing, config.offload_text_encoders, config.lora_rank) == (True, False, 4)
    assert config.micro_batch == config.minibatch_size == 4  # auto: the whole minibatch fits the host
    line = rh.memory_estimate(wb, *FORM, "none", *REAL)
    assert line.startswith("**Memory estimate of an iteration** at 32 px, float32, LoRA r4, micro-batch 4 of 4 "
                           "transitions (auto), KL 0.01, 2 prompts per iteration, gradient checkpointing on, text "
                           "encoders on the device") and "fits: needs about" in line
    fixed = rh.form_config(wb, *FORM, "none", 32, "bfloat16", "2", 0, 1, False, True)
    assert (fixed.micro_batch, fixed.dtype, fixed.kl_beta, fixed.checkpointing, fixed.offload_text_encoders) == (
        2, "bfloat16", 0.0, False, True)


def test_auto_takes_the_largest_micro_batch_that_fits_and_start_is_refused_when_none_does(wb, monkeypatch):
    from dataclasses import replace

    from workbench.train.dry_run import estimate_run

    whole = rh.form_config(wb, *FORM, "none", *REAL[:2], "4", *REAL[3:])
    needs = {m: estimate_run(replace(whole, micro_batch=m), "cpu")[0].total for m in (1, 2, 3, 4)}
    assert needs[1] < needs[2] < needs[3] < needs[4]
    monkeypatch.setattr("workbench.core.budget.free_bytes", lambda device: int((needs[2] + needs[3]) / 2))
    assert rh.form_config(wb, *FORM, "none", *REAL).micro_batch == 2  # the plan `workbench train` makes
    status = rh.start_run(wb, *FORM, "none", Session(), *REAL[:2], "4", *REAL[3:])[-1]  # a fixed 4 does not fit
    assert status.startswith("⚠ not started: the memory estimate at 32 px, float32, LoRA r4, micro-batch 4 of 4 "
                             "transitions, KL 0.01") and status.endswith(
        "the smallest change that fits: Micro-batch (transitions per pass) auto"), status
    monkeypatch.setattr("workbench.core.budget.free_bytes", lambda device: int(needs[1] / 2))
    line = rh.memory_estimate(wb, *FORM, "none", *REAL)
    assert line.startswith("⚠ ") and "micro-batch 1 of 4 transitions (auto)" in line and "does not fit" in line
    status = rh.start_run(wb, *FORM, "none", Session(), *REAL)[-1]
    assert status.startswith("⚠ not started: the memory estimate at 32 px, float32, LoRA r4, micro-batch 1 of 4 "
                             "transitions (auto), KL 0.01, 2 prompts per iteration, gradient checkpointing on, text "
                             "encoders on the device does not fit: needs about ") and "none of the settings" in status
    assert not wb.started  # nothing was handed to a training process


@pytest.mark.parametrize(("position", "value", "message"), [
    (0, 33, "Resolution (px) must be a multiple of 2 up to 4096 for this model"),
    (0, None, "Resolution (px) is empty"),
    (0, 8192, "Resolution (px) must be a multiple of 2 up to 4096"),
    (1, "float16", "Weights dtype must be one of bfloat16, float32, got 'float16'"),
    (2, "lots", "Micro-batch (transitions per pass) must be auto or a whole number >= 1, got 'lots'"),
    (2, "0", "Micro-batch (transitions per pass) must be auto or a whole number >= 1"),
    (3, -0.1, "KL weight beta must be >= 0"),
    (3, "x", "KL weight beta must be a number"),
    (4, 0, "Prompts per iteration must be a whole number >= 1"),
    (4, 65, "Prompts per iteration is at most 64 in the app"),
    (5, "yes", "Gradient checkpointing must be true or false, got 'yes'"),
    (6, 1, "Text encoders off the device must be true or false, got 1"),
])
def test_a_bad_value_is_one_line_naming_its_control(wb, position, value, message):
    real = list(REAL)
    real[position] = value
    status = rh.start_run(wb, *FORM, "none", Session(), *real)[-1].replace("\\", "")
    assert status.startswith("⚠ " + message) and "\n" not in status, status
    assert not wb.started


def test_toy_lessons_and_the_embedded_model(wb, tmp_path):
    assert "teaches the embedded model's toy world" in rh.start_run(wb, *FORM, "crosses", Session(), *REAL)[-1]
    assert "teaches the embedded model's toy world" in rh.load_lesson(wb, "crosses")[-1]
    assert rh.load_lesson(wb, "none")[7] == tf.REAL_MODEL_LORA_RANK  # "none" keeps a real model's LoRA form
    embedded = Workbench(device="cpu", runs_root=str(tmp_path / "runs"))
    assert "are for SD3 / FLUX models" in rh.start_run(embedded, *FORM[:7], 0, *FORM[8:], "none", Session(),
                                                       *REAL)[-1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_app_starts_a_real_fine_tune_through_gradio_client(sd3_dir, tmp_path):
    from gradio_client import Client

    from app import create_app
    from workbench.train.store import RunStore

    demo, wb = create_app(str(sd3_dir), device="cpu", runs_root=str(tmp_path / "runs"))
    port = free_port()
    demo.queue().launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        params = [p["label"] for p in client.view_api(print_info=False, return_format="dict")["named_endpoints"]
                  ["/start_run"]["parameters"]]
        assert [p.split(" (")[0] for p in params[-7:]] == [tf.LABELS[f].split(" (")[0] for f in tf.REAL_FIELDS]
        *_, status = client.predict(*FORM, "none", 33, *REAL[1:], api_name="/start_run")
        assert status.startswith("⚠ Resolution (px) must be a multiple of 2"), status
        *_, status = client.predict(*FORM, "none", *REAL, api_name="/start_run")
        assert status.startswith("✓ started run"), status
        run = wb.jobs.root / status.split("started run ")[1].split(" ")[0]
        deadline = time.time() + 300
        while time.time() < deadline and RunStore(run).status().get("state") in (None, "running"):
            time.sleep(1)
        info = RunStore(run).info()
        assert info.state == "finished", (info.status, (run / "train.log").read_text()[-2000:]
                                          if (run / "train.log").exists() else "")
        saved = json.loads((run / "config.json").read_text())
        assert {k: saved[k] for k in ("resolution", "dtype", "kl_beta", "prompts_per_iteration", "micro_batch",
                                      "gradient_checkpointing", "offload_text_encoders", "lora_rank")} == {
            "resolution": 32, "dtype": "float32", "kl_beta": 0.01, "prompts_per_iteration": 2, "micro_batch": 4,
            "gradient_checkpointing": True, "offload_text_encoders": False, "lora_rank": 4}
        assert (RunStore(run).checkpoints()[0] / LORA_FILE).is_file()  # the run leaves a diffusers LoRA
    finally:
        demo.close()
