"""Draw the app's figures in headless chromium, one by one, and print for each the time of a fresh draw (median) and
whether plotly pushed its margins out to fit a legend, a colorbar or tick labels (it then draws the figure twice).

    .venv/bin/python bench/figures.py [--width 1214] [--repeats 9]

The figures are the library's, for the embedded model's default group (G=8, T=16, credit at M=4), drawn as Gradio's
plot component draws them (autosize, responsive, a 100 px top margin under a title, margins allowed to grow) in a
page of the width of the app's plots in a 1280 px window (1214 px). Needs /usr/bin/chromium and playwright.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPT = "a large red circle in the top left on a white background"
DRAW = """async ([figure, repeats]) => {
    const host = document.getElementById("host");
    const frame = () => new Promise(resolve => requestAnimationFrame(() => resolve()));
    const times = [];
    let gd = null;
    for (let i = 0; i <= repeats; i++) {
        const fresh = document.createElement("div");
        gd ? host.replaceChild(fresh, gd) : host.appendChild(fresh);
        gd = fresh;
        const start = performance.now();
        await Plotly.newPlot(gd, figure.data, figure.layout, figure.config);
        await frame();
        if (i > 0) times.push(performance.now() - start);  // the first draw warms plotly up
    }
    const m = figure.layout.margin, svg = gd.querySelector(".main-svg");
    const areas = [...gd.querySelectorAll(".draglayer .nsewdrag")]  // the plot areas drawn (a drag acts on them)
        .map(r => ["x", "y", "width", "height"].map(k => Number(r.getAttribute(k))));
    const s = {l: Math.min(...areas.map(a => a[0])),
               r: svg.getAttribute("width") - Math.max(...areas.map(a => a[0] + a[2])),
               b: svg.getAttribute("height") - Math.max(...areas.map(a => a[1] + a[3]))};
    return [times, ["l", "r", "b"].filter(k => s[k] > m[k] + 0.5).map(k => `${k} ${m[k]} -> ${Math.round(s[k])}`)];
}"""


def as_gradio_draws(figure) -> dict:
    """The figure's JSON with what Gradio's plot component changes before it calls Plotly.react
    (gradio js/plot/shared/plot_types/PlotlyPlot.svelte)."""
    f = copy.deepcopy(json.loads(figure.to_json()))
    layout = f["layout"]
    layout["autosize"] = True
    layout.setdefault("margin", {})
    if layout.get("title"):
        layout["margin"]["t"] = max(100, layout["margin"].get("t", 0))
    layout["margin"]["autoexpand"] = True
    f["config"] = {"responsive": True}
    return f


def figures() -> dict:
    """{name: go.Figure} of the app's views for the default group."""
    import plotly.graph_objects as go

    from workbench.ui import handlers as h
    from workbench.ui import learn
    from workbench.ui import objectives as ob
    from workbench.ui import policies as pol
    from workbench.ui import step_handlers as sh
    from workbench.ui.state import Session
    from workbench.ui.workbench import Workbench
    from workbench.viz import credit_view, plots
    from workbench.viz.explain_plots import objective_maps_figure

    class Quiet:
        def __call__(self, *a, **k):
            pass

        def tqdm(self, it, *a, **k):
            return it

    wb = Workbench(model=None, device="cpu", runs_root=str(ROOT / "runs"))
    out = {}
    session = Session()
    for stage in learn.learn_walk(wb, session, progress=Quiet()):
        out.update({f"learn {n}": x for n, x in enumerate(stage) if isinstance(x, go.Figure)})
    generated = h.generate(wb, PROMPT, 8, 16, 0.7, 0, "adherence", Session(), progress=Quiet())
    out["generate: log-probs"] = generated[2]
    heatmap, _, session, _ = h.attribute(wb, 4, generated[-2], progress=Quiet())
    out["attribution: credit"] = heatmap
    out["attribution: per-step advantages"] = sh.compare_advantages(wb, sh.FIT, session)[0]
    compared = pol.compare(wb, pol.RUN_BASE, 4, session, progress=Quiet())
    out["attribution: before and after"] = compared[0]
    # the Chunks and Objectives tabs draw their figures as markup (viz/chunk_map.py, dynamics_svg.py, push_maps.py);
    # the notebooks and the exported page draw them with plotly
    curve = wb.curve(16, 0.7)
    out["exported page: curve"] = plots.dynamics_figure(curve.mean, *curve.quantiles, session.sizes,
                                                        curve.per_trajectory.shape[0], wb.curve_prompts)
    out["exported page: chunk map"] = credit_view.chunk_figure(session.credit, session.z)
    view = ob.objectives_compute(wb, 3, 1e-3, 1e-4, "step_grpo", None, session, progress=Quiet())[3]
    out["exported page: objectives' maps"] = objective_maps_figure(ob.explanations(view, session.sizes),
                                                                   session.credit.step_credit)
    return {name: f for name, f in out.items() if isinstance(f, go.Figure)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=1214, help="plot width in px (the app's in a 1280 px window)")
    p.add_argument("--repeats", type=int, default=9, help="fresh draws timed per figure")
    args = p.parse_args()
    from playwright.sync_api import sync_playwright

    shown = figures()
    plotly_js = (Path(__import__("plotly").__file__).parent / "package_data" / "plotly.min.js").read_text()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium",
                                     args=["--headless", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": args.width + 66, "height": 720})
        page.set_content(f"<div id=host style='width:{args.width}px'></div>")
        page.add_script_tag(content=plotly_js)
        for name, figure in shown.items():
            times, pushed = page.evaluate(DRAW, [as_gradio_draws(figure), args.repeats])
            note = f"margins pushed out ({', '.join(pushed)}): drawn twice" if pushed else "drawn once"
            print(f"{name:36s} {statistics.median(times):6.1f} ms  {note}")
        browser.close()


if __name__ == "__main__":
    main()
