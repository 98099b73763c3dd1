"""Plotly figures of the workbench, without gradio: `plots` (trajectories, chunk curve, training
metrics), `credit_view` (measured credit), `explain_plots` (gradient weights of the objectives).

The app (`workbench.ui`), the notebooks and the exported page draw with the same functions."""

import plotly.io as _pio

# Every workbench figure uses the plotly_white look. Set once as plotly's default rather than per figure: a
# template given to a figure is copied and validated (~10-20 ms a figure, most of a live chunk edit's cost),
# the default one is attached without either. Notebooks that import the workbench get the same default.
_pio.templates.default = "plotly_white"
