"""Class mode (`app.py --class`): one server for a teacher and a class of students, who cannot break each other's work.

What the class shares lives in one `ClassRoom`: the class password (Gradio's `launch(auth=...)` asks for it), the
teacher's token, the caps the teacher sets on every request (`ClassCaps`), who started which fine-tuning run (only that
session or the teacher may stop it), and the class's experiment: each student's measured group, unless the student
opted out. Sessions are told apart by Gradio's session hash (`gr.Request.session_hash`, one per open page).

`ClassWorkbench` is the app's `Workbench` that also loads policies only from the allowed folders
(`train.allowed.AllowedFolders`): a path typed into the picker or carried by a link is refused with one message,
whether it exists or not. The page of class mode (its tab and wrapped handlers) is in `ui/classroom_view.py`.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, fields, replace

from workbench.core.errors import WorkbenchError
from workbench.ui.workbench import Workbench

CAP_LABELS = {"group": "group size G", "steps": "steps T", "continuations": "continuations (M)",
              "refine_budget": "budget (continuations)", "objective_updates": "inner updates N"}
CAP_RANGES = {"group": (2, 16), "steps": (2, 32), "continuations": (1, 16), "refine_budget": (1, 10_000),
              "objective_updates": (0, 10)}  # what the app's own controls accept (ui/layout.py, handlers)


@dataclass(frozen=True)
class ClassCaps:
    """The most one request of a session may ask for in class mode: a tighter bound than the app's own limits, set by
    the teacher. The defaults are the app's defaults, so the Learn path and the default measurement fit."""

    group: int = 8
    """Group size G of Generate and of an opened link (images per prompt)."""
    steps: int = 16
    """Denoising steps T of Generate and of an opened link."""
    continuations: int = 4
    """Continuations per state M of Measure credit and of Compare (Attribution)."""
    refine_budget: int = 480
    """Continuations one Refine press may spend (one default measurement costs 480)."""
    objective_updates: int = 3
    """Inner updates N of one Objectives Compute."""

    def __post_init__(self):
        for f in fields(self):
            value, (low, high) = getattr(self, f.name), CAP_RANGES[f.name]
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise WorkbenchError(f"the cap on {CAP_LABELS[f.name]} must be a whole number in {low}..{high}, "
                                     f"got {value!r}")

    def check(self, **asked: int) -> None:
        """A WorkbenchError naming the first field asked above its cap, e.g. check(group=12)."""
        for name, value in asked.items():
            cap = getattr(self, name)
            if value > cap:
                raise WorkbenchError(f"{CAP_LABELS[name]} is at most {cap} in this class (the teacher's cap), got "
                                     f"{value}")

    def line(self) -> str:
        """The caps in one line of Markdown."""
        return " · ".join(f"{CAP_LABELS[f.name]} ≤ {getattr(self, f.name)}" for f in fields(self))


def held(wb: Workbench, **asked: int) -> None:
    """Hold a request to the class's caps (nothing outside class mode): the handlers call it with what was asked."""
    room = getattr(wb, "classroom", None)
    if room is not None:
        room.caps.check(**asked)


@dataclass(frozen=True)
class Measurement:
    """One student's measured group, as the class view shows it (no name: the student's number in the class)."""

    student: int  # 1, 2, ... in the order students first added a group
    step: float  # misattributed share of the determined step cells
    chunk: float  # the same under the student's chunk schedule
    sizes: tuple[int, ...]  # the chunk schedule
    group: int  # G
    steps: int  # T
    continuations: int  # M (or 1 for a look-ahead estimator)
    prompt: str
    link: str  # the share link that regenerates the view (relative to the server)
    when: float


def identity(request) -> str:
    """The session a request comes from (Gradio's session hash, one per open page)."""
    who = getattr(request, "session_hash", None)
    if not who:
        raise WorkbenchError("this request carries no session; reload the page")
    return who


