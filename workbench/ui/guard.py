"""Keep tracebacks off the page: every handler's errors become a one-line status message.

`guarded(n)` wraps a handler with n outputs whose LAST output is a status `gr.Markdown`. A
`WorkbenchError` shows its own message; anything else shows a short "unexpected error" line and is
logged with its traceback to stderr. Every other output is `gr.skip()`, so the page (and the per-user
state) keeps its last valid values. Generator handlers stay generators.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import time

import gradio as gr

from workbench.core.errors import WorkbenchError, one_line, shorten
from workbench.core.fields import LIMITS, check_limit
from workbench.core.heap import release_freed

log = logging.getLogger("workbench.app")
LONG_HANDLER_S = 0.5  # after a handler this long, freed memory goes back to the OS (`core.heap`; ~10-50 ms)
WHOLE_MAX = 2**63 - 1  # the largest whole number a form may carry (the seed range's top; counts are far smaller)


def escape(text: str) -> str:
    """Text shown literally in Markdown (reward names like jpeg_compressibility keep their underscores)."""
    for char in "\\`*_<":
        text = text.replace(char, "\\" + char)
    return text


def blank(value) -> bool:
    """A field left empty: gradio sends None for an empty number box, "" for an empty text box."""
    return value is None or (isinstance(value, str) and not value.strip())


def whole_number(value, name: str, minimum: int) -> int:
    """A form value (gradio numbers arrive as float or None) as an int >= minimum, else a WorkbenchError."""
    if blank(value):
        raise WorkbenchError(f"{name} is empty: type a whole number >= {minimum}")
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if not math.isfinite(number) or number != int(number) or number < minimum:
        raise WorkbenchError(f"{name} must be a whole number >= {minimum}, got {shorten(value)}")
    if number > WHOLE_MAX:
        raise WorkbenchError(f"{name} must be an integer in {minimum}..2^63 - 1, got {number:g}")
    return int(number)


def limited(value, key: str, name: str | None = None) -> int:
    """A form value as a whole number within the app's range of LIMITS[key] (`core.fields`: the table the controls'
    ranges, the links and the command line read), else a WorkbenchError naming the field and the range. Every
    handler checks its sizes here, so a call that skips the controls (a shared link, the API) meets the same
    limits before any work."""
    name = name or LIMITS[key].what
    value = whole_number(value, name, LIMITS[key].range(app=True)[0])
    check_limit(key, value, app=True, what=name)
    return value


def number(value, name: str) -> float:
    """A form value as a finite float, else a WorkbenchError naming the field."""
    if blank(value):
        raise WorkbenchError(f"{name} is empty: type a number")
    try:
        result = float(value)
    except (TypeError, ValueError):
        raise WorkbenchError(f"{name} must be a number, got {value!r}") from None
    if result != result or result in (float("inf"), float("-inf")):
        raise WorkbenchError(f"{name} must be a finite number, got {value!r}")
    return result


def noise(value) -> float:
    """The noise level a control or link gives, finite and within the app's range (LIMITS["noise_level"])."""
    level = number(value, "noise level")
    check_limit("noise_level", level, app=True)
    return level


def parse_window(text) -> tuple[int, int] | None:
    """An SDE window typed as "START,END" ("0,12") -> (0, 12); empty -> None (the SDE on every step)."""
    if text is None or not str(text).strip():
        return None
    try:
        start, end = (int(v) for v in str(text).replace(" ", "").split(","))
    except ValueError:
        raise WorkbenchError(f"SDE window must be START,END such as 0,12 (or empty for all steps), got {text!r}"
                             ) from None
    return start, end


class Cancelled(WorkbenchError):
    """The gradio event running a handler ended (Stop pressed, page closed): its work stops at the next report."""


def cancel_check():
    """A function that raises `Cancelled` once the gradio event calling this handler is no longer running.

    Gradio cancels the event's task, but a handler's thread keeps computing until it returns; the library's
    progress callbacks call this check, so cancelled work stops within one slice of it. Outside a gradio
    event (a direct call, a test) the check never raises."""
    from gradio.context import LocalContext

    blocks, event_id = LocalContext.blocks.get(None), LocalContext.event_id.get(None)
    queue = getattr(blocks, "_queue", None)
    if queue is None or event_id is None:
        return lambda: None

    def check() -> None:
        if not any(event._id == event_id for job in list(queue.active_jobs) if job for event in job):
            raise Cancelled("the event was cancelled; the work stopped")
    return check


def ok(text: str) -> str:
    return f"✓ {text}"


def error_message(err: BaseException) -> str:
    """The status line for an exception (and a stderr log entry with traceback if it was unexpected)."""
    if isinstance(err, WorkbenchError):
        return f"⚠ {escape(one_line(str(err)))}"
    log.error("unexpected error in a handler", exc_info=err)
    first = (str(err).splitlines() or [""])[0][:200]
    return f"⚠ Unexpected error ({type(err).__name__}: {escape(first)}); details are in the server log."


def checked_number(component: gr.Number | gr.Slider, payload):
    """What a numeric control receives, checked before gradio's own preprocessing: a string, a list, NaN or (for a
    slider) null sent through the API is a gr.Error naming the control, not gradio's generic exception."""
    name = component.label or component.elem_id or "a number field"
    empty_ok = isinstance(component, gr.Number) and not isinstance(component, gr.Slider)
    if payload is None and empty_ok:
        return None  # the handler's own check names the field
    if not isinstance(payload, (int, float)) or isinstance(payload, bool) or not math.isfinite(payload):
        raise gr.Error(f"{name} must be a finite number, got {shorten(payload)}")
    return payload


def guard_numbers(demo: gr.Blocks) -> int:
    """Make every Number and Slider of `demo` check its payload (`checked_number`) first; returns how many.

    The check lives in a subclass the block is switched to, not on the instance: gradio rebuilds a control from
    its class for a session once a handler updated it (a `gr.skip()` too), and that copy must check as well."""
    count = 0
    for block in demo.blocks.values():
        if isinstance(block, (gr.Number, gr.Slider)):
            block.__class__ = _checked_class(type(block))
            count += 1
    return count


_CHECKED: dict[type, type] = {}


def _checked_class(cls: type) -> type:
    """`cls` with a preprocess that runs `checked_number` first (one subclass per class, same block name)."""
    if getattr(cls, "_checks_numbers", False):
        return cls
    if cls not in _CHECKED:
        def preprocess(self, payload):
            return cls.preprocess(self, checked_number(self, payload))
        _CHECKED[cls] = type(cls.__name__, (cls,), {"preprocess": preprocess, "_checks_numbers": True,
                                                     "__module__": cls.__module__})
    return _CHECKED[cls]


def _release_after(start: float) -> None:
    """Return freed memory to the OS after a long handler (its tensors are garbage by now)."""
    if time.perf_counter() - start > LONG_HANDLER_S:
        release_freed()


def guarded(n_outputs: int):
    """Decorator for a handler with n_outputs outputs, the last being the status Markdown."""

    def failed(err: BaseException) -> tuple:
        return (*[gr.skip() for _ in range(n_outputs - 1)], error_message(err))

    def decorate(fn):
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def stream(*args, **kwargs):
                start = time.perf_counter()
                try:
                    yield from fn(*args, **kwargs)
                except Exception as err:  # noqa: BLE001 - the page gets a message, stderr the traceback
                    yield failed(err)
                finally:
                    _release_after(start)
            return stream

        @functools.wraps(fn)
        def call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            except Exception as err:  # noqa: BLE001
                return failed(err)
            finally:
                _release_after(start)
        return call

    return decorate
