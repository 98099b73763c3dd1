"""Report of scripts/experiment_misattribution.py (placeholder)."""


def write(result, out):
    pass