class ClassRoom:
    """What the class shares; thread-safe (Gradio runs handlers in worker threads)."""

    def __init__(self, password: str, teacher_token: str | None = None, caps: ClassCaps | None = None):
        if not password:
            raise WorkbenchError("class mode needs a class password (--password)")
        self.password, self.token = password, teacher_token or secrets.token_urlsafe(12)
        self.caps, self.shown, self.version = caps or ClassCaps(), False, 0
        self._teachers: set[str] = set()
        self._owners: dict[str, str] = {}  # run id -> the session that started it
        self._opted_out: set[str] = set()
        self._measured: dict[str, Measurement] = {}  # session -> its newest measured group
        self._numbers: dict[str, int] = {}  # session -> its anonymous number
        self._lock = threading.Lock()

    def login(self, username: str, password: str) -> bool:
        """Gradio's `auth` callable: any name with the class password."""
        return secrets.compare_digest(str(password).encode(), self.password.encode())

    def unlock(self, token: str, request) -> bool:
        """The teacher's token entered in a page (or its URL): that page's session becomes the teacher's."""
        if not token or not secrets.compare_digest(str(token).encode(), self.token.encode()):
            return False
        with self._lock:
            self._teachers.add(identity(request))
        return True

    def is_teacher(self, request) -> bool:
        return getattr(request, "session_hash", None) in self._teachers

    def teacher_only(self, request, what: str) -> None:
        if not self.is_teacher(request):
            raise WorkbenchError(f"only the teacher can {what}: enter the teacher's token in the Class tab")

    def own(self, run_id: str, request) -> None:
        """The session that started `run_id` (the only one besides the teacher that may stop it)."""
        with self._lock:
            self._owners[run_id] = identity(request)

    def owner(self, run_id: str) -> str | None:
        return self._owners.get(run_id)

    def may_stop(self, run_id: str | None, request) -> bool:
        """Whether this session may stop `run_id`: it started it, or it is the teacher's."""
        return self.is_teacher(request) or (run_id is not None and self.owner(run_id) == identity(request))

    def set_caps(self, request, **caps: int) -> ClassCaps:
        self.teacher_only(request, "set the caps")
        self.caps = replace(self.caps, **caps)  # checked by ClassCaps
        return self.caps

    def show(self, request, shown: bool) -> None:
        self.teacher_only(request, "show the class view")
        with self._lock:
            self.shown, self.version = bool(shown), self.version + 1

    def clear(self, request) -> None:
        self.teacher_only(request, "clear the class's measurements")
        with self._lock:
            self._measured.clear()
            self._numbers.clear()
            self.version += 1

    def opt(self, request, share: bool) -> None:
        """A student's choice to add (the default) or not add their measured groups; opting out removes the last."""
        who = identity(request)
        with self._lock:
            if share:
                self._opted_out.discard(who)
            else:
                self._opted_out.add(who)
                if self._measured.pop(who, None) is not None:
                    self.version += 1

    def record(self, request, step: float, chunk: float, sizes, group: int, steps: int, continuations: int,
               prompt: str, link: str) -> Measurement | None:
        """A session's newest measured group replaces its last one; None when the session opted out."""
        who = identity(request)
        with self._lock:
            if who in self._opted_out:
                return None
            number = self._numbers.setdefault(who, len(self._numbers) + 1)
            measurement = Measurement(number, float(step), float(chunk), tuple(int(s) for s in sizes), int(group),
                                      int(steps), int(continuations), prompt, link, time.time())
            self._measured[who] = measurement
            self.version += 1
            return measurement

    def measurements(self) -> list[Measurement]:
        """Every session's newest measured group, in the students' order."""
        with self._lock:
            return sorted(self._measured.values(), key=lambda m: m.student)

    def sees_class_view(self, request) -> bool:
        return self.shown or self.is_teacher(request)


class ClassWorkbench(Workbench):
    """The app's Workbench in class mode: the handlers find the `ClassRoom` as `wb.classroom`. Policies load only
    from the allowed folders, as in every Workbench (`Workbench.source` checks each path a key names)."""

    def __init__(self, *args, classroom: ClassRoom, **kwargs):
        super().__init__(*args, **kwargs)
        self.classroom = classroom
