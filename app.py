"""Chunk-GRPO Workbench in the browser: `python app.py [--model PATH] [--models DIR ...] [--port 7860] [--host HOST]`.

Opens http://127.0.0.1:7860 on the embedded model. The model loads in the background once the server
is up, so the page is interactive at once. Importing this module builds nothing and launches nothing.
`--class` serves one workbench to a class: a class password, a teacher's token, caps (ui/classroom.py).
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import signal
import sys

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def create_app(model: str | None = None, device: str | None = None, runs_root: str = "runs", warm: bool = False,
               dtype: str = "float32", resolution: int | None = None, classroom=None,
               models: tuple[str, ...] = ()):
    """(gr.Blocks, Workbench) for a model folder (None = embedded); warm=True loads the model in the background;
    `models`: folders whose models the picker offers (the only folders besides the runs and the shipped models that
    a session may load); `classroom`: a `ui.classroom.ClassRoom` serves the app to a class."""
    from workbench.ui.classroom import ClassWorkbench
    from workbench.ui.layout import build_app
    from workbench.ui.workbench import Workbench

    options = dict(model=model, device=device, runs_root=runs_root, dtype=dtype, resolution=resolution,
                   models=tuple(models))
    wb = Workbench(**options) if classroom is None else ClassWorkbench(**options, classroom=classroom)
    if warm:
        wb.warm_up()
    return build_app(wb), wb


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from workbench.cli.args import Parser, device, positive_int

    p = Parser(prog="app.py", description="Chunk-GRPO Workbench in the browser.")
    p.add_argument("--model", default=None, help="local model folder (SD3/FLUX diffusers or embedded format); "
                   "default: the embedded model")
    p.add_argument("--device", type=device, default=None,
                   help="cuda, mps or cpu (default: the best available); one this machine lacks is refused at start")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="weights of an SD3 / FLUX model (default float32)")
    p.add_argument("--resolution", type=positive_int, default=None,
                   help="image side in pixels for SD3 / FLUX (default: the model's own)")
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    p.add_argument("--runs", default="runs", help="folder of fine-tuning runs (default runs/)")
    p.add_argument("--models", nargs="+", default=[], metavar="DIR",
                   help="model folders (or folders of model folders) the picker offers; a session may load from "
                        "these, the runs folder and the shipped models only")
    p.add_argument("--class", dest="class_mode", action="store_true",
                   help="serve a class: a class password, a teacher's token, caps on every request, the class's "
                        "experiment (README, 'Hosting a class')")
    p.add_argument("--password", default=os.environ.get("WORKBENCH_CLASS_PASSWORD"),
                   help="--class: the password students type (default: $WORKBENCH_CLASS_PASSWORD, else generated)")
    p.add_argument("--teacher-token", default=os.environ.get("WORKBENCH_TEACHER_TOKEN"),
                   help="--class: the token that unlocks the teacher's controls (default: $WORKBENCH_TEACHER_TOKEN, "
                        "else generated)")
    args = p.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    if not args.class_mode and any(a.split("=")[0] in ("--password", "--teacher-token") for a in given):
        p.error("--password and --teacher-token belong to --class (a class's server); add --class")
    return args


def class_room(args: argparse.Namespace):
    """The ClassRoom of `--class`: the password and token given, or generated (printed at start)."""
    import secrets

    from workbench.ui.classroom import ClassRoom

    return ClassRoom(args.password or secrets.token_urlsafe(6), args.teacher_token)


def exit_on_terminate() -> None:
    """SIGTERM (`kill`, a service manager, a benchmark's `terminate()`) exits as Ctrl-C does, through the atexit
    handlers: the app's fine-tunes are asked to stop. Python's default for SIGTERM ends the process without them, and a
    training process started from the app (a session of its own) went on alone on the cores the next program needed."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from workbench.core.heap import reuse_freed_memory
    from workbench.ui.launch import launch_options  # after the arguments: --help builds nothing

    # The collector is not deferred through the app's start-up as through the CLI's (core/heap.py): the page came
    # up ~1.5 s sooner, but the first credit press of a session took ~1.5 s longer (3 rounds of 3 plus a check,
    # 140b72a:docs/perf-data/epyc/README.md), the model's loading and the first curve overlapping the learner's
    # first clicks.
    reuse_freed_memory()  # before the model loads: its passes reuse freed memory (workbench/core/heap.py)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    classroom = class_room(args) if args.class_mode else None
    demo, wb = create_app(args.model, args.device, args.runs, dtype=args.dtype, resolution=args.resolution,
                          classroom=classroom, models=tuple(args.models))
    atexit.register(wb.jobs.shutdown)
    exit_on_terminate()
    print(f"Chunk-GRPO Workbench: http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    login = {} if classroom is None else dict(auth=classroom.login, auth_message="The class password, any name")
    if classroom is not None:
        print(f"Class mode: students open http://{args.host}:{args.port} with the password {classroom.password}; "
              f"the teacher opens http://{args.host}:{args.port}/?teacher={classroom.token}", file=sys.stderr,
              flush=True)
    demo.queue(default_concurrency_limit=2).launch(server_name=args.host, server_port=args.port,
                                                   prevent_thread_lock=True, **login, **launch_options())
    wb.warm_up()  # after the server is up: importing diffusers and loading the model would delay the page
    demo.block_thread()
    return 0


if __name__ == "__main__":
    sys.exit(main())
