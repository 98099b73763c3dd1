"""A link to the current view: its query string holds what reproduces it, and opening it regenerates it.

`share_link` turns the controls (and the session's policy and chunk schedule) into
`...?model=base&prompt=...&seed=0&G=8&T=16&noise=0.7&sampler=flow_grpo&chunks=2,3,4,7&continuations=4&estimator=mc
&tab=attribution`; the Copy link button writes it to the address bar and the clipboard. The address bar also
follows the view without the button: `follow_link` rebuilds the link whenever the session changes (a Generate,
Learn's example, a credit measurement, a chunk edit) or another tab opens, and `FOLLOW_JS` puts it there with
history.replaceState (no new history entry, no reload).
`open_link` runs on page load: with a query string it loads the policy, samples the same group (sampling and the
credit measurement are seeded, so the numbers are the same), applies the schedule, measures credit with the same
continuations and estimator, and opens the tab. A bad value is a message naming the parameter, never a traceback.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlencode

import gradio as gr

from workbench.core.errors import WorkbenchError, shorten
from workbench.core.fields import check_limit
from workbench.flow.sde import SDE_KINDS
from workbench.rewards import parse_reward_spec
from workbench.rl.chunking import schedule
from workbench.rl.credit_estimators import ESTIMATORS
from workbench.ui import handlers as h
from workbench.ui.guard import escape, guarded, ok, parse_window
from workbench.ui.progress import QUIET
from workbench.ui.state import BASE, Session, format_sizes
from workbench.ui.tabs import TABS, check_tab, tab_id
from workbench.ui.workbench import Workbench

LINK_LIMIT = 8192  # characters of a link's query string: a view's settings take a few hundred
ADDRESS_LIMIT = 2048  # characters of the page's address a link starts with
ADDRESS = re.compile(r"https?://[^\s\"'<>`\\]+")  # an http(s) address without characters that could leave an href
LINK_SIZES = {"G": "group", "T": "steps", "continuations": "continuations", "seed": "seed"}  # -> LIMITS rows
CURRENT_TAB_JS = """(...args) => [...args.slice(0, -2),
  document.querySelector('button[role="tab"][aria-selected="true"]')?.textContent.trim() ?? '',
  window.location.origin + window.location.pathname]"""
QUERY_JS = "(session, query) => [session, window.location.search]"
COPY_JS = """(link) => {
  if (link && link.startsWith('http')) {
    window.history.replaceState(null, '', link);
    navigator.clipboard?.writeText(link).catch(() => {});
  }
  return [];
}"""
# Gradio's page has <base href="./">. With it plotly writes the clip paths of the gr.Plot figures as
# url('<the page's address>#clip…'), the address of each figure's first draw; once the link here had changed the address
# (history.replaceState), chromium took a clip path plotly drew later on such a figure for a reference into another
# document: it fetched the whole page from the server (~410 kB each time) and did not clip. Without the href plotly
# writes url(#clip…); the page's relative addresses resolve as before, "./" being the page's own folder. Standard DOM on
# the page's <base> element, run as the page loads (`demo.load(js=...)`), before its first figure.
ADDRESS_JS = """() => {
  const base = document.querySelector("base[href]");
  if (base && new URL(base.getAttribute("href"), location.href).href === new URL("./", location.href).href) {
    base.removeAttribute("href");
  }
}"""
FOLLOW_JS = """(link) => {
  if (link && link.startsWith('http') && link !== window.location.href) window.history.replaceState(null, '', link);
  return [];
}"""


@guarded(2)
def share_link(wb: Workbench, prompt: str, group: float, steps: float, noise: float, seed: float, sde: str,
               window: str, reward: str, continuations: float, estimator: str, session: Session, tab: str,
               base: str):
    """Copy link -> (the link, status): the address of this page with the view's settings as its query."""
    link = view_link(prompt, group, steps, noise, seed, sde, window, reward, continuations, estimator, session, tab,
                     base)
    return link, ok("link to this view copied (and shown in the address bar); opening it regenerates the view")


def view_link(prompt: str, group: float, steps: float, noise: float, seed: float, sde: str, window: str,
              reward: str, continuations: float, estimator: str, session: Session, tab: str, base: str) -> str:
    """The link to a view: `base` with these settings, the session's policy and chunk schedule as its query
    (the only place a link is built; `parse_query` reads it back)."""
    query = {"model": session.source, "prompt": (prompt or "").strip(), "seed": int(seed), "G": int(group),
             "T": int(steps), "noise": f"{float(noise):g}", "sampler": sde or "", "window": (window or "").strip(),
             "reward": (reward or "").strip(), "chunks": format_sizes(session.sizes),
             "continuations": int(continuations), "estimator": estimator or "mc", "tab": tab_id(tab or "")}
    if session.comparison is not None and session.compared:  # the link reopens the Compare too (`compare_share`)
        query["compare"] = session.compared
    return page_address(base) + "?" + urlencode({k: v for k, v in query.items() if v != ""})


