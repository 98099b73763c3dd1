"""Plotly figures of the workbench, without gradio: `plots` (trajectories, chunk curve, training
metrics), `credit_view` (measured credit), `explain_plots` (gradient weights of the objectives).

The app (`workbench.ui`), the notebooks and the exported page draw with the same functions."""
