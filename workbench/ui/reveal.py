"""Bring an action's answer into view: after a button whose status line sits below the fold, the page scrolls
so that the line is near the top of the window, with the figure it names under it.

Gradio's own `scroll_to_output` scrolls only from a progress tracker (none where progress is hidden or shown on
another component): after Measure credit, Apply sizes and Objectives' Compute it left the page where it was, and
after Learn's example only some of the time; at 1280x800 the answer landed below the fold and the only visible
change was the address in the link box. This is
the documented `js` argument of an event listener (a function run in the browser, no call to the server), and it
touches only the page's own elements, found by their `elem_id`.
"""

from __future__ import annotations

import json

MARGIN_PX = 80  # the line's distance from the window's top after the scroll: the tab names stay in sight above it
BOTTOM_PX = 120  # a line whose top is within this of the window's bottom is scrolled too: its figure is below


def reveal(elem_id: str) -> dict:
    """Keyword arguments of an event listener (`.then(**reveal("credit-status"))`) that scroll the page so the
    element `elem_id` sits MARGIN_PX below the window's top, when it is above the window or in its last BOTTOM_PX;
    a line already in view stays where the student is reading it."""
    js = (f"() => {{ const line = document.getElementById({json.dumps(elem_id)}); if (!line) return;"
          f" const top = line.getBoundingClientRect().top;"
          f" if (top < 0 || top > window.innerHeight - {BOTTOM_PX})"
          f" window.scrollBy({{top: top - {MARGIN_PX}, behavior: 'instant'}}); }}")
    return dict(fn=None, inputs=None, outputs=None, js=js, api_visibility="private", queue=False)
