"""mlsys.viz: the roofline plot draws min(peak, bandwidth * I) for each roof and places points."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from mlsys import Q_, viz
from mlsys.roofline import Roof


def test_roofline_plot_draws_each_roof_and_point():
    measured = Roof(Q_(800, "TFLOP/s"), Q_(3, "TB/s"), "H100 measured")
    ax = viz.roofline_plot(["H100", measured], points=[viz.Point("copy", Q_(0.125, "FLOP/byte"), Q_(0.3, "TFLOP/s"))])
    lines = [ln for ln in ax.get_lines() if ln.get_label() in ("H100-SXM bf16", "H100 measured")]
    assert len(lines) == 2
    x, y = lines[1].get_data()
    # below the measured ridge (800/3 = 266.7 FLOP/B): y = 3 TB/s * x, in TFLOP/s
    below = x < 200
    assert np.allclose(y[below], 3 * x[below])
    assert np.allclose(y[x > 300], 800)
    assert len(ax.collections) == 1  # the one point
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"


def test_roofline_plot_rejects_empty_and_wrong_units():
    with pytest.raises(ValueError, match="at least one"):
        viz.roofline_plot([])
    with pytest.raises(Exception, match="FLOP/s"):
        viz.roofline_plot("H100", points=[viz.Point("bad", Q_(1, "FLOP/byte"), Q_(1, "TB/s"))])


def test_plain_log_ticks_labels_powers_of_ten_plainly() -> None:
    """A log axis from 1 to 100 gets major ticks at 1, 2, 5, 10, 20, 50, 100, printed as plain numbers."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.set_xscale("log")
    ax.set_xlim(1, 100)
    viz.plain_log_ticks(ax.xaxis)
    fig.canvas.draw()
    shown = [x for x in ax.get_xticks() if 1 <= x <= 100]  # the locator also places ticks beyond the limits
    assert [ax.xaxis.get_major_formatter()(x) for x in shown] == ["1", "2", "5", "10", "20", "50", "100"]
    ax.set_yscale("linear")
    with pytest.raises(ValueError, match="log axis"):
        viz.plain_log_ticks(ax.yaxis)
    plt.close(fig)