def page_address(base: str | None) -> str:
    """The page's address a link starts with, as the browser sent it: an http(s) address of at most ADDRESS_LIMIT
    characters, or "" (a link relative to the page); anything else (a `javascript:` address survives HTML
    escaping in an exported page's href) is a WorkbenchError."""
    text = (base or "").strip()
    if text and (len(text) > ADDRESS_LIMIT or not ADDRESS.fullmatch(text)):
        raise WorkbenchError(f"the page's address {shorten(text)} is not an http(s) address of at most "
                             f"{ADDRESS_LIMIT} characters; reload the page from its http address")
    return text


def group_link(session: Session, continuations: float, estimator: str, tab: str, base: str) -> str:
    """The link to the session's group with its own settings (not the controls', which may have moved since)."""
    c = session.group.config
    window = f"{c.window[0]},{c.window[1]}" if c.window is not None else ""
    return view_link(session.group.prompt, c.group, c.steps, c.noise_level, c.seed, c.sde, window,
                     session.reward_spec, continuations, estimator, session, tab, base)


def follow_link(prompt: str, group: float, steps: float, noise: float, seed: float, sde: str,
                window: str, reward: str, continuations: float, estimator: str, session: Session, tab: str,
                base: str):
    """The session changed or a tab opened -> the link to the view now shown, for the address bar; the group's
    own settings, not the controls' (Learn's example fills the controls after its session). Without a group, or
    with a control the link cannot hold (an emptied number), the address bar keeps what it has."""
    if session.group is None:
        return gr.skip()
    try:
        return group_link(session, continuations, estimator, tab, base)
    except (TypeError, ValueError):  # WorkbenchError too: an address that is not the page's
        return gr.skip()


def _whole(params: dict, key: str, default: int) -> int:
    """A whole-number parameter, within the app's range of its row in the table of limits (`core.fields`)."""
    text = params.get(key, "")
    if text == "":
        return default
    try:
        value = int(text)
    except ValueError:  # also a number of more than 4300 digits, which Python refuses to read
        raise WorkbenchError(f"the link's {key}={shorten(text)} is not a whole number") from None
    try:
        check_limit(LINK_SIZES[key], value, app=True)
    except WorkbenchError as err:
        raise WorkbenchError(f"the link's {key}={shorten(text)} is out of range: {err}") from None
    return value


def parse_query(params: dict) -> dict:
    """The view a link's query string describes, checked against the same table of limits as the controls, before
    any work; absent parameters take the app's defaults. A bad value is a message naming the parameter and its
    limit."""
    try:
        noise = float(params.get("noise", "0.7"))
        check_limit("noise_level", noise, app=True)
    except ValueError as err:  # a WorkbenchError is a ValueError too
        why = f"is out of range: {err}" if isinstance(err, WorkbenchError) else "is not a number"
        raise WorkbenchError(f"the link's noise={shorten(params['noise'])} {why}") from None
    view = {"model": params.get("model", BASE) or BASE, "prompt": params.get("prompt", "").strip(),
            "seed": _whole(params, "seed", 0), "G": _whole(params, "G", 8), "T": _whole(params, "T", 16),
            "noise": noise, "sampler": params.get("sampler", "flow_grpo"), "window": params.get("window", ""),
            "reward": params.get("reward", ""), "continuations": _whole(params, "continuations", 4),
            "estimator": params.get("estimator", "mc"), "tab": params.get("tab", "generate"),
            "compare": params.get("compare", "").strip()}
    if not view["prompt"]:
        raise WorkbenchError("the link has no prompt= to sample; copy the link again after a Generate")
    if view["sampler"] not in SDE_KINDS:
        raise WorkbenchError(f"the link's sampler={shorten(view['sampler'])} is not one of {', '.join(SDE_KINDS)}")
    if view["estimator"] not in ESTIMATORS.names():
        raise WorkbenchError(f"the link's estimator={shorten(view['estimator'])} is not one of "
                             f"{', '.join(ESTIMATORS.names())}")
    check_tab(view["tab"])
    if view["reward"].strip():
        try:
            parse_reward_spec(view["reward"])
        except WorkbenchError as err:
            raise WorkbenchError(f"the link's reward={shorten(view['reward'])}: {err}") from None
    parse_window(view["window"])
    view["sizes"] = schedule(params["chunks"], view["T"]) if params.get("chunks") else None  # sizes or a chunker
    return view


