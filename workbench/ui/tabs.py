"""The app's tabs, registered once each: `TABS` maps a tab's id to its builder, with a `TabInfo` record.

The page (`layout.build_app`) builds every registered tab in `order`, and shared links (`share`) read the same
records: a link's tab=ID names a registered tab, the tab shown is turned into its id by its label, and a tab whose
view shows measured credit (`needs_credit`) gets its credit measured when a link opens it. A builder is
`fn(page: Page) -> dict | None`, called inside its `gr.Tab`; what it returns is kept in `page.built[id]` for the
tabs built after it (Attribution wires Generate's button to its own map).

    @TABS.register("notes", info=TabInfo("Notes", order=75))
    def notes_tab(page):
        gr.Markdown("...")

The built-in tabs are registered by the page (`layout`), so every consumer runs inside the app.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.core.errors import WorkbenchError, shorten
from workbench.core.registry import Registry

TABS = Registry("tab")


@dataclass(frozen=True)
class TabInfo:
    """One tab's description (see the module doc)."""

    label: str
    """The tab's title on the page (what the tab button shows)."""
    order: int = 100
    """Position among the tabs (lower first); a tab may use what tabs of lower order built."""
    needs_credit: bool = False
    """Its view shows measured credit: a shared link that opens it measures the group's credit first."""

    def __post_init__(self):
        if not self.label.strip():
            raise WorkbenchError("a tab needs a label: the title its button shows")


@dataclass
class Page:
    """What a tab builder gets: the shared Workbench, the session state, its own gr.Tab, the share row's link, the
    policy choices, and what the tabs built before it returned (by id)."""

    wb: object
    session: object
    tab: object
    link: object = None
    choices: list = field(default_factory=list)
    built: dict = field(default_factory=dict)
    demo: object = None  # the page's gr.Blocks (for events on its load)


def tab_ids() -> list[str]:
    """The registered tabs' ids in page order."""
    return sorted(TABS.names(), key=lambda name: (TABS.info(name).order, name))


def tab_id(label_or_id: str) -> str:
    """The id of the tab with this label (the page reports the shown tab by its label); an id stays itself; an
    unknown one stays as given, for `check_tab` to name."""
    by_label = {TABS.info(name).label: name for name in TABS.names()}
    return by_label.get(label_or_id, label_or_id)


def check_tab(name: str) -> str:
    """`name` if it is a registered tab's id, else a message listing the valid ones."""
    if name not in TABS:
        raise WorkbenchError(f"the link's tab={shorten(name)} is not one of {', '.join(tab_ids())}")
    return name
