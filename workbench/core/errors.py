"""User-facing errors.

A `WorkbenchError` carries a one-line message that says what is wrong and how to fix it. The command
line prints it without a traceback and exits non-zero; the app shows it as a message on the page.
"""

from __future__ import annotations


class WorkbenchError(ValueError):
    """Bad input or a missing file, explained in one line for the person who caused it."""