def link_params(query: str) -> dict:
    """{parameter: its last value} of a page's query string ("?prompt=...&G=8"); a link longer than LINK_LIMIT
    is refused before it is parsed."""
    if len(query or "") > LINK_LIMIT:
        raise WorkbenchError(f"the link's query is {len(query)} characters long; a view's link has at most "
                             f"{LINK_LIMIT}")
    return {k: v[-1] for k, v in parse_qs((query or "").lstrip("?"), keep_blank_values=True).items()}


def preload_link(wb: Workbench, session: Session, query: str) -> None:
    """Page load, before `open_link`: the policy a link names is loaded outside the model's queue (the picker's),
    so a load never holds up other sessions' sampling. A bad link does nothing here: `open_link` says why."""
    try:
        view = parse_query(link_params(query))
        if view["model"] != session.source:
            wb.policy(view["model"])
    except Exception:  # noqa: BLE001 - reported by open_link, which checks the link again
        pass


@guarded(24)
def open_link(wb: Workbench, session: Session, query: str, progress=gr.Progress()):
    """Page load -> (tabs, 12 controls, header, gallery, filmstrip, log-prob figure, credit map, rates, comparison
    figure, its images, its text, session, status): the view a shared link describes, regenerated (with its Compare
    when it holds compare=KEY); without a query string nothing changes. `query` is the page's location.search
    (`QUERY_JS` passes it in). The whole link is checked before any work; the handlers it calls raise their own
    messages, which are shown once (their guarded forms would escape them a second time)."""
    from workbench.ui.compare_share import open_compare
    from workbench.ui.policies import header

    params = link_params(query)
    params.pop("teacher", None)  # class mode's teacher link (ui/classroom_view.py) describes no view
    if not params:
        return (gr.skip(),) * 23 + ("",)
    view = parse_query(params)
    if view["model"] != session.source:  # a folder this app does not offer is refused here, before any load
        source = wb.pin(view["model"])[0]
        session = session.with_source(source.checkpoint or view["model"])
    out = h.generate.__wrapped__(wb, view["prompt"], view["G"], view["T"], view["noise"], view["seed"],
                                 view["reward"], session, view["sampler"], view["window"], progress=progress)
    session = out[-2]
    gallery, strip, logprob, heatmap, rates = out[:5]
    if view["sizes"] is not None:
        session = session.with_sizes(view["sizes"])
    if TABS.info(view["tab"]).needs_credit:
        measured = h.attribute.__wrapped__(wb, view["continuations"], session, view["estimator"], progress=progress)
        session = measured[-2]
        heatmap, rates = measured[:2]
    compared = (gr.skip(),) * 3
    if view["compare"]:
        session, compared = open_compare(wb, view["compare"], view["continuations"], session, view["estimator"],
                                         progress)
    controls = (view["prompt"], view["G"], view["T"], view["noise"], view["seed"], view["reward"], view["sampler"],
                view["window"], session.source, format_sizes(session.sizes), view["continuations"], view["estimator"])
    note = f"opened a shared link: '{escape(view['prompt'])}', G={view['G']}, T={view['T']}, seed {view['seed']}"
    if view["compare"]:
        note += f", compared with {escape(view['compare'])}"
    return (gr.Tabs(selected=view["tab"]), *controls, header(wb, session), gallery, strip, logprob, heatmap, rates,
            *compared, session, ok(note))


