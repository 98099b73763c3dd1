"""How the page is served: the keyword arguments of `demo.launch` (`launch_options`), the page's style rules and
its math font's static route.
"""

from __future__ import annotations

from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from workbench.ui import figures
from workbench.ui.mathml import FONT as MATH_FONT
from workbench.ui.mathml import font_css

# The cell formula's math font, served from the package's assets folder at ASSETS_ROUTE (a static route of the app,
# so the page's config names no server path) and asked for as the page loads, so the first formula is drawn in it
ASSETS_ROUTE = "workbench-assets"
MATH_FONT_URL = f"{ASSETS_ROUTE}/{MATH_FONT.name}"
MAX_UPLOAD = "1mb"  # the app takes no files: Gradio's upload route refuses anything larger (it kept any size)
MATH_FONT_PRELOAD = f'<link rel="preload" href="{MATH_FONT_URL}" as="font" type="font/woff2" crossorigin>'
# The filmstrip's step labels (t=0 .. t=T-1) run along the top of its image, where Gradio draws the component's
# label (left) and its buttons (right) over the image: they hid t=0..3 and t=15. The image starts below them.
PAGE_CSS = "#filmstrip .image-container { padding-top: 2.6em; }\n" + font_css(MATH_FONT_URL) + figures.CSS


def launch_options() -> dict:
    """Keyword arguments of `demo.launch`, fresh each time (Gradio adds to `app_kwargs`):
    - no run history: Gradio kept every call's outputs (two figures per chunk edit) in the browser's localStorage,
      parsed and written again on each call, half the page's CPU of an edit;
    - the page's few style rules (`PAGE_CSS`, the figures' among them: `ui.figures`), and its math font served from
      the package (`ui.mathml`) at ASSETS_ROUTE, a static route of the app's FastAPI (Gradio's file route is given
      no folder, so the page's config names no server path);
    - uploads of at most MAX_UPLOAD."""
    assets = Mount(f"/{ASSETS_ROUTE}", StaticFiles(directory=MATH_FONT.parent), name=ASSETS_ROUTE)
    return {"run_history": False, "app_kwargs": {"routes": [assets]}, "css": PAGE_CSS, "max_file_size": MAX_UPLOAD}
