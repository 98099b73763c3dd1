"""The command line: `python -m workbench <command>`."""
