"""viz.label_collisions / viz.show: overlapping labels and legends on data are found and refused."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from mlsys import viz  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def test_two_labels_on_one_point_collide():
    fig, ax = plt.subplots()
    ax.plot([1, 2], [1, 2], "o")
    ax.annotate("mm 4096", (1.5, 1.5))
    ax.annotate("mm 8192", (1.5, 1.5), xytext=(2, 1), textcoords="offset points")
    found = viz.label_collisions(fig)
    assert len(found) == 1 and "'mm 4096' overlaps label 'mm 8192'" in found[0]


def test_labels_apart_and_legend_in_empty_corner_pass():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 0.2], label="low line")
    ax.annotate("left", (0.05, 0.1))
    ax.annotate("right", (0.9, 0.15))
    ax.set_ylim(0, 1)
    ax.legend(loc="upper right")
    assert viz.label_collisions(fig) == []


def test_legend_on_a_line_that_crosses_it_without_a_vertex_inside():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], label="data")
    ax.axhline(0.95, label="a reference line through the legend")  # two vertices, both outside the legend
    ax.set_ylim(0, 1)
    ax.legend(loc="upper left")
    found = viz.label_collisions(fig)
    assert any("legend sits on the data" in f for f in found), found


def test_legend_on_scatter_points():
    fig, ax = plt.subplots()
    ax.scatter([0.02, 0.05, 0.08], [0.97, 0.95, 0.93], label="points")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(loc="upper left")
    assert any("3 drawn points" in f or "drawn points" in f for f in viz.label_collisions(fig))


def test_show_refuses_a_colliding_figure_and_names_it():
    fig, ax = plt.subplots()
    ax.text(0.5, 0.5, "first")
    ax.text(0.5, 0.5, "second")
    with pytest.raises(viz.FigureLayoutError, match="'first' overlaps label 'second'"):
        viz.show(fig)
