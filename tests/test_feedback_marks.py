"""The feedback page says "not graded here" and "pending" for cells without a score, never 0.0 (issue 30)."""

from mlsys.grader import feedback_marks
from mlsys.labkit.grading import NOT_GRADED

# the two places nbgrader 0.9's feedback template puts a cell's score (copied from its documentation's example)
PAGE = """<ul>
<li><a href="#test_ring">Test cell</a> (Score: 3.0 / 3.0)</li>
<li><a href="#perf_ring">Test cell</a> (Score: 0.0 / 2.0)</li>
<li><a href="#explain_gap">Written response</a> (Score: 0.0 / 3.0)</li></ul>
<a name="test_ring"></a><div class="panel-heading"><span class="pull-right">
      Score: 3.0 / 3.0 <a href="#top">(Top)</a></span></div>
<a name="perf_ring"></a><div class="panel-heading"><span class="pull-right">
      Score: 0.0 / 2.0 <a href="#top">(Top)</a></span></div>
<a name="explain_gap"></a><div class="panel-heading"><span class="pull-right">
      Score: 0.0 / 3.0 <a href="#top">(Top)</a></span></div>
"""


def _cell(gid, source, *, solution=False, outputs=(), points=2.0, score=None):
    meta = {"grade": True, "grade_id": gid, "points": points, "solution": solution, "locked": not solution,
            "schema_version": 3, "task": False}
    if score is not None:
        meta["score"] = score
    cell = {"cell_type": "markdown" if solution else "code", "metadata": {"nbgrader": meta}, "source": source}
    if not solution:
        cell.update(outputs=list(outputs), execution_count=1)
    return cell


def _not_graded(cell):
    """As the grader writes a perf cell it could not grade here: the status in the cell's metadata."""
    cell["metadata"]["mlsys"] = {"verdict": {"status": "not_graded", "score": None, "reason": ""}}
    return cell


def test_a_printed_not_graded_line_is_not_a_status():
    """Issue 48 item 5: what reads a graded notebook asks the grader's field, never the text. A refused perf cell
    whose output carries the not-graded line (an answer printed it) keeps its 0 on the feedback page."""
    cell = _cell("perf_ring", "...", outputs=[{"output_type": "stream", "name": "stdout", "text": NOT_GRADED + "\n"}])
    cell["metadata"]["mlsys"] = {"verdict": {"status": "refused", "score": 0.0, "reason": "forbidden op"}}
    nb = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    assert feedback_marks.ungraded_cells(nb) == {}
    del cell["metadata"]["mlsys"]  # no field at all: nothing the text says makes it "not graded"
    assert feedback_marks.ungraded_cells(nb) == {}


def test_ungraded_perf_and_pending_written_cells_are_named_not_scored():
    nb = {"cells": [
        _cell("test_ring", "check_ring(...)", points=3.0),
        _not_graded(_cell("perf_ring", "...", outputs=[{"output_type": "stream", "name": "stdout", "text": NOT_GRADED + "\n"}])),
        _cell("explain_gap", "my answer", solution=True, points=3.0),
    ], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    ungraded = feedback_marks.ungraded_cells(nb)
    assert ungraded == {"perf_ring": feedback_marks.NOT_HERE, "explain_gap": feedback_marks.PENDING}
    page = feedback_marks.relabel(PAGE, ungraded)
    assert "Score: 0.0" not in page  # neither ungraded cell shows a zero
    assert page.count("Score: 3.0 / 3.0") == 2  # the graded cell keeps both of its scores
    assert '<a href="#perf_ring">Test cell</a> (not graded here (no GPU); 2.0 points)' in page
    assert "Not graded here (no GPU); 2.0 points <a href=\"#top\">" in page
    assert "Pending (graded by your teacher); 3.0 points <a href=\"#top\">" in page



def test_a_written_answer_as_stored_in_a_notebook_file_is_pending_or_blank():
    """As nbgrader writes an autograded notebook: source as a list of lines, with the release's checksum."""
    from nbformat import from_dict
    from nbgrader.utils import compute_checksum

    blank = _cell("explain_gap", "YOUR ANSWER HERE", solution=True, points=3.0)
    blank["metadata"]["nbgrader"]["checksum"] = compute_checksum(from_dict(blank))
    answered = dict(blank, source=["The ring sends\n", "2(p-1)/p of the data."])
    blank["source"] = ["YOUR ANSWER HERE"]
    nb = {"cells": [answered], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    assert feedback_marks.ungraded_cells(nb) == {"explain_gap": feedback_marks.PENDING}
    nb["cells"] = [blank]  # left blank: nbgrader's own 0, not "pending"
    assert feedback_marks.ungraded_cells(nb) == {}
