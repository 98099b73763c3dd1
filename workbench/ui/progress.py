"""How the page's events show their work.

`QUIET`, the options of an event that shows no progress: no progress animation (`show_progress="hidden"`) and no
output that carries the event's status (`show_progress_on=[]`). Gradio's page (6.31) remembers every component any
event has shown a status on, and on each status message of any event (queued, started, done, for every edit and the
link, wait lines and views that follow it) updates all of them again, copying each one's props, figures included:
with the outputs of the quiet events in that set a chunk edit took about 3.8x as long as the patched page of 140b72a,
without them 2.3x (docs/performance.md).
"""

from __future__ import annotations

QUIET = dict(show_progress="hidden", show_progress_on=[])
