"""A catalogue of hostile input and damaged runs (issues 13 and 22): every refusal is one clear line naming the
flag, field or file, with a non-zero exit, before any work, and nothing already on disk is lost. Issue 22 added
one writer per run folder, no NaN shown as a figure, bounded work, and messages that name the known cause.

The command line runs in-process (`main(argv)`, stderr through capsys); the app's numeric controls go through
gradio's own `process_api`; the handlers are called directly. The model is the random-init tiny one.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gradio as gr
import pytest
import torch
from gradio.state_holder import SessionState
from safetensors.torch import load_file, save_file

from workbench.cli.main import main, to_json
from workbench.core.budget import check_fits, rollout_bytes
from workbench.core.errors import WorkbenchError, one_line
from workbench.core.files import read_json, write_json
from workbench.flow.trajectory import SamplingConfig
from workbench.train import TrainConfig
from workbench.train.store import CONFIG, DAMAGED_METRICS, METRICS, STATUS, STOP, RunStore, list_runs
from workbench.ui import handlers as h
from workbench.ui import run_handlers as rh
from workbench.ui.layout import build_app
from workbench.ui.state import Session
from workbench.ui.workbench import Workbench

PROMPT = "a large red circle in the top left on a white background"
TRAIN = ["train", "--iterations", "2", "--eval-prompts", "0", "--prompts-per-iteration", "1", "--group", "2",
         "--steps", "2", "--chunks", "1,1", "--report-to", "none", "--sample-every", "100"]


@pytest.fixture(scope="module")
def trained(model_dir, tmp_path_factory):
    """A real 2-iteration run of the tiny model, with its checkpoint at iteration 2 (copy it before damaging)."""
    out = tmp_path_factory.mktemp("trained") / "run"
    assert main([*TRAIN, "--model", str(model_dir), "--out", str(out)]) == 0
    return out


def cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the command line run in-process."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def no_trainer(monkeypatch) -> None:
    """Refusals come before any work: building a Trainer (which loads the model) fails the test."""
    import workbench.train

    def trainer(*args, **kwargs):
        raise AssertionError("a Trainer was built before the input was refused")
    monkeypatch.setattr(workbench.train, "Trainer", trainer)


def assert_refused(capsys, argv: list[str], *needles: str) -> str:
    """The command exits 2 with exactly one `error:` line on stderr (short, no traceback) holding the needles."""
    code, out, err = cli(capsys, argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]
    assert len(lines[0]) <= 500 and "Traceback" not in err and "--list" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under folder (relative path -> bytes), to show that a refusal changed nothing."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def copy_run(trained: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "run"))


# --------------------------------------------------------------------------- the command line: flags
SAMPLE = ["sample", "--prompt", PROMPT, "--steps", "2", "--num", "2"]
ATTRIBUTE = ["attribute", "--prompt", PROMPT, "--steps", "3", "--group", "2", "--continuations", "1", "--chunks", "1,2"]
REFUSED_FLAGS = [  # (argv after the command's own, the words the one error line must hold)
    (SAMPLE + ["--num", 10**12], ["whole number in 1..256", "--num"]),  # the table of limits (core/fields.py)
    (SAMPLE + ["--steps", 10**12], ["whole number in 1..200", "--steps"]),
    (ATTRIBUTE + ["--continuations", 10**12], ["whole number in 1..4096", "--continuations"]),
    (SAMPLE + ["--num", "two"], ["--num", "expected a whole number"]),
    (SAMPLE + ["--num", "0"], ["--num", "whole number in 1..256"]),
    (SAMPLE + ["--steps", "-3"], ["--steps", "whole number in 1..200"]),
    (SAMPLE + ["--seed", "-5"], ["--seed", "0..2^63 - 1"]),
    (SAMPLE + ["--seed", 2**70], ["--seed", "0..2^63 - 1"]),
    (SAMPLE + ["--seed", "1.5"], ["--seed", "integer"]),
    (["chunks", "--steps", "4", "--seed", 2**63], ["--seed", "0..2^63 - 1"]),
    (ATTRIBUTE + ["--seed", "-1"], ["--seed", "0..2^63 - 1"]),
    (SAMPLE + ["--noise-level", "nan"], ["--noise-level", "finite"]),
    (SAMPLE + ["--noise-level", "inf"], ["--noise-level", "finite"]),
    (SAMPLE + ["--noise-level", "1e308"], ["--noise-level", "0..10"]),
    (SAMPLE + ["--noise-level", "-0.5"], ["--noise-level", "0..10"]),
    (SAMPLE + ["--shift", "nan"], ["--shift", "finite"]),
    (SAMPLE + ["--shift", "0"], ["--shift", "0.001..1000"]),
    (SAMPLE + ["--guidance-scale", "nan"], ["--guidance-scale", "finite"]),
    (SAMPLE + ["--guidance-scale", "1e308"], ["--guidance-scale", "0..100"]),
    (["chunks", "--noise-level", "-inf"], ["--noise-level", "finite"]),
    (SAMPLE + ["--device", "tpu"], ["--device", "unknown device 'tpu'"]),
    (SAMPLE + ["--device", "cuda:x"], ["--device", "unknown device"]),
    (ATTRIBUTE + ["--chunks", "-1,5"], ["--chunks", ">= 1"]),
    (ATTRIBUTE + ["--chunks", ",".join(["1"] * 5000)], ["--chunks", "has 5000 items; 3 steps take at most 3"]),
    (ATTRIBUTE + ["--chunks", "2,a"], ["--chunks", "integer"]),
    (ATTRIBUTE + ["--precision", "half"], ["--precision", "invalid choice"]),
    (SAMPLE + ["--foo"], ["unrecognized arguments: --foo"]),
    (["bench", "nope"], ["invalid choice"]),
    (["chunks", "--method", "zigzag"], ["valid chunkers"]),
    (["train", "--seed", "-5"], ["--seed", "0..2^63 - 1"]),
    (["train", "--seed", 2**70], ["--seed", "0..2^63 - 1"]),
    (["train", "--lr", "nan"], ["--lr", "finite"]),
    (["train", "--lr", "inf"], ["--lr", "finite"]),
    (["train", "--max-grad-norm", "nan"], ["--max-grad-norm", "finite"]),
    (["train", "--noise-level", "1e999"], ["--noise-level", "finite"]),
    (["train", "--device", "tpu"], ["--device", "unknown device"]),
    (["train", "--window", "5"], ["--window", "START,END"]),
    (["train", "--iterations", "0"], ["iterations must be"]),
    (["train", "--group", 10**6], ["group must be in 2..256"]),
    (["train", "--shift", "1e308"], ["shift must be in"]),
    (["train", "--preset", "nope"], ["nope", "gcpo"]),
    (["train", "--chunks", "-1,17"], [">= 1"]),
    (["train", "--max-sequence-length", "0"], ["max_sequence_length must be a positive integer"]),
    (["train", "--max-sequence-length", "8"], ["max_sequence_length 8", "the embedded model has no T5"]),
]


@pytest.mark.parametrize("argv, needles", REFUSED_FLAGS,
                         ids=[" ".join(map(str, a[-2:]))[:40] for a, _ in REFUSED_FLAGS])
def test_bad_flags_are_one_line_naming_the_flag(capsys, model_dir, tmp_path, argv, needles):
    extra = [] if argv[0] == "bench" else ["--model", model_dir]
    out = ["--out", tmp_path / "g.png"] if argv[0] == "sample" else (["--out", tmp_path / "r"] if argv[0] == "train"
                                                                       else [])
    assert_refused(capsys, [*argv, *extra, *out], *needles)
    assert not (tmp_path / "g.png").exists() and not (tmp_path / "r").exists()  # refused before any work


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("command", [SAMPLE + ["--out", "g.png"], ["train"]])
def test_cuda_without_cuda_is_refused(capsys, command):
    assert_refused(capsys, [*command, "--device", "cuda"], "--device", "'cuda' is not available")


def test_huge_train_sizes_are_refused_from_the_estimate_before_training(capsys, model_dir, tmp_path):
    argv = [*TRAIN, "--group", "256", "--steps", "200", "--prompts-per-iteration", "4096", "--chunks", "200",
            "--model", model_dir, "--out", tmp_path / "r"]
    assert_refused(capsys, argv, "this run does not fit: needs about", "the smallest change that fits:")
    assert not list((tmp_path / "r").iterdir())  # no config, no status, no metrics: nothing started


def test_the_estimate_is_a_pure_function_of_the_sizes():
    one = rollout_bytes(8, 16, (3, 32, 32))
    assert one == 4 * 8 * 2 * (3 * 16 + 1) * 3072
    assert rollout_bytes(8, 16, (3, 32, 32), prompts=4) == 4 * one
    assert rollout_bytes(8, 16, (3, 32, 32), continuations=2) == one + 4 * 8 * 2 * 15 * 2 * 3072
    with pytest.raises(WorkbenchError, match="needs at least 9.6 MB .* 1.0 MB free; lower --num"):
        check_fits(one, "cpu", "G=8 x T=16", "lower --num", free=10**6)


# --------------------------------------------------------------------------- the command line: files
def bad_model(model_dir: Path, tmp_path: Path, edit_config=None, edit_weights=None) -> Path:
    folder = Path(shutil.copytree(model_dir, tmp_path / "bad_model"))
    if edit_config:
        config = json.loads((folder / "config.json").read_text())
        edit_config(config)
        (folder / "config.json").write_text(json.dumps(config))
    if edit_weights:
        tensors = load_file(str(folder / "model.safetensors"))
        edit_weights(tensors)
        save_file(tensors, str(folder / "model.safetensors"))
    return folder


def _poison(value: float):
    def edit(tensors):
        name = sorted(k for k in tensors if k.startswith("transformer."))[0]
        tensors[name] = tensors[name].clone()
        tensors[name].view(-1)[0] = value
    return edit


BAD_MODELS = {
    "layers as a string": (lambda c: c["transformer"].update(num_layers="4"), None, "num_layers must be an integer"),
    "shift as a string": (lambda c: c.update(default_shift="three"), None, "default_shift must be a finite number"),
    "transformer not an object": (lambda c: c.update(transformer=5), None, "transformer must be"),
    "a billion layers": (lambda c: c["transformer"].update(num_layers=10**9), None, "sizes must be in 1..4096"),
    "an unknown key": (lambda c: c.update(colour="red"), None, "colour"),
    "weights with NaN": (None, _poison(float("nan")), "NaN or inf"),
    "weights with inf": (None, _poison(float("inf")), "NaN or inf"),
}


@pytest.mark.parametrize("case", BAD_MODELS)
def test_a_damaged_model_folder_names_its_file(capsys, model_dir, tmp_path, case):
    edit_config, edit_weights, needle = BAD_MODELS[case]
    folder = bad_model(model_dir, tmp_path, edit_config, edit_weights)
    file = "config.json" if edit_config else "model.safetensors"
    assert_refused(capsys, [*SAMPLE, "--model", folder, "--out", tmp_path / "g.png"], str(folder / file), needle)


def test_out_with_an_image_suffix_writes_that_image_and_other_suffixes_are_refused(capsys, model_dir, tmp_path):
    code, out, err = cli(capsys, [*SAMPLE, "--model", model_dir, "--out", tmp_path / "grid.gif"])
    assert code == 0 and (tmp_path / "grid.gif").read_bytes()[:4] == b"GIF8"
    assert_refused(capsys, [*SAMPLE, "--model", model_dir, "--out", tmp_path / "grid.txt"], "--out", "'.txt'")
    assert not (tmp_path / "grid.txt").exists()


def test_json_summaries_are_strict():
    assert to_json({"a": [float("nan"), 1.0, float("inf")]}) == '{"a": [null, 1.0, null]}'
    path = write_json(Path("/tmp") / f"hostile-{time.time_ns()}.json", {"x": float("nan")})
    assert json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(c)) == {"x": None}
    path.unlink()


@pytest.mark.parametrize("case", ["a file", "a non-empty folder", "a run", "unwritable"])
def test_train_out_must_be_a_new_or_empty_folder(capsys, model_dir, trained, tmp_path, case):
    if case == "a file":
        out, needle = tmp_path / "notes.txt", "is a file"
        out.write_text("keep me")
    elif case == "a non-empty folder":
        out, needle = tmp_path / "photos", "is not empty and holds no run"
        out.mkdir()
        (out / "cat.png").write_bytes(b"keep me")
    elif case == "a run":
        out, needle = copy_run(trained, tmp_path), "already holds a run"
    else:
        out, needle = Path("/proc/workbench-nope/run"), "cannot create the run folder"
    before = snapshot(out) if out.is_dir() else (out.read_bytes() if out.exists() else None)
    assert_refused(capsys, [*TRAIN, "--model", model_dir, "--out", out], str(out), needle)
    assert (snapshot(out) if out.is_dir() else (out.read_bytes() if out.exists() else None)) == before


@pytest.mark.parametrize("content, needle", [("{not json", "cannot read"), ('{"lr": "fast"}', "lr must be"),
                                             ('{"colour": 1}', "unknown training settings")])
def test_train_config_file_errors_name_the_file(capsys, model_dir, tmp_path, content, needle):
    path = tmp_path / "config.json"
    path.write_text(content)
    assert_refused(capsys, [*TRAIN, "--config", path, "--out", tmp_path / "r"], str(path), needle)


# --------------------------------------------------------------------------- resume and stop on damaged runs
def _config_field(value):
    def damage(run: Path):
        config = read_json(run / CONFIG)
        config["group"] = value
        (run / CONFIG).write_text(json.dumps(config))
    return damage


REFUSED_RESUMES = {  # damage -> words of the one error line; nothing in the folder may change
    "config with a wrong type": (_config_field("eight"), "group must be an integer"),
    "config with a float count": (_config_field(2.5), "group must be an integer"),
    "config not JSON": (lambda run: (run / CONFIG).write_text("{garbage"), "cannot read"),
    "no checkpoints": (lambda run: shutil.rmtree(run / "checkpoints"), "no complete checkpoint"),
    "checkpoint without weights": (lambda run: (run / "checkpoints" / "iter_0002" / "weights.safetensors").unlink(),
                                   "iter_0002 are incomplete"),
    "checkpoint with NaN weights": (lambda run: _nan_checkpoint(run), "no complete checkpoint"),
    "latest.json into another run": (lambda run: _point_outside(run), "no complete checkpoint"),
}


def _nan_checkpoint(run: Path) -> None:
    path = run / "checkpoints" / "iter_0002" / "weights.safetensors"
    tensors = load_file(str(path))
    save_file({k: torch.full_like(v, float("nan")) for k, v in tensors.items()}, str(path))


def _point_outside(run: Path) -> None:
    """latest.json names a checkpoint in another folder, and the run's own checkpoint is gone."""
    other = run.parent / "other" / "checkpoints"
    shutil.copytree(run / "checkpoints" / "iter_0002", other / "iter_0009")
    shutil.rmtree(run / "checkpoints" / "iter_0002")
    write_json(run / "checkpoints" / "latest.json", {"iteration": 9, "dir": "../../other/checkpoints/iter_0009"})


