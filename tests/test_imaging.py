"""Pictures the views show: the labels `core.imaging.with_header` writes above a filmstrip's columns."""

from __future__ import annotations


def test_filmstrip_labels_are_a_quarter_of_a_column_tall():
    """A 16-column filmstrip of 98-px columns is shown at about 3/4 of its width: its step labels are drawn ~24 px
    tall so they read at ~18 px (the 11-px default font read as 8 px)."""
    import numpy as np
    from PIL import Image

    from workbench.core.imaging import HEADER, with_header

    labelled = np.asarray(with_header(Image.new("RGB", (16 * 98 + 2, 100), "white"), ["t=10"] * 16, 98))
    ink = (labelled[:HEADER, :98].min(axis=2) < 128).any(axis=1).nonzero()[0]  # rows of the first label with ink
    assert ink.size and ink[-1] - ink[0] + 1 >= 98 // 4 * 0.6, ink  # cap height of a 24-px font: ~17 px
