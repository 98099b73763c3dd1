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
from workbench.models.embedded import build_embedded, save_embedded
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
def model_dir(tmp_path_factory):
    return save_embedded(build_embedded(seed=0), tmp_path_factory.mktemp("model"))


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
    (ATTRIBUTE + ["--chunks", ",".join(["1"] * 5000)], ["--chunks", "characters cut", "sum to 3"]),
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
    assert_refused(capsys, argv, "needs at least", "lower group, steps or prompts_per_iteration")
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
    status = h.chunks_from_spec(wb, ",".join(["1"] * 5000), Session())[-1]
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


CORRUPT_CHECKPOINTS = {  # damage -> words of the one resume error line
    "optimizer.pt garbage": (_optimizer(b"\x00garbage"), "no complete checkpoint"),
    "optimizer.pt a list": (_optimizer([1, 2]), "no complete checkpoint"),
    "optimizer.pt torn": (lambda run: _optimizer((run / "checkpoints/iter_0002/optimizer.pt").read_bytes()[:300])(run),
                          "no complete checkpoint"),
    "optimizer.pt zeroed inside": (_flip_optimizer_bytes, "no complete checkpoint"),
    "optimizer state of another model": (_optimizer({"state": {}, "param_groups": [{"params": [0, 1, 2]}]}),
                                         "does not fit this model and optimizer"),
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