@pytest.mark.parametrize("case", REFUSED_RESUMES)
def test_resume_refuses_what_it_cannot_continue_and_changes_nothing(capsys, trained, tmp_path, case):
    run = copy_run(trained, tmp_path)
    damage, needle = REFUSED_RESUMES[case]
    damage(run)
    before = snapshot(run)
    assert_refused(capsys, ["train", "--resume", run, "--iterations", "3"], str(run), needle)
    assert snapshot(run) == before  # no metrics row dropped, no status rewritten


def _latest(content: str):
    return lambda run: (run / "checkpoints" / "latest.json").write_text(content)


def _append(data: bytes):
    def damage(run: Path):
        with open(run / METRICS, "ab") as f:
            f.write(data)
    return damage


RANDOM_BYTES, TORN_ROW = bytes(range(256)) * 4, b'{"iteration": 3, "reward/me'
RESUMES = {  # damage -> words of the resume line; the run continues from iteration 2 with rows 1-2 kept
    "latest.json without keys": (_latest("{}"), "latest.json is missing or unreadable"),
    "latest.json not JSON": (_latest("\x00\x01garbage"), "latest.json is missing or unreadable"),
    "latest.json names a missing checkpoint": (_latest('{"iteration": 5, "dir": "iter_0005"}'),
                                               "latest.json names 'iter_0005'"),
    "metrics with random bytes": (_append(RANDOM_BYTES), "from checkpoint iter_0002"),
    "metrics with a torn last line": (_append(TORN_ROW), "from checkpoint iter_0002"),
    "status not JSON": (lambda run: (run / STATUS).write_text("{{{"), "from checkpoint iter_0002"),
}


@pytest.mark.parametrize("case", RESUMES)
def test_resume_continues_from_the_last_complete_checkpoint_and_says_which(capsys, trained, tmp_path, case):
    run = copy_run(trained, tmp_path)
    rows = RunStore(run).metrics()
    damage, needle = RESUMES[case]
    damage(run)
    code, out, err = cli(capsys, ["train", "--resume", run, "--iterations", "3"])
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith(f"resuming {run} from checkpoint iter_0002 (iteration 2)") and needle in first
    after = RunStore(run).metrics()
    assert after[:2] == rows and [r["iteration"] for r in after] == [1, 2, 3]  # nothing before the checkpoint lost
    assert RunStore(run).info().state == "finished"
    if case.startswith("metrics with"):
        damage_bytes = RANDOM_BYTES if "random" in case else TORN_ROW  # every non-empty line of it, kept aside
        kept = [line + b"\n" for line in damage_bytes.splitlines() if line.strip()]
        assert (run / DAMAGED_METRICS).read_bytes() == b"".join(kept)
        if damage_bytes is TORN_ROW:
            assert (run / DAMAGED_METRICS).read_bytes() == TORN_ROW + b"\n"


def test_stop_on_a_finished_run_writes_no_stop_file(capsys, trained, tmp_path):
    run = copy_run(trained, tmp_path)
    before = snapshot(run)
    code, out, err = cli(capsys, ["train", "--stop", run])
    assert code == 0 and "is not running (finished)" in out and not (run / STOP).exists() and snapshot(run) == before


@pytest.mark.parametrize("flag", ["--resume", "--stop"])
def test_resume_or_stop_of_a_folder_that_is_not_a_run(capsys, tmp_path, flag):
    assert_refused(capsys, ["train", flag, tmp_path / "nowhere"], str(tmp_path / "nowhere"), "does not exist")
    assert_refused(capsys, ["train", flag, tmp_path], str(tmp_path), "is not a run folder")


def test_resume_keeps_its_saved_settings(capsys, trained):
    assert_refused(capsys, ["train", "--resume", trained, "--lr", "1e-3"], "--resume", "drop lr")


# --------------------------------------------------------------------------- damaged run folders in the Runs tab
def make_run(root: Path, name: str, rewards: list[float]) -> Path:
    store = RunStore.create(root, name)
    store.write_config({"objective": "step_grpo", "iterations": len(rewards)})
    store.write_status("finished", len(rewards), started=1000.0 + len(rewards))
    for i, r in enumerate(rewards, start=1):
        store.append_metrics({"iteration": i, "reward/mean": r})
    return store.path


