"""Helpers of the app's tests: a fake `workbench train` and a Workbench that runs it, the handlers' status and skip
values, starting a run from the Fine-tune form, waiting, a free port. Test files import it, never each other."""

from __future__ import annotations

import socket
import sys
import textwrap
import time
from xml.etree import ElementTree

from support import PROMPT  # noqa: F401 - the prompt of the app's tests

from workbench.ui import layout  # noqa: F401 - registers the app's tabs (ui/tabs.py), which shared links name
from workbench.ui import run_handlers as rh
from workbench.ui.state import Session
from workbench.ui.workbench import Workbench

FAKE_TRAIN = textwrap.dedent('''
    """Fake `workbench train`: writes the run-folder files the real trainer writes, honours STOP."""
    import argparse, json, os, sys, time
    p = argparse.ArgumentParser()
    p.add_argument("--out"); p.add_argument("--config"); p.add_argument("--mode", default="ok")
    args, _ = p.parse_known_args()
    out = args.out
    with open(args.config) as f:
        config = json.load(f)
    args.iterations = config["iterations"]
    if args.mode == "slow_start":
        time.sleep(60)
    os.makedirs(out, exist_ok=True)
    def write(name, obj):
        with open(os.path.join(out, name + ".tmp"), "w") as f:
            json.dump(obj, f)
        os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))
    write("config.json", config)
    def status(state, it):
        write("status.json", {"state": state, "iteration": it, "pid": os.getpid(), "error": None,
                              "started": time.time()})
    status("running", 0)
    for it in range(1, args.iterations + 1):
        if os.path.exists(os.path.join(out, "STOP")):
            status("stopped", it - 1); sys.exit(0)
        with open(os.path.join(out, "metrics.jsonl"), "a") as f:
            f.write(json.dumps({"iteration": it, "reward/mean": 0.1 * it, "loss/policy": -0.01 * it,
                                "policy/clip_frac": 0.0, "loss/kl": 0.0, "policy/grad_norm": 1.0,
                                "chunk/ratio_mean_0": 1.0, "chunk/ratio_mean_1": 1.0}) + "\\n")
        status("running", it)
        if args.mode == "crash" and it == 1:
            print("RuntimeError: out of memory (fake)", file=sys.stderr); sys.exit(1)
        time.sleep(0.3)
    status("finished", args.iterations)
''')


def fake_workbench(tmp_path, model_dir, mode="ok") -> Workbench:
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAIN)
    return Workbench(model=str(model_dir), device="cpu", runs_root=str(tmp_path / "runs"),
                       train_command=[sys.executable, str(script), "--mode", mode])


def msg(outputs) -> str:
    """The status message of a handler's outputs, with Markdown escapes removed."""
    return outputs[-1].replace("\\", "")


def is_skip(value) -> bool:
    return isinstance(value, dict) and value.get("__type__") == "update" and len(value) == 1


def start(wb, session=None, iterations=3, **kw):
    args = dict(objective="chunk_grpo", reward="adherence", chunks="2,2", lr=3e-5, iterations=iterations, group=2,
                steps=4, lora_rank=0, sde="flow_grpo", window="", lesson=rh.NO_LESSON) | kw
    assert tuple(args) == rh.FORM_FIELDS
    return rh.start_run(wb, *args.values(), session or Session())


def wait_for(predicate, timeout=20.0):
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def curve_drawn(curve: str) -> tuple[list[float], str]:
    """The dashed boundary lines (their step x) and the title of the curve's markup (viz/dynamics_svg.py)."""
    root = ElementTree.fromstring(curve)
    lines = [float(line.get("data-x")) for line in root.iter("line") if line.get("class") == "boundary"]
    return lines, root.find(".//text").text
