"""The browser workbench (Gradio): layout in `layout`, handlers in `handlers` and `run_handlers`,
per-user state in `state`, training processes in `jobs`; the figures live in `workbench.viz`.
Never imported by the library."""