DAMAGE = {  # how one run is damaged -> the state the Runs table shows for it
    "status garbled": (lambda p: (p / STATUS).write_bytes(b"\x89garbage"), "damaged"),
    "status a list": (lambda p: (p / STATUS).write_text("[1, 2]"), "damaged"),
    "metrics random bytes": (lambda p: (p / METRICS).write_bytes(bytes(range(256))), "finished"),
    "config garbled": (lambda p: (p / CONFIG).write_text("{"), "finished"),
    "pid gone": (lambda p: write_json(p / STATUS, {"state": "running", "iteration": 1, "pid": 2**22 + 11}),
                 "interrupted"),
    "iteration not a number": (lambda p: write_json(p / STATUS, {"state": "finished", "iteration": "x"}), "finished"),
}


@pytest.fixture
def runs_wb(tmp_path, model_dir):
    return Workbench(model=str(model_dir), device="cpu", runs_root=str(tmp_path / "runs"))


@pytest.mark.parametrize("case", DAMAGE)
def test_one_damaged_run_never_hides_the_others(runs_wb, case):
    root = runs_wb.jobs.root
    good = make_run(root, "good", [0.1, 0.2])
    bad = make_run(root, "bad", [0.3, 0.4])
    damage, state = DAMAGE[case]
    damage(bad)
    before = snapshot(root)
    table, _, pick, _, status = rh.refresh_runs(runs_wb)
    rows = {row[0]: row for row in table.values.tolist()}
    assert status.startswith("✓ 2 run(s)") and rows["good"][1:3] == ["finished", 2] and rows["good"][4] == 0.2
    assert rows["bad"][1].startswith(state)
    fig, status = rh.compare(runs_wb, ["good", "bad"], "reward/mean")
    assert status.startswith("✓") and [list(t.y) for t in fig.data if t.name == "good"] == [[0.1, 0.2]]
    files, status = rh.download(runs_wb, "good")
    assert status.startswith("✓") and Path(files[0]).read_text().splitlines()[1:] == ["1,0.1", "2,0.2"]
    assert snapshot(root) == before  # reading never writes
    assert good.name in {r.name for r in list_runs(root)}


def test_exports_leave_nothing_in_the_temp_folder(runs_wb, monkeypatch):
    monkeypatch.setattr(rh, "EXPORT_SECONDS", 0.2)
    make_run(runs_wb.jobs.root, "good", [0.1])
    files, _ = rh.download(runs_wb, "good")
    folder = Path(files[0]).parent
    assert folder.is_dir() and folder.parent == rh.EXPORTS
    end = time.time() + 10
    while folder.exists() and time.time() < end:
        time.sleep(0.05)
    assert not folder.exists()


def test_a_finished_training_process_is_reaped_at_once(tmp_path, model_dir):
    script = tmp_path / "quick.py"
    script.write_text("import sys; sys.exit(0)\n")
    wb = Workbench(model=str(model_dir), device="cpu", runs_root=str(tmp_path / "runs"),
                   train_command=[sys.executable, str(script)])
    config = rh.form_config(wb, "chunk_grpo", "adherence", "2,2", 3e-5, 2, 2, 4, 0, "flow_grpo", "")
    pid = wb.jobs.start(config).process.pid
    end = time.time() + 20  # no poll() from us: only the reaper thread can collect it
    while Path(f"/proc/{pid}").exists() and time.time() < end:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists()  # a zombie would keep its /proc entry


# --------------------------------------------------------------------------- the app's controls and handlers
@pytest.fixture(scope="module")
def app(model_dir, tmp_path_factory):
    wb = Workbench(model=str(model_dir), device="cpu", runs_root=str(tmp_path_factory.mktemp("app_runs")))
    return build_app(wb), wb


def call_endpoint(demo, api_name: str, state: SessionState | None = None, **values):
    """Run an endpoint through gradio's own preprocessing, as an API client would: the controls' defaults
    except `values` (by label prefix), in a fresh session unless `state` is given. Returns the outputs, or
    raises what gradio would report."""
    fn = next(f for f in demo.fns.values() if f.api_name == api_name)
    inputs = []
    for block in fn.inputs:
        match = [v for k, v in values.items() if (block.label or "").startswith(k)]
        inputs.append(match[0] if match else (None if isinstance(block, gr.State) else block.value))
    # a thread of its own: an earlier test (Playwright's sync API) may leave an event loop running in this one
    with ThreadPoolExecutor(1) as pool:
        call = pool.submit(asyncio.run, demo.process_api(fn, inputs, state=state or SessionState(demo)))
        return call.result()["data"]


NUMERIC_PAYLOADS = [  # (endpoint, control label, payload sent through the API)
    ("start_run", "Learning rate", "abc"),
    ("start_run", "Learning rate", [1]),
    ("start_run", "Iterations", "many"),
    ("start_run", "Group size G", None),
    ("start_run", "Group size G", "8"),
    ("start_run", "Trained steps T", {"x": 1}),
    ("start_run", "LoRA rank", True),
    ("generate", "Group size G", None),
    ("generate", "Denoising steps T", "sixteen"),
    ("generate", "Noise level a", float("nan")),
    ("generate", "Seed", "0x10"),
]


@pytest.mark.parametrize("endpoint, label, payload", NUMERIC_PAYLOADS)
def test_a_string_or_null_sent_to_a_numeric_control_names_it(app, endpoint, label, payload):
    demo, wb = app
    with pytest.raises(gr.Error) as err:
        call_endpoint(demo, endpoint, **{label: payload})
    assert err.value.message.startswith(label) and "must be a finite number, got" in err.value.message
    assert wb.jobs.busy() is None and not any(wb.jobs.root.iterdir())  # nothing started


@pytest.mark.parametrize("label, payload, needle", [
    ("Learning rate", None, "learning rate is empty: type a number"),
    ("Iterations", None, "iterations is empty: type a whole number >= 1"),
    ("Iterations", 10**12, "greater than maximum"),
    ("Learning rate", -1.0, "lr and max_grad_norm must be > 0"),
])
def test_empty_or_out_of_range_fine_tune_controls_are_messages(app, label, payload, needle):
    demo, wb = app
    try:
        status = call_endpoint(demo, "start_run", **{label: payload})[-1]
    except gr.Error as err:
        status = err.message
    assert needle in status.replace("\\", "") and wb.jobs.busy() is None


@pytest.mark.parametrize("api_name", ["attribution_z", "attribute"])
def test_a_negative_z_is_a_message_naming_the_field(app, api_name):
    """The z box had a minimum of 0, so Gradio refused -1 with "Value -1 is less than minimum value 0." (a toast,
    twice, naming no field); the handlers' own check names it."""
    demo, _ = app
    status = call_endpoint(demo, api_name, **{"z: sets the false-call rate": -1})[-1]
    assert "z (sets the false-call rate) must be >= 0, got -1" in status or "no group yet" in status
    generated = SessionState(demo)
    call_endpoint(demo, "generate", generated, **{"Group size G": 2, "Denoising steps T": 2})
    status = call_endpoint(demo, api_name, generated, **{"z: sets the false-call rate": -1})[-1]
    assert "z (sets the false-call rate) must be >= 0, got -1" in status, status


@pytest.mark.parametrize("inputs, needle", [
    ((PROMPT, 3, 4, 0.7, -1, "adherence"), "seed must be a whole number >= 0"),
    ((PROMPT, 3, 4, 0.7, 2.0**70, "adherence"), "seed must be an integer in 0..2^63 - 1"),
    ((PROMPT, 3, 4, float("nan"), 0, "adherence"), "noise level must be a finite number"),
    ((PROMPT, 3, 4, 1e308, 0, "adherence"), "noise level must be in 0..1.5 in the app"),
    ((PROMPT, "x", 4, 0.7, 0, "adherence"), "group size must be a whole number"),
])
def test_generate_refuses_hostile_values_with_one_short_line(app, inputs, needle):
    _, wb = app
    status = h.generate(wb, *inputs, Session())[-1]
    assert status.startswith("⚠") and needle in status.replace("\\", "") and len(status) < 600, status[:300]


def test_a_long_message_on_the_page_is_one_short_line(app):
    _, wb = app
    status = h.generate(wb, PROMPT, 2, 4, 0.7, 0, "x" * 5000 + ":1", Session())[-1]
    assert status.startswith("⚠") and "characters cut" in status and len(status) < 600 and "\n" not in status


def test_every_numeric_control_of_the_app_is_guarded(app):
    demo, _ = app
    controls = [b for b in demo.blocks.values() if isinstance(b, (gr.Number, gr.Slider))]
    assert len(controls) >= 10
    for block in controls:
        with pytest.raises(gr.Error, match="must be a finite number"):
            block.preprocess("not a number")


# --------------------------------------------------------------------------- where numbers enter the library
@pytest.mark.parametrize("settings, needle", [
    (dict(noise_level=float("nan")), "noise_level must be a finite number"),
    (dict(noise_level=1e308), "noise_level must be in 0..10"),
    (dict(shift=float("inf")), "shift must be a finite number"),
    (dict(guidance_scale=float("nan")), "guidance_scale must be a finite number"),
    (dict(guidance_scale=-1.0), "guidance_scale must be in 0..100"),
    (dict(seed=-5), "seed must be an integer in 0..2^63 - 1"),
    (dict(seed=2**70), "seed must be an integer in 0..2^63 - 1"),
    (dict(group=2.5), "group must be an integer"),
])
def test_sampling_config_refuses_non_finite_and_out_of_range(settings, needle):
    with pytest.raises(WorkbenchError, match=needle.replace("^", r"\^").replace("(", r"\(")):
        SamplingConfig(**settings)


