"""How the page's events show their work.

`QUIET`, the options of an event that shows no progress: no progress animation (`show_progress="hidden"`) and no
output that carries the event's status (`show_progress_on=[]`). Gradio's page (6.31) remembers every component any
event has shown a status on, and on each status message of any event updates all of them again, copying each one's
props, figures included: an event that keeps its outputs out of that set spares every later event that work (a chunk
edit's time: docs/performance.md).
"""

from __future__ import annotations

QUIET = dict(show_progress="hidden", show_progress_on=[])
