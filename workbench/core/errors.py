"""User-facing errors.

A `WorkbenchError` carries a one-line message that says what is wrong and how to fix it. The command
line prints it without a traceback and exits non-zero; the app shows it as a message on the page.
`one_line` keeps any message to one short line (a 5,000-chunk spec must not print a 15,000-character error).
"""

from __future__ import annotations

MESSAGE_LIMIT = 400  # characters of an error line; the rest is cut with a note of how much


class WorkbenchError(ValueError):
    """Bad input or a missing file, explained in one line for the person who caused it."""


class NonFiniteError(WorkbenchError):
    """A computation produced NaN or inf (images, log-probs): the caller may know the cause (a learning rate)."""


def one_line(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """`text` on one line (whitespace runs collapsed), at most `limit` characters: a long middle (a 5,000-value
    list) is cut with a note, keeping the start (what is wrong) and the end (what to change)."""
    flat = " ".join(str(text).split())
    if len(flat) <= limit:
        return flat
    keep = limit - 40  # 40 characters hold the note
    head = keep * 3 // 5
    return f"{flat[:head]} ... ({len(flat) - keep} characters cut) ... {flat[head - keep:]}"


def shorten(value, limit: int = 60) -> str:
    """repr(value) cut to `limit` characters, for quoting what the user typed inside a message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 5] + "...'"