@pytest.mark.parametrize("settings, needle", [
    (dict(lr=float("inf")), "lr must be a finite number"),
    (dict(max_grad_norm=float("nan")), "max_grad_norm must be a finite number"),
    (dict(seed=-5), "seed must be an integer in 0..2^63 - 1"),
    (dict(guidance_scale=1e308), "guidance_scale must be in 0..100"),
])
def test_train_config_names_the_field(settings, needle):
    with pytest.raises(WorkbenchError) as err:
        TrainConfig(**settings)
    assert needle in str(err.value)


def test_long_messages_are_cut_in_the_middle():
    text = "chunk sizes [" + ", ".join(["1"] * 5000) + "] sum to 5000; change the sizes so they sum to 16"
    line = one_line(text)
    assert len(line) <= 400 and line.startswith("chunk sizes [1, 1") and line.endswith("they sum to 16")
    assert one_line("short\nmessage") == "short message"


# --------------------------------------------------------------------------- one writer per run folder (issue 22)
HOLD = ("import sys, time; from workbench.train.lock import RunLock; lock = RunLock.acquire(sys.argv[1]); "
        "print('held', flush=True); time.sleep(60)")


def hold_lock(folder: Path) -> subprocess.Popen:
    """Another process that holds `folder`'s run lock (as a training process does) until killed."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.parametrize("how", ["--resume", "--out"])
def test_a_second_writer_is_refused_naming_the_run_and_holder(capsys, model_dir, trained, tmp_path, how):
    run = copy_run(trained, tmp_path)
    if how == "--out":
        shutil.rmtree(run)
        run.mkdir()  # empty: a first `train --out` has locked it and not written yet
    holder = hold_lock(run)
    try:
        before = snapshot(run)
        argv = ["train", "--resume", run] if how == "--resume" else [*TRAIN, "--model", model_dir, "--out", run]
        assert_refused(capsys, argv, f"run {run} is being written by process {holder.pid}", "--stop")
        assert snapshot(run) == before  # no row deleted, no config rewritten
    finally:
        holder.kill()
        holder.wait()
    if how == "--resume":  # kill -9 freed the lock: the resume goes ahead
        code, out, err = cli(capsys, ["train", "--resume", run, "--iterations", "3"])
        assert code == 0 and [r["iteration"] for r in RunStore(run).metrics()] == [1, 2, 3], err


def test_a_writer_in_this_process_holds_the_lock_until_its_run_ends(model_dir, tmp_path):
    from workbench.train import Trainer
    from workbench.train.lock import RunLock

    config = TrainConfig(model=str(model_dir), iterations=1, group=2, steps=2, chunks="1,1", eval_prompts=0,
                         prompts_per_iteration=1, report_to="none", sample_every=100)
    trainer = Trainer(config, tmp_path / "r")
    with pytest.raises(WorkbenchError, match=f"being written by process {os.getpid()}"):
        RunLock.acquire(tmp_path / "r")
    trainer.run()
    RunLock.acquire(tmp_path / "r").release()  # free once the run ended


def test_a_killed_writer_leaves_no_temp_files_after_the_next_writer(capsys, trained, tmp_path):
    run = copy_run(trained, tmp_path)
    for stale in (run / ".status.json.abc123.tmp", run / "checkpoints" / ".latest.json.x.tmp"):
        stale.write_text("{torn")
    code, _, err = cli(capsys, ["train", "--resume", run, "--iterations", "3"])
    assert code == 0, err
    assert not [p for p in run.rglob("*.tmp")]


# --------------------------------------------------------------------------- no NaN shown as a figure (issue 22)
@pytest.fixture(scope="module")
def sampled(app):
    """A session holding a G=3, T=4 group of the app's model, with its credit (M=2)."""
    _, wb = app
    session = h.generate(wb, PROMPT, 3, 4, 0.7, 0, "adherence", Session())[-2]
    return h.attribute(wb, 2, session)[-2]


@pytest.mark.parametrize("updates, lr", [(10, 1.0), (1, 1e308), (3, 1e30)])
def test_diverged_inner_updates_are_refused_naming_the_learning_rate(app, sampled, updates, lr):
    from workbench.ui import objectives as ob

    _, wb = app
    out = ob.objectives_compute(wb, updates, lr, 1e-4, "chunk_grpo", None, sampled)
    status = out[-1].replace("\\", "")
    assert status.startswith("⚠ the inner updates diverged") and f"learning rate {lr:g}" in status, status
    assert "nan" not in status.lower().replace("nan or inf", "") and all(v == gr.skip() for v in out[:-1])


def test_attribute_with_no_determined_cell_prints_no_nan(capsys, model_dir):
    code, out, err = cli(capsys, [*ATTRIBUTE, "--z", "1e9", "--model", model_dir])
    assert code == 0 and "nan" not in out.lower(), out
    assert out.count("misattributed among determined not defined (no cell is determined") == 2
    code, out, err = cli(capsys, [*ATTRIBUTE, "--z", "1e9", "--json", "--model", model_dir])
    assert code == 0 and json.loads(out)["step_misattributed"] is None


@pytest.mark.parametrize("lr, iterations", [("1", 3), ("0.3", 4)])
def test_a_diverging_learning_rate_is_named_not_the_sampler(capsys, model_dir, tmp_path, lr, iterations):
    argv = [*TRAIN, "--lr", lr, "--iterations", iterations, "--model", model_dir, "--out", tmp_path / "r"]
    line = assert_refused(capsys, argv, f"learning rate {lr} made", "diverged", "lower --lr")
    assert "sampler" not in line and RunStore(tmp_path / "r").info().state == "failed"


@pytest.mark.parametrize("argv, needles", [
    (["--lr", "1e30"], ["lr must be in (0, 1]"]),
    (["--lr", "1e300"], ["lr must be in (0, 1]"]),
    (["--lr", "0"], ["lr and max_grad_norm must be > 0"]),
    (["--lr", "1.5"], ["lr must be in (0, 1]"]),
    (["--steps", 10**12], ["steps must be in 1..200"]),
    (["--steps", "1e12"], ["--steps", "integer"]),
    (["--iterations", 10**15], ["iterations must be in 1..1000000"]),
    (["--inner-epochs", 10**12], ["inner_epochs must be in 1..100"]),
    (["--lora-rank", 10**12], ["lora_rank must be in 0..1024"]),
])
def test_huge_training_values_are_refused_at_once(capsys, monkeypatch, model_dir, tmp_path, argv, needles):
    no_trainer(monkeypatch)
    assert_refused(capsys, [*TRAIN, *argv, "--model", model_dir, "--out", tmp_path / "r"], *needles)
    assert not (tmp_path / "r").exists()


def test_a_run_that_cannot_fit_the_memory_is_refused_before_the_model_loads(capsys, monkeypatch, model_dir, tmp_path):
    """A minibatch of 256 x 64 transitions in one pass needs about 60 GB of activations: with 8 GB free it is
    refused before the model loads, naming the smallest change that fits (the old code started it)."""
    import workbench.models.adapters as adapters

    monkeypatch.setattr("workbench.core.budget.free_bytes", lambda device: 8 * 10**9)
    monkeypatch.setattr(adapters, "load_model", lambda *a, **k: pytest.fail("the model loaded"))
    argv = [*TRAIN, "--group", "256", "--steps", "64", "--chunks", "64", "--model", model_dir, "--out", tmp_path / "r"]
    assert_refused(capsys, argv, "this run does not fit: needs about", "8.0 GB free",
                   "the smallest change that fits: --micro-batch ")


@pytest.mark.parametrize("argv, needles", [
    (["--micro-batch", "all"], ["--micro-batch", "expected an integer, got 'all'"]),
    (["--lora-rank", "8", "--fsdp"], ["fsdp shards the weights of a full fine-tune", "set lora_rank 0"]),
    (["--model", "meta:sd3.5-tiny", "--dry-run"], ["unknown architecture 'sd3.5-tiny'", "meta:sd3.5-medium"]),
    (["--model", "meta:sd3.5-medium"], ["shapes without weights", "--dry-run"]),
])
def test_model_and_memory_settings_are_refused_with_what_to_change(capsys, argv, needles, tmp_path):
    assert_refused(capsys, [*TRAIN, *argv, "--out", tmp_path / "r"], *needles)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("field, value", [("steps", 10**12), ("iterations", 10**15), ("lr", 1e300),
                                          ("group", 10**12), ("prompts_per_iteration", 10**12)])
def test_huge_values_in_a_config_file_are_refused_at_once(capsys, monkeypatch, tmp_path, field, value):
    no_trainer(monkeypatch)
    path = write_json(tmp_path / "config.json", {field: value})
    assert_refused(capsys, ["train", "--config", path, "--out", tmp_path / "r"], str(path), f"{field} must be in ")


# --------------------------------------------------------------------------- bounded work (issue 22)
@pytest.mark.parametrize("budget, needle", [(10**12, "at most 10000 per press"), (10_001, "at most 10000"),
                                            (0, "whole number >= 1"), (float("nan"), "whole number >= 1")])
def test_a_refine_budget_is_capped_before_any_work(app, sampled, monkeypatch, budget, needle):
    import workbench.rl.credit

    def no_refinement(*args, **kwargs):
        raise AssertionError("refinement started before the budget was checked")
    monkeypatch.setattr(workbench.rl.credit, "refine_rounds", no_refinement)
    _, wb = app
    out = list(h.refine_credit(wb, budget, sampled, 2.0))
    assert len(out) == 1 and needle in out[0][-1], out[-1][-1]