@guarded(2)
def export_page(wb: Workbench, prompt: str, group: float, steps: float, noise: float, seed: float, sde: str,
                window: str, reward: str, continuations: float, estimator: str, session: Session, tab: str,
                base: str):
    """Export page -> (the HTML file, status): the session's group and its measured credit as one standalone page
    (`workbench.viz.page`; the same as `workbench export`)."""
    from workbench.ui.run_handlers import _fresh_export_folder
    from workbench.viz.page import write_page

    if session.comparison is not None:  # a Compare: both groups and the table on one page
        from workbench.ui.compare_share import write_compare_page
        from workbench.ui.run_handlers import _fresh_export_folder

        link = share_link(wb, prompt, group, steps, noise, seed, sde, window, reward, continuations, estimator,
                          session, tab, base)[0]
        out = write_compare_page(session, link, _fresh_export_folder() / "workbench-compare.html")
        return gr.File(str(out), visible=True), ok(f"page of both compared groups written "
                                                   f"({out.stat().st_size / 1e6:.1f} MB): it opens offline")
    if session.group is None or session.credit is None:
        raise WorkbenchError("nothing to export yet: generate a group and measure its credit in Attribution")
    g, credit = session.group, session.credit
    settings = {"model": session.source, "prompt": g.prompt, "seed": g.config.seed, "G": g.group_size,
                "T": g.num_steps, "noise level": g.config.noise_level, "sampler": g.config.sde,
                "reward": session.reward_spec, "chunks": format_sizes(session.sizes),
                "continuations": int(credit.counts.max()), "estimator": credit.estimator, "precision": credit.precision,
                "z": session.z}
    link = group_link(session, int(credit.counts.max()), credit.estimator, tab, base)  # the exported group's view
    out = _fresh_export_folder() / "workbench-group.html"  # removed after a while, like the run downloads
    write_page(wb.policy(session.source), g, session.rewards, session.advantages, credit, session.z, settings, out,
               link=link, curve=wb.curve(g.num_steps, g.config.noise_level, session.source))
    size = out.stat().st_size / 1e6
    return gr.File(str(out), visible=True), ok(f"page written ({size:.1f} MB): download it and open it in any "
                                               "browser, no network needed")


def share_row() -> dict:
    """The Copy link button and the link it made (under the model picker)."""
    with gr.Row():
        copy = gr.Button("Copy link to this view", elem_id="share-btn", scale=1)
        link = gr.Textbox(label="Link to this view (model, prompt, seed, G, T, noise, sampler, chunks, "
                                "continuations, estimator, tab, a Compare's second policy)", interactive=False,
                          elem_id="share-link", scale=4)
        export = gr.Button("Export page (HTML)", elem_id="export-btn", scale=1)
    page = gr.File(label="Exported page: one HTML file that opens offline", interactive=False, elem_id="export-file",
                   visible=False)
    tab = gr.Textbox(visible="hidden", elem_id="share-tab")  # filled by CURRENT_TAB_JS
    base = gr.Textbox(visible="hidden", elem_id="share-base")
    status = gr.Markdown(elem_id="share-status")
    return dict(copy=copy, link=link, tab=tab, base=base, status=status, export=export, page=page)


def wire(wb: Workbench, demo: gr.Blocks, row: dict, tabs: gr.Tabs, session, controls: list, shown: list):
    """Copy link reads `controls` (prompt, G, T, noise, seed, sampler, window, reward, continuations, estimator),
    and so does the address bar, which follows every session change and tab switch;
    a page load with a query string fills `shown` (prompt, G, T, noise, seed, reward, sampler, window, picker,
    chunk spec, continuations, estimator, header, gallery, filmstrip, log-prob figure, credit map, rates, comparison
    figure, its images, its text). Returns the link's event (`open_link`), for what follows it."""
    from functools import partial

    row["copy"].click(partial(share_link, wb), [*controls, session, row["tab"], row["base"]],
                      [row["link"], row["status"]], js=CURRENT_TAB_JS, api_name="share_link", queue=False).then(
        None, [row["link"]], None, js=COPY_JS)
    row["export"].click(partial(export_page, wb), [*controls, session, row["tab"], row["base"]],
                        [row["page"], row["status"]], js=CURRENT_TAB_JS, api_name="export_page",
                        concurrency_id="model", concurrency_limit=1)
    follow = dict(fn=follow_link, inputs=[*controls, session, row["tab"], row["base"]], outputs=[row["link"]],
                  js=CURRENT_TAB_JS, queue=False, **QUIET, api_visibility="private")
    gr.on([session.change, tabs.change], **follow).then(None, [row["link"]], None, js=FOLLOW_JS)
    demo.load(None, None, None, js=ADDRESS_JS)  # plotly's clip paths stay in the page as the address changes
    return demo.load(partial(preload_link, wb), [session, row["tab"]], None, js=QUERY_JS, api_visibility="private",
                     concurrency_id="load", concurrency_limit=1, **QUIET).then(  # the load: not in the
        partial(open_link, wb), [session, row["tab"]], [tabs, *shown, session, row["status"]], js=QUERY_JS,  # way of
        api_visibility="private", concurrency_id="model", concurrency_limit=1,  # other sessions' sampling
        show_progress_on=[shown[16]])  # over the credit map only: not over every control of the page