def test_a_refine_budget_over_the_cap_through_the_api_is_refused(app):
    demo, wb = app
    with pytest.raises(gr.Error, match="maximum"):
        call_endpoint(demo, "refine", **{"Refinement budget": 10**12})


@pytest.mark.parametrize("payload", ["half", 16])  # null is the default, auto
def test_unknown_numerics_through_the_api_are_refused_before_any_work(app, payload):
    demo, wb = app
    with pytest.raises(gr.Error) as err:
        call_endpoint(demo, "attribute", Numerics=payload)
    assert "not in the list of choices" in err.value.message or "valid: auto, float32, bfloat16" in err.value.message


class FakeQueue:
    """What `guard.cancel_check` reads of gradio's queue (the events still being processed), and a progress sink."""

    def __init__(self, event_id: str):
        self.active_jobs = [[type("Event", (), {"_id": event_id})()]]

    def set_progress(self, event_id, iterables) -> None:  # gr.Progress reports here
        pass


def test_a_cancelled_refine_stops_its_work_within_a_slice(app, sampled):
    from gradio.context import LocalContext

    _, wb = app
    queue = FakeQueue("refine-1")
    tokens = LocalContext.blocks.set(type("Blocks", (), {"_queue": queue})()), LocalContext.event_id.set("refine-1")
    try:
        rounds = h.refine_credit(wb, 9000, sampled, 2.0)
        start, cancelled, last, after = time.perf_counter(), False, None, 0
        for last in rounds:  # noqa: B007 - the last output is the status checked below
            after += cancelled
            if not cancelled and time.perf_counter() - start > 0.5:
                queue.active_jobs[0], cancelled = None, True  # what gradio does on cancel
            if after > 3:
                break
    finally:
        LocalContext.blocks.reset(tokens[0])
        LocalContext.event_id.reset(tokens[1])
    assert cancelled and last[-1].startswith("⚠ the event was cancelled"), last[-1]
    assert after <= 2  # at most the round under way, then the cancelled status: no further round starts


# --------------------------------------------------------------------------- known causes named (issue 22)
CLICKS = ["nan", float("nan"), '{"x": NaN}', '{"x": 1e999}', '{"x": -Infinity}', 1e308, '{"x": 1e300}', '{"x": true}',
          '{"x": [1]}', '{"x": {"a": 1}}', 2**70]


@pytest.mark.parametrize("point", CLICKS, ids=[str(p)[:20] for p in CLICKS])
def test_a_hostile_click_on_the_curve_names_the_click(app, sampled, point):
    _, wb = app
    out = h.chunks_toggle(wb, point, sampled)
    status = out[-1].replace("\\", "")
    assert status.startswith("⚠") and "nexpected" not in status and len(status) < 300, status
    assert ("clicked step" in status or "a click must be" in status) and all(v == gr.skip() for v in out[:-1])


@pytest.fixture(scope="module")
def explained(app, sampled):
    from workbench.ui import objectives as ob

    return ob.objectives_compute(app[1], 1, 1e-3, 1e-4, "chunk_grpo", None, sampled)[-2]


@pytest.mark.parametrize("x, y, needle", [("NaN", "1", "step t"), ("1", "Infinity", "trajectory i"),
                                          ("1e308", "1", "step t must be an integer in 0..2^63 - 1, got 1e+308"),
                                          ("1", "-1e400", "trajectory i"), ("true", "1", "step t")])
def test_a_hostile_click_on_an_objective_map_names_the_cell(app, sampled, explained, x, y, needle):
    from workbench.ui import objectives as ob

    out = ob.objectives_click(app[1], f'{{"trace": "moved|gspo", "x": {x}, "y": {y}}}', explained, sampled)
    status = out[-1].replace("\\", "")
    assert status.startswith("⚠") and needle in status and len(status) < 300, status


def _optimizer(data: bytes | object):
    def damage(run: Path):
        path = run / "checkpoints" / "iter_0002" / "optimizer.pt"
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            torch.save(data, path)
    return damage


def _flip_optimizer_bytes(run: Path):
    path = run / "checkpoints" / "iter_0002" / "optimizer.pt"
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2: len(raw) // 2 + 64] = bytes(64)  # a zeroed stretch inside the zip
    path.write_bytes(bytes(raw))


def _weight_of_another_shape(run: Path):
    """One weight replaced by a (1,) tensor, which `copy_` would have broadcast into the model's weight."""
    path = run / "checkpoints" / "iter_0002" / "weights.safetensors"
    weights = load_file(path)
    weights[sorted(weights)[0]] = torch.zeros(1)
    save_file(weights, path)


CORRUPT_CHECKPOINTS = {  # damage -> words of the one resume error line
    "optimizer.pt garbage": (_optimizer(b"\x00garbage"), "no complete checkpoint"),
    "optimizer.pt a list": (_optimizer([1, 2]), "no complete checkpoint"),
    "optimizer.pt torn": (lambda run: _optimizer((run / "checkpoints/iter_0002/optimizer.pt").read_bytes()[:300])(run),
                          "no complete checkpoint"),
    "optimizer.pt zeroed inside": (_flip_optimizer_bytes, "no complete checkpoint"),
    "optimizer state of another model": (_optimizer({"state": {}, "param_groups": [{"params": [0, 1, 2]}]}),
                                         "does not fit this model and optimizer"),
    "a weight of another shape": (_weight_of_another_shape, "does not fit this model (the checkpoint's "),
    "STOP is a folder": (lambda run: (run / STOP).mkdir(), "STOP is a folder; remove it"),
}


@pytest.mark.parametrize("case", CORRUPT_CHECKPOINTS)
def test_a_corrupt_checkpoint_or_stop_names_its_cause_on_resume(capsys, trained, tmp_path, case):
    run = copy_run(trained, tmp_path)
    damage, needle = CORRUPT_CHECKPOINTS[case]
    damage(run)
    rows = RunStore(run).metrics()
    assert_refused(capsys, ["train", "--resume", run, "--iterations", "3"], str(run), needle)
    assert RunStore(run).metrics() == rows and RunStore(run).info().state == "finished"


@pytest.mark.parametrize("case", ["optimizer.pt garbage", "optimizer.pt a list", "optimizer.pt torn"])
def test_download_of_a_run_with_a_corrupt_checkpoint_says_so(runs_wb, trained, case):
    run = Path(shutil.copytree(trained, runs_wb.jobs.root / "bad"))
    CORRUPT_CHECKPOINTS[case][0](run)
    rh.refresh_runs(runs_wb)
    files, status = rh.download(runs_wb, "bad")
    status = status.replace("\\", "")
    assert len(files) == 1 and "optimizer.pt cannot be read" in status and "no checkpoint saved yet" not in status


@pytest.mark.parametrize("content, needle", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"a":' * 50_000 + "1" + "}" * 50_000, "nested too deeply"),
    (None, "is not a regular file"),  # /dev/zero: endless zeros
    ("folder", "is not a regular file"),
    (" " * (17 * 2**20) + "{}", "larger than 16 MB"),
])
def test_a_config_file_that_cannot_be_a_config_names_why(capsys, monkeypatch, tmp_path, content, needle):
    no_trainer(monkeypatch)
    path = Path("/dev/zero") if content is None else tmp_path / "config.json"
    if content == "folder":
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    assert_refused(capsys, ["train", "--config", path, "--out", tmp_path / "r"], f"--config {path}", needle)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("spec, needle", [("none,tensorboard", "'none' stands alone"),
                                          ("tensorboard,all", "'all' stands alone"), ("nope", "unknown tracker")])
def test_report_to_says_what_is_wrong(capsys, tmp_path, spec, needle):
    line = assert_refused(capsys, ["train", "--report-to", spec, "--out", tmp_path / "r"], needle)
    assert "unknown tracker 'none'" not in line


# --------------------------------------------------------------------------- messages that name the cause (issue 22)
FOLDER_DAMAGE = {  # a run part replaced by a folder -> the state the Runs table shows, with the reason
    "config.json a folder": (CONFIG, "finished (damaged: ", "config.json is not a regular file"),
    "metrics.jsonl a folder": (METRICS, "finished (damaged: ", "metrics.jsonl is not a file"),
    "status.json a folder": (STATUS, "damaged: ", "status.json is not a regular file"),
}


@pytest.mark.parametrize("case", FOLDER_DAMAGE)
def test_a_run_part_that_is_a_folder_is_listed_as_damaged(runs_wb, case):
    part, state, reason = FOLDER_DAMAGE[case]
    make_run(runs_wb.jobs.root, "good", [0.1, 0.2])
    bad = make_run(runs_wb.jobs.root, "bad", [0.3, 0.4])
    (bad / part).unlink()
    (bad / part).mkdir()
    table, *_, status = rh.refresh_runs(runs_wb)
    rows = {row[0]: row for row in table.values.tolist()}
    assert set(rows) == {"good", "bad"} and rows["bad"][1].startswith(state) and reason in rows["bad"][1]
    files, status = rh.download(runs_wb, "good")
    assert status.startswith("✓")


def test_a_new_api_session_can_compare_and_download_before_refresh(runs_wb):
    demo = build_app(runs_wb)
    make_run(runs_wb.jobs.root, "good", [0.1, 0.2])
    _, status = call_endpoint(demo, "compare_runs", **{"Runs to compare": ["good"], "Metric": "reward/mean"})
    assert status.startswith("✓ reward/mean of 1 run(s)"), status
    _, status = call_endpoint(demo, "download_run", **{"Run (shown below": "good"})
    assert status.startswith("✓ prepared 1 file(s) for run good"), status
    _, status = call_endpoint(demo, "download_run", **{"Run (shown below": "nope"})
    assert "run nope not found" in status


def test_stop_after_this_sessions_run_ended_stops_the_run_holding_the_device(runs_wb, monkeypatch):
    old = make_run(runs_wb.jobs.root, "old", [0.1])
    cli_run = make_run(runs_wb.jobs.root, "cli", [0.1])
    write_json(cli_run / STATUS, {"state": "running", "iteration": 1, "pid": os.getpid(), "started": 1.0})
    _, status = rh.stop_run(runs_wb, Session(run_id=old.name))
    assert status == "✓ stop requested: run cli saves a checkpoint and stops within one iteration", status
    assert (cli_run / STOP).exists() and not (old / STOP).exists()


def test_a_control_updated_by_a_refused_action_still_names_bad_input(app):
    demo, _ = app
    state = SessionState(demo)
    status = call_endpoint(demo, "chunks_toggle", state, **{"Step t after": "x"})[-1]  # refused, slider untouched
    assert status.startswith("⚠")
    for payload in ("abc", float("nan"), [1]):
        with pytest.raises(gr.Error) as err:
            call_endpoint(demo, "chunks_split", state, Step=payload)
        assert err.value.message.startswith("Step must be a finite number"), err.value.message


def test_a_toy_reward_on_a_32_px_real_model_is_refused_before_sampling(capsys, tmp_path):
    """The 32 px tiny SD3 makes images of the toy world's size: the reward's declared model kind refuses adherence
    (export used to score its images with it, after sampling)."""
    from tiny_pipelines import save_tiny_sd3

    sd3 = save_tiny_sd3(tmp_path / "sd3")
    capsys.readouterr()
    for command in (["export", "--out", str(tmp_path / "page.html")], ["attribute", "--chunks", "1,1"]):
        assert main([*command, "--model", str(sd3), "--device", "cpu", "--prompt", "a green cross", "--group", "2",
                     "--steps", "2", "--continuations", "2", "--reward", "adherence"]) == 2
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]  # beside
        # diffusers' loading bars: one line, before any sampling (no continuations counted)
        assert len(errors) == 1 and "reward 'adherence' serves the embedded model's toy world only" in errors[0]


# --------------------------------------------------------------------------- issue 64: one table of limits
# (imports of what issue 64 added stay inside the tests, so that each case runs, and fails, on the code before it)
def rss_bytes() -> int:
    """This process's resident memory."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


MILLION_LINKS = [  # a link with a size at 10^6 -> the words of its one message (the parameter and its limit)
    (f"prompt={PROMPT}&G=1000000&T=4", "G='1000000' is out of range: group size G must be in 2..16"),
    (f"prompt={PROMPT}&G=2&T=1000000", "T='1000000' is out of range: steps T must be in 2..32"),
    (f"prompt={PROMPT}&G=2&T=4&tab=attribution&continuations=1000000",
     "continuations='1000000' is out of range: continuations M must be in 1..16"),
    (f"prompt={PROMPT}&noise=1000000", "noise='1000000' is out of range: noise level must be in 0..1.5"),
    (f"prompt={PROMPT}&G=" + "9" * 5000, "is not a whole number"),
    (f"prompt={PROMPT}&window=0," + "9" * 5000, "SDE window must be START,END"),
    (f"prompt={PROMPT}&model=base&" + "x" * 10_000, "query is 10"),
    (f"prompt={PROMPT}&window=0,1000000", "SDE window (0, 1000000) must satisfy 0 <= start < end <= steps (16)"),
    (f"prompt={PROMPT}&seed=" + "1" * 30, "seed must be in 0..2^63 - 1"),
    (f"prompt={PROMPT}&T=4&chunks=1000000", "chunk sizes [1000000] sum to 1000000 but there are 4 trained steps"),
    (f"prompt={PROMPT}&T=4&chunks=" + ",".join(["1"] * 4000), "chunk sizes spec '1,1,1"),
]


@pytest.mark.parametrize("query, needle", MILLION_LINKS, ids=[n[:30] for _, n in MILLION_LINKS])
def test_a_link_outside_the_limits_answers_at_once_and_takes_no_memory(app, query, needle):
    from workbench.ui import share

    _, wb = app
    wb.policy()  # the app's model is loaded already: time and memory are the link's own
    before, start = rss_bytes(), time.perf_counter()
    share.preload_link(wb, Session(), "?" + query)  # the page load's first event, then the view's
    status = share.open_link(wb, Session(), "?" + query)[-1]
    seconds, grown = time.perf_counter() - start, rss_bytes() - before
    assert status.startswith("⚠") and needle in status.replace("\\", ""), status[:300]
    assert seconds < 1.0 and grown < 20 * 2**20, (seconds, grown)


@pytest.mark.parametrize("spec", [",".join(["1"] * 10**6), "[" + ",".join(["1"] * 10**6) + "]", "9" * 10**6])
def test_a_chunk_spec_of_a_million_numbers_is_refused_before_it_is_read(app, sampled, spec):
    _, wb = app
    start = time.perf_counter()
    status = h.chunks_from_spec(wb, spec, sampled)[-1].replace("\\", "")
    assert time.perf_counter() - start < 0.5 and status.startswith("⚠") and len(status) < 300, status[:400]
    assert "has 1000000 items; 4 steps take at most 4" in status or "is not an integer" in status, status


@pytest.mark.parametrize("call, needle", [
    (lambda wb, s: h.generate(wb, PROMPT, 17, 4, 0.7, 0, "adherence", s), "group size must be in 2..16"),
    (lambda wb, s: h.generate(wb, PROMPT, 2, 33, 0.7, 0, "adherence", s), "steps T must be in 2..32"),
    (lambda wb, s: h.generate(wb, PROMPT, 2, 4, 1.6, 0, "adherence", s), "noise level must be in 0..1.5"),
    (lambda wb, s: h.attribute(wb, 17, s), "continuations (M) must be in 1..16"),
])
def test_handlers_check_the_apps_limits_for_callers_that_skip_the_controls(app, sampled, call, needle):
    _, wb = app
    status = call(wb, sampled)[-1].replace("\\", "")
    assert status.startswith("⚠") and needle in status, status


def test_the_controls_ranges_come_from_the_table(app):
    from workbench.core.fields import LIMITS

    demo, _ = app
    sliders = {b.elem_id: (b.minimum, b.maximum) for b in demo.blocks.values() if isinstance(b, gr.Slider)}
    for elem_id, row in [("gen-group", "group"), ("gen-steps", "steps"), ("gen-noise", "noise_level"),
                         ("credit-k", "continuations"), ("obj-updates", "inner_updates")]:
        if elem_id in sliders:
            assert sliders[elem_id] == LIMITS[row].range(app=True), elem_id
    assert sliders["gen-group"] == (2, 16) and sliders["credit-k"] == (1, 16)


def test_the_command_line_reads_the_same_table(capsys, tmp_path):
    assert_refused(capsys, [*SAMPLE, "--num", "257", "--steps", "2", "--out", tmp_path / "g.png"],
                   "--num", "whole number in 1..256, got 257")
    assert not (tmp_path / "g.png").exists()


def test_a_links_message_is_escaped_once(app):
    from workbench.ui import share

    _, wb = app
    status = share.open_link(wb, Session(), f"?prompt={PROMPT}&reward=noise_level")[-1]
    assert "noise\\_level" in status and "\\\\" not in status, status  # Markdown shows noise_level
    status = share.open_link(wb, Session(), "?prompt=a+%3Cb")[-1]
    assert "'\\<" in status and "\\\\" not in status, status


# --------------------------------------------------------------------------- issue 64: folders only where allowed
def outside_paths(tmp_path: Path, model_dir: Path, runs: Path) -> list[str]:
    """Paths outside the app's folders: a model folder that exists, one that does not, a way out through `..`, a
    link out of the runs folder, a loop of links, system folders."""
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(model_dir, elsewhere / "m")
    (elsewhere / "loop").symlink_to(elsewhere / "loop")
    runs.mkdir(parents=True, exist_ok=True)
    (runs / "out").symlink_to(elsewhere / "m")
    return [str(elsewhere / "m"), str(elsewhere / "nope"), f"{runs}/../elsewhere/m", str(runs / "out"),
            str(elsewhere / "loop"), "/etc", "/", "/proc/self/root/etc", "~"]


@pytest.mark.parametrize("how", ["picker", "link"])
def test_a_path_outside_the_allowed_folders_gets_one_message_whether_it_exists_or_not(runs_wb, model_dir,
                                                                                        tmp_path, how):
    from urllib.parse import quote

    from workbench.ui import policies as pol
    from workbench.ui import share

    messages = set()
    for path in outside_paths(tmp_path, model_dir, runs_wb.jobs.root):
        if how == "picker":
            status = pol.pick_policy(runs_wb, path, Session())[-1]
        else:
            status = share.open_link(runs_wb, Session(), f"?prompt={quote(PROMPT)}&model={quote(path)}")[-1]
        status = status.replace("\\", "")
        assert status.startswith("⚠") and "is not a folder this app offers" in status, status
        messages.add(status.replace(repr(path), "PATH"))
    assert len(messages) == 1, messages  # no answer says whether a path exists
    assert not runs_wb._policies  # nothing was loaded


def _make(kind: str, path: Path, model_dir: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "model":
        shutil.copytree(model_dir, path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "file":
        path.write_text("x")
    elif kind == "loop":
        path.symlink_to(path)
    elif kind == "dangling link":
        path.symlink_to(path.parent / "nothing")
    else:  # a link to a model
        shutil.copytree(model_dir, path.parent / "target")
        path.symlink_to(path.parent / "target")


@pytest.mark.parametrize("kind", ["model", "folder", "file", "loop", "dangling link", "link to a model"])
@pytest.mark.parametrize("how", ["picker", "link"])
def test_an_outside_paths_message_is_byte_identical_before_and_after_it_exists(runs_wb, model_dir, tmp_path,
                                                                               kind, how):
    """The same path text, asked before and after something is made there (written absolute, through `..` out
    of the runs folder, and with `~`): the same bytes, and nothing loaded."""
    from urllib.parse import quote

    from workbench.ui import policies as pol
    from workbench.ui import share

    def ask(path: str) -> str:
        if how == "picker":
            return pol.pick_policy(runs_wb, path, Session())[-1]
        return share.open_link(runs_wb, Session(), f"?prompt={quote(PROMPT)}&model={quote(path)}")[-1]

    runs_wb.jobs.root.mkdir(parents=True, exist_ok=True)
    home = Path.home()
    target = Path(tempfile.mkdtemp(dir=home if os.access(home, os.W_OK) else tmp_path)) / f"x-{kind.replace(' ', '-')}"
    try:
        texts = [str(target), f"{runs_wb.jobs.root}/../{os.path.relpath(target, runs_wb.jobs.root.parent)}"]
        if target.is_relative_to(home):
            texts.append("~/" + str(target.relative_to(home)))
        before = [ask(text) for text in texts]
        _make(kind, target, model_dir)
        after = [ask(text) for text in texts]
    finally:
        shutil.rmtree(target.parent, ignore_errors=True)
    assert [m.encode() for m in before] == [m.encode() for m in after], (before, after)
    assert all(m.startswith("⚠") and "is not a folder this app offers" in m for m in after), after
    assert not runs_wb._policies


def test_the_models_named_at_start_are_offered_and_load(tmp_path, model_dir):
    from workbench.ui import policies as pol

    models = tmp_path / "models"
    shutil.copytree(model_dir, models / "tiny")
    wb = Workbench(device="cpu", runs_root=str(tmp_path / "runs"), models=(str(models),))
    assert ("model: tiny", str(models / "tiny")) in wb.sources()
    _, header, session, *_, status = pol.pick_policy(wb, str(models / "tiny"), Session())
    assert status.startswith("✓ loaded") and session.source == str(models / "tiny"), status


def test_a_loop_of_links_is_called_a_loop(capsys, runs_wb):
    from workbench.ui import policies as pol

    runs_wb.jobs.root.mkdir(parents=True, exist_ok=True)
    loop = runs_wb.jobs.root / "loop"
    loop.symlink_to(loop)
    assert "is a loop of symbolic links" in pol.pick_policy(runs_wb, str(loop), Session())[-1]
    assert_refused(capsys, [*SAMPLE, "--model", loop, "--out", "g.png"], "is a loop of symbolic links")


def test_a_load_holds_up_no_other_session(runs_wb, monkeypatch):
    """A slow load (a large model) waits only for itself: the policy another session uses is served meanwhile."""
    import threading

    import workbench.train.sources as sources

    runs_wb.policy()  # the app's model, loaded
    real, loading = sources.load_policy, threading.Event()

    def slow(source, *args, **kwargs):
        loading.set()
        time.sleep(3)
        return real(source, *args, **kwargs)
    monkeypatch.setattr(sources, "load_policy", slow)
    other = threading.Thread(target=runs_wb.policy, args=("embedded",))
    other.start()
    assert loading.wait(10)
    start = time.perf_counter()
    runs_wb.policy()
    assert time.perf_counter() - start < 1.0
    other.join()


def test_the_pickers_load_is_not_in_the_models_queue(app):
    demo, _ = app
    picks = [f for f in demo.fns.values() if f.api_name == "pick_policy"]
    assert picks and all(f.concurrency_id != "model" for f in picks)


# --------------------------------------------------------------------------- issue 64: model configs checked first
@pytest.fixture(scope="module")
def tiny_pipelines(tmp_path_factory):
    from tiny_pipelines import save_tiny_flux, save_tiny_sd3

    root = tmp_path_factory.mktemp("pipelines")
    return {"sd3": save_tiny_sd3(root / "sd3"), "flux": save_tiny_flux(root / "flux"),
            "sd3-wide": save_tiny_sd3(root / "sd3-wide", heads=8)}


def _set(name: str, key: str, value):
    def damage(folder: Path, pipelines: dict):
        config = json.loads((folder / name).read_text())
        (folder / name).write_text(json.dumps({**config, key: value}))
    return damage


def _text(name: str, text: str):
    return lambda folder, pipelines: (folder / name).write_text(text)


def _wide_weights(folder: Path, pipelines: dict):
    weights = "transformer/diffusion_pytorch_model.safetensors"
    shutil.copy(pipelines["sd3-wide"] / weights, folder / weights)


DAMAGED_MODELS = {  # damage of a tiny SD3 (or FLUX) folder -> words of the one error line
    "model_index.json not JSON": (_text("model_index.json", "{nope"), "model_index.json"),
    "model_index.json a list": (_text("model_index.json", "[1, 2]"), "model_index.json"),
    "an unknown pipeline": (_set("model_index.json", "_class_name", "Nope"), "names pipeline 'Nope'"),
    "a component entry []": (_set("model_index.json", "text_encoder", []), "text_encoder must be [library, class]"),
    "transformer config missing": (lambda f, p: (f / "transformer/config.json").unlink(),
                                   "transformer/config.json is missing"),
    "transformer config not JSON": (_text("transformer/config.json", "{{"), "transformer/config.json cannot be read"),
    "transformer config a list": (_text("transformer/config.json", "[]"), "transformer/config.json holds a list"),
    "num_layers -3": (_set("transformer/config.json", "num_layers", -3), "num_layers must be in 1..1000, got -3"),
    "num_layers 100000": (_set("transformer/config.json", "num_layers", 100_000), "num_layers must be in 1..1000"),
    "sample_size NaN": (_text("transformer/config.json", '{"_class_name": "SD3Transformer2DModel", '
                                                         '"sample_size": NaN}'), "sample_size is nan"),
    "a head size as text": (_set("transformer/config.json", "attention_head_dim", "8"),
                            "attention_head_dim must be a whole number"),
    "a field the model does not take": (_set("transformer/config.json", "bogus", 1), "takes no field bogus"),
    "vae config a list": (_text("vae/config.json", "[]"), "vae/config.json holds a list"),
    "block_out_channels []": (_set("vae/config.json", "block_out_channels", []), "block_out_channels is empty"),
    "weights of another size": (_wide_weights, "do not match its config.json"),
    "weights not safetensors": (_text("transformer/diffusion_pytorch_model.safetensors", "garbage"),
                                "diffusion_pytorch_model.safetensors cannot be read"),
    "FLUX num_single_layers -1": (_set("transformer/config.json", "num_single_layers", -1),
                                  "num_single_layers must be in 0..1000"),
}


@pytest.mark.parametrize("how", ["train --dry-run", "sample"])
@pytest.mark.parametrize("case", DAMAGED_MODELS)
def test_a_damaged_model_config_is_refused_before_anything_is_built(capsys, tiny_pipelines, tmp_path, case, how):
    damage, needle = DAMAGED_MODELS[case]
    folder = Path(shutil.copytree(tiny_pipelines["flux" if case.startswith("FLUX") else "sd3"], tmp_path / "m"))
    damage(folder, tiny_pipelines)
    argv = (["train", "--dry-run", "--model", folder] if how.startswith("train") else
            [*SAMPLE, "--model", folder, "--out", tmp_path / "g.png"])
    start = time.perf_counter()
    line = assert_refused(capsys, argv, needle)
    assert "unexpected" not in line and "huggingface.co" not in line and time.perf_counter() - start < 60


@pytest.mark.parametrize("case, needle", [("num_layers 5000", "sizes must be in 1..4096"),
                                          ("config a list", "holds a list"), ("a run", "is a fine-tuning run")])
def test_a_damaged_embedded_folder_or_a_run_given_as_a_model(capsys, model_dir, trained, tmp_path, case, needle):
    if case == "a run":
        folder = trained
    else:
        folder = Path(shutil.copytree(model_dir, tmp_path / "m"))
        config = json.loads((folder / "config.json").read_text())
        config["transformer"]["num_layers"] = 5000
        (folder / "config.json").write_text("[]" if case == "config a list" else json.dumps(config))
    assert_refused(capsys, ["train", "--dry-run", "--model", folder], needle)


# --------------------------------------------------------------------------- issue 64: a live run can be loaded
LIVE = ["train", "--iterations", "100000", "--eval-prompts", "0", "--prompts-per-iteration", "1", "--group", "2",
        "--steps", "2", "--chunks", "1,1", "--report-to", "none", "--sample-every", "100000",
        "--checkpoint-every", "1", "--threads", "1"]


def start_training(model_dir: Path, out: Path, args: list[str] = LIVE, threads: str = "1") -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": threads}
    return subprocess.Popen([sys.executable, "-m", "workbench", *map(str, args), "--model", str(model_dir),
                             "--out", str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, process: subprocess.Popen, seconds: float = 180) -> None:
    end = time.time() + seconds
    while not path.exists():
        assert process.poll() is None, process.stderr.read()[-2000:]
        assert time.time() < end, f"{path} did not appear"
        time.sleep(0.05)


def test_a_run_that_checkpoints_every_iteration_samples_50_times_of_50_while_it_trains(runs_wb, model_dir):
    """The app's picker (`pick_policy`, then a group from the policy it loaded) and the command line's loader
    (`load_policy` of the run's path), alternately, while a real training process saves a checkpoint every
    iteration and keeps only the newest (it removes the one before)."""
    from workbench.flow.sampler import sample_group
    from workbench.train.sources import load_policy
    from workbench.ui import policies as pol

    run = runs_wb.jobs.root / "live"
    trainer = start_training(model_dir, run)
    failures, checkpoints = [], set()
    try:
        wait_for(run / "checkpoints" / "latest.json", trainer)
        for i in range(50):
            assert trainer.poll() is None  # still training
            try:
                if i % 2:
                    policy = load_policy(str(run))
                else:
                    session, status = (out := pol.pick_policy(runs_wb, str(run), Session()))[2], out[-1]
                    if not status.startswith("✓"):
                        raise WorkbenchError(status)
                    checkpoints.add(session.source)
                    policy = runs_wb.policy(session.source)
                group = sample_group(policy, PROMPT, SamplingConfig(group=2, steps=2, seed=i))
                assert torch.isfinite(group.images).all()
            except WorkbenchError as err:
                failures.append(str(err))
    finally:
        trainer.kill()
        trainer.wait()
    assert not failures, f"{len(failures)} of 50 failed: {failures[:3]}"
    assert len(checkpoints) > 1  # the run moved on while it was loaded


def test_a_checkpoint_without_its_optimizer_state_samples_and_a_resume_says_what_is_missing(capsys, trained,
                                                                                         tmp_path):
    run = copy_run(trained, tmp_path)
    (run / "checkpoints" / "iter_0002" / "optimizer.pt").unlink()
    code, out, err = cli(capsys, [*SAMPLE, "--model", run, "--out", tmp_path / "g.png"])
    assert code == 0 and (tmp_path / "g.png").is_file(), err
    assert_refused(capsys, ["train", "--resume", run, "--iterations", "3"], "optimizer.pt is missing",
                   "its weights still sample")


def test_a_run_folder_removed_while_it_trains_is_not_made_again(model_dir, tmp_path):
    run = tmp_path / "doomed"
    trainer = start_training(model_dir, run)
    try:
        wait_for(run / "checkpoints" / "latest.json", trainer)
        end = time.time() + 10
        while run.exists() and time.time() < end:
            shutil.rmtree(run, ignore_errors=True)  # the trainer may be writing a file in it meanwhile
        trainer.wait(timeout=60)
    finally:
        trainer.kill()
    err = trainer.stderr.read()
    assert not run.exists() and trainer.returncode == 2, (run.exists(), trainer.returncode, err[-500:])
    assert "was removed while the run was training" in err and "Traceback" not in err


# --------------------------------------------------------------------------- issue 64: the same seed, the same run
def _weights(run: Path) -> dict:
    checkpoint = sorted((run / "checkpoints").glob("iter_*"))[-1]
    return load_file(str(checkpoint / "weights.safetensors"))


def _numbers(run: Path) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in RunStore(run).metrics()]


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_run_keeps_its_thread_count_whatever_torch_was_set_to(model_dir, tmp_path):
    """The same seed and count give the same run whether torch had 1 or 2 threads (what the machine's load used
    to choose); another count gives other numbers, which is why the count is a recorded setting."""
    from workbench.train import Trainer

    ambient = torch.get_num_threads()

    def train(torch_threads: int, threads: int | None, name: str) -> Path:
        torch.set_num_threads(torch_threads)
        config = TrainConfig(model=str(model_dir), iterations=1, group=8, steps=8, chunks="2,2,4", eval_prompts=0,
                             prompts_per_iteration=1, report_to="none", sample_every=100, seed=3, threads=threads)
        Trainer(config, tmp_path / name).run()
        return tmp_path / name

    try:
        one, one_again, two, default = train(2, 1, "one"), train(1, 1, "one-again"), train(1, 2, "two"), \
            train(1, None, "default")
    finally:
        torch.set_num_threads(ambient)
    assert [RunStore(r).config()["threads"] for r in (one, one_again, two, default)] == [1, 1, 2, 1]
    assert _numbers(one) == _numbers(one_again) and _same(_weights(one), _weights(one_again))
    assert not _same(_weights(one), _weights(two))  # the count changes the numbers


RESUME_WITH_TWO = ("import sys, torch; torch.set_num_threads(2); from workbench.train import Trainer; "
                   "Trainer.resume(sys.argv[1]).run()")


def test_a_killed_run_resumed_under_another_thread_count_continues_exactly(model_dir, tmp_path):
    args = ["train", "--iterations", "4", "--checkpoint-every", "1", "--group", "8", "--steps", "8", "--chunks",
            "2,2,4", "--prompts-per-iteration", "1", "--eval-prompts", "0", "--report-to", "none", "--sample-every",
            "100", "--seed", "3", "--threads", "1"]
    whole = start_training(model_dir, tmp_path / "whole", args)
    killed = start_training(model_dir, tmp_path / "killed", args)
    try:
        wait_for(tmp_path / "killed" / "checkpoints" / "iter_0002", killed)
        killed.kill()
        killed.wait()
        assert whole.wait(timeout=600) == 0, whole.stderr.read()[-2000:]
    finally:
        whole.kill()
        killed.kill()
    assert RunStore(tmp_path / "killed").info().state == "interrupted"
    resumed = subprocess.run([sys.executable, "-c", RESUME_WITH_TWO, str(tmp_path / "killed")], capture_output=True,
                             text=True, env={**os.environ, "OMP_NUM_THREADS": "2"}, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert RunStore(tmp_path / "killed").config()["threads"] == 1
    assert _numbers(tmp_path / "whole") == _numbers(tmp_path / "killed")
    assert [r["iteration"] for r in _numbers(tmp_path / "killed")] == [1, 2, 3, 4]
    assert _same(_weights(tmp_path / "whole"), _weights(tmp_path / "killed"))


# --------------------------------------------------------------------------- issue 64: smaller hostile inputs
def test_the_served_app_takes_no_large_upload_and_its_config_names_no_server_path(tmp_path):
    import httpx

    from workbench.ui.launch import launch_options

    demo = build_app(Workbench(device="cpu", runs_root=str(tmp_path / "runs")))
    demo.queue().launch(server_name="127.0.0.1", prevent_thread_lock=True, **launch_options())
    try:
        url = demo.local_url.rstrip("/")
        upload = httpx.post(f"{url}/gradio_api/upload", files={"files": ("big.bin", b"\0" * (3 * 2**20))})
        config = httpx.get(f"{url}/config").text
        font = httpx.get(f"{url}/workbench-assets/stix-two-math.woff2")
    finally:
        demo.close()
    assert upload.status_code == 413
    root = str(Path(__file__).resolve().parents[1])
    assert root not in config and str(Path.home()) + "/" not in config and "/tmp/" not in config
    assert font.status_code == 200 and font.content[:4] == b"wOF2"


@pytest.mark.parametrize("point", ["9" * 5000, "[" * 100_000, "[" * 1000 + "]" * 1000])
def test_a_click_of_thousands_of_digits_or_brackets_is_a_message(app, sampled, point):
    _, wb = app
    status = h.chunks_toggle(wb, point, sampled)[-1]
    assert status.startswith("⚠") and "Unexpected" not in status and len(status) < 300, status


@pytest.mark.parametrize("base", ["javascript:alert(1)//", "http://host/" + "a" * 1_000_000, 'http://h/"><b>'])
def test_an_exported_pages_link_is_never_built_from_a_hostile_address(app, sampled, base):
    from workbench.ui import share

    _, wb = app
    controls = (PROMPT, 3, 4, 0.7, 0, "flow_grpo", "", "adherence", 2, "mc")
    for handler in (share.export_page, share.share_link):
        status = handler(wb, *controls, sampled, "Attribution", base)[-1].replace("\\", "")
        assert status.startswith("⚠ the page's address") and "nothing to export" not in status, status[:300]
        assert len(status) < 500


@pytest.mark.parametrize("link", ["javascript:alert(1)//?model=base", "JavaScript:alert(1)", " javascript:x",
                                  "data:text/html,<b>x</b>"])
def test_a_page_writes_no_link_of_another_scheme(link):
    from workbench.viz.page import Page, render_page

    def page(link: str) -> str:
        return render_page(Page(title="t", settings={}, command="python -m workbench export", numbers="", link=link))
    assert "Open the same view in the app: <a href=" not in page(link)
    assert '<a href="http://host/?model=base">' in page("http://host/?model=base")  # a web address is kept


@pytest.mark.parametrize("estimate", [
    lambda: rollout_bytes(0, 16, (3, 32, 32)), lambda: rollout_bytes(8, -3, (3, 32, 32)),
    lambda: rollout_bytes(8, 16, (3, 0, 32)), lambda: check_fits(-5, "cpu", "x", "y"),
    lambda: check_fits(float("nan"), "cpu", "x", "y"),
    lambda: __import__("workbench.train.memory", fromlist=["RunSizes"]).RunSizes(
        group=0, sampling_steps=17, trained_steps=16, prompts=1, transitions_per_pass=128, lora_rank=0),
    lambda: __import__("workbench.train.memory", fromlist=["ModelSizes"]).ModelSizes(
        transformer_params=-1, blocks=4, width=96, tokens=64, latent_elements=3072, image_pixels=1024,
        lora_params_per_rank=0),
])
def test_a_memory_estimate_of_zero_or_negative_sizes_is_refused(estimate):
    with pytest.raises(WorkbenchError, match="must be a whole number >= |is not a byte count"):
        estimate()


@pytest.mark.parametrize("tex", [r"\href{javascript:alert(1)}{x}", r"\style{color:red}{x}",
                                 r"\href{https://example.com}{\frac{a}{b}}"])
def test_a_formula_with_a_link_or_a_style_is_shown_as_its_source(tex):
    from workbench.ui.mathml import mathml

    out = mathml(tex)
    assert out.startswith("<code>") and "href=" not in out and "style=" not in out, out
