"""What leaves the grader: no hidden test source, no live markup, plain text kept."""

from __future__ import annotations

import json

import pytest

from mlsys.grader.sanitize import HIDDEN_LINE, hidden_lines, sanitize_notebook

HIDDEN = "assert_close(double(x), np.array([3.0, -4.0, 2e30]), name=\"double(x)\")"
SOURCE = {"cells": [
    {"cell_type": "markdown", "metadata": {}, "source": "# Lab <b>zero</b>"},
    {"cell_type": "code", "metadata": {"nbgrader": {"grade": True, "grade_id": "test_double", "points": 2}},
     "source": f"assert double(3) == 6\n### BEGIN HIDDEN TESTS\nx = np.array([1.5, -2.0, 1e30])\n{HIDDEN}\n### END HIDDEN TESTS\n"},
]}


def _graded() -> dict:
    nb = json.loads(json.dumps(SOURCE))
    test = nb["cells"][1]
    test["outputs"] = [
        {"output_type": "stream", "name": "stdout", "text": "LEAK " + test["source"]},  # a pre_run_cell hook's print
        {"output_type": "error", "ename": "GradingError", "evalue": "double(x): 3 of 3 values differ",
         "traceback": ["\x1b[0;31m----> 5\x1b[0m " + HIDDEN, "GradingError: double(x): 3 of 3 values differ"]},
    ]
    nb["cells"].insert(1, {"cell_type": "code", "metadata": {"trusted": True}, "outputs": [
        {"output_type": "display_data", "metadata": {"isolated": True},
         "data": {"text/html": "<script>steal()</script>", "text/plain": "<IPython.core.display.HTML object>"}},
        {"output_type": "display_data", "metadata": {}, "data": {"application/javascript": "steal()"}},
        {"output_type": "display_data", "metadata": {}, "data": {"image/svg+xml": "<svg onload='steal()'/>",
                                                                 "image/png": "iVBORw0KGgo="}},
        {"output_type": "execute_result", "execution_count": 3, "metadata": {},
         "data": {"text/markdown": "**2 of 2 points**", "text/plain": "2.0"}},
    ], "source": "show()", "execution_count": 3})
    nb["cells"].append({"cell_type": "markdown", "metadata": {}, "attachments": {"a.svg": {}},
                        "source": "notes <img src=x onerror=steal()> ``` [x](javascript:steal())"})
    nb["cells"].append({"cell_type": "raw", "metadata": {"format": "text/html"}, "source": "<script>steal()</script>"})
    return nb


def test_hidden_lines_are_those_only_in_hidden_regions():
    assert hidden_lines(SOURCE) == {"x = np.array([1.5, -2.0, 1e30])", HIDDEN}


def test_no_hidden_test_leaves_in_sources_tracebacks_or_printed_output():
    nb = sanitize_notebook(_graded(), SOURCE)
    text = json.dumps(nb)
    assert "BEGIN HIDDEN TESTS" not in text and HIDDEN not in text.replace("\\", "") and "1e30])" not in text
    test = nb["cells"][2]
    assert test["source"].startswith("assert double(3) == 6\n# (hidden tests: not shown)")
    stream, error = test["outputs"]
    assert stream["text"].splitlines() == ["LEAK assert double(3) == 6", HIDDEN_LINE, HIDDEN_LINE, HIDDEN_LINE,
                                           HIDDEN_LINE]
    assert error["evalue"] == "double(x): 3 of 3 values differ"  # the message a learner needs stays
    assert error["traceback"] == [HIDDEN_LINE, "GradingError: double(x): 3 of 3 values differ"]


def test_no_live_markup_leaves_and_plain_text_stays():
    nb = sanitize_notebook(_graded(), SOURCE)
    html, js, svg, result = nb["cells"][1]["outputs"]
    assert html["data"] == {"text/plain": "<IPython.core.display.HTML object>"} and html["metadata"] == {}
    assert js["data"] == {"text/plain": "[rich output not shown: application/javascript]"}
    # a raster image cannot run anything: kept, with a note for the SVG beside it
    assert svg["data"] == {"image/png": "iVBORw0KGgo=", "text/plain": "[rich output not shown: image/svg+xml]"}
    assert result["data"] == {"text/plain": "2.0"} and result["execution_count"] == 3
    assert nb["cells"][1]["metadata"] == {}
    md, raw = nb["cells"][-2], nb["cells"][-1]
    assert md["cell_type"] == "markdown" and "attachments" not in md
    assert md["source"].startswith("````text\nnotes <img") and md["source"].endswith("\n````")  # a fence longer than ```
    assert raw["cell_type"] == "markdown" and raw["source"] == "```text\n<script>steal()</script>\n```"
    assert nb["cells"][0]["source"] == "# Lab <b>zero</b>"  # the course's own markdown is left as written


def test_the_notebooks_metadata_is_the_courses_and_no_attachment_stays():
    """Widget state in a submission's metadata makes nbconvert load the widget manager's JavaScript and render the
    state's HTML; an attachment on any cell is dropped (no course cell uses one)."""
    nb = _graded()
    nb["metadata"] = {"widgets": {"application/vnd.jupyter.widget-state+json": {"state": {"w": {
        "state": {"value": "<img src=x onerror=steal()>"}}}}}, "kernelspec": {"name": "evil"}, "title": "<b>x</b>"}
    nb["cells"][1]["attachments"] = {"x.svg": {"image/svg+xml": "PHN2Zy8+"}}
    source = dict(SOURCE, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}})
    clean = sanitize_notebook(nb, source)
    assert clean["metadata"] == {"kernelspec": {"name": "python3", "display_name": "Python 3"}}
    assert not any("attachments" in c for c in clean["cells"])


@pytest.mark.slow
def test_feedback_and_autograded_notebook_carry_no_hidden_test_and_no_live_markup(tmp_path):
    """Graded for real (sandbox, nbgrader, feedback): a submission that shows HTML/JS/SVG, writes a hostile
    Markdown cell and prints every cell's source from a pre_run_cell hook, beside an honest one."""
    import shutil
    from pathlib import Path

    from mlsys.grader import sandbox, teach

    try:
        sandbox.check()
    except sandbox.SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap cannot run here: {exc}")
    here = Path(__file__).resolve().parent
    corpus, labs = here / "bad_submissions", here.parent / "labs"
    root = tmp_path / "course"
    (root / "source" / "lab0_tiny").mkdir(parents=True)
    shutil.copy2(labs / "nbgrader_config.py", root / "nbgrader_config.py")
    source = json.loads((corpus / "source" / "lab0_tiny" / "lab0_tiny.nb.json").read_text())
    shutil.copy2(corpus / "source" / "lab0_tiny" / "lab0_tiny.nb.json", root / "source" / "lab0_tiny" / "lab0_tiny.ipynb")
    shutil.copy2(corpus / "source" / "lab0_tiny" / "perf.toml", root / "source" / "lab0_tiny" / "perf.toml")
    for name in ("good", "markup_and_leak"):
        dest = root / "submitted" / name / "lab0_tiny" / "lab0_tiny.ipynb"
        dest.parent.mkdir(parents=True)
        shutil.copy2(corpus / f"{name}.nb.json", dest)
    rows = {r.student: r for r in teach.grade(root, timeout=300, verbose=False, perf="off")}
    secret = hidden_lines(source)
    assert secret
    # the markup case's row as tests/bad_submissions/expected.json gives it (graded here, not a second time there)
    assert rows["markup_and_leak"].status == "ok" and "get_ipython" in rows["markup_and_leak"].flags, rows["markup_and_leak"]
    assert rows["good"].flags == "", rows["good"]
    for name in ("good", "markup_and_leak"):
        assert rows[name].correctness_score == 3, rows[name]
        pages = list((root / "feedback" / name / "lab0_tiny").glob("*.html"))
        graded = (root / "autograded" / name / "lab0_tiny" / "lab0_tiny.ipynb").read_text()
        assert pages, f"no feedback page for {name}"
        for text in [graded, *(p.read_text() for p in pages)]:
            assert "BEGIN HIDDEN TESTS" not in text
            assert not [s for s in secret if s in text or json.dumps(s)[1:-1] in text]
        mimes = {k for c in json.loads(graded)["cells"] for o in c.get("outputs", []) for k in o.get("data", {})}
        assert mimes <= {"text/plain", "image/png", "image/jpeg", "image/gif"}, mimes
        for page in pages:  # the answer's source is shown as (escaped) code; nothing of it is live markup
            html = page.read_text()
            for live in ("<script>document.title", "<svg xmlns=\"http://www.w3.org/2000/svg\" onload",
                         "<img src=x onerror", "href=\"javascript:", "pwned-widget", "widget-state+json"):
                assert live not in html, f"{name}: {live!r} is live in {page.name}"


def test_a_perf_cells_status_survives_sanitizing_and_nothing_else_of_mlsys_does():
    """What reads the sanitized notebook (the row's score, the feedback page) asks a perf cell's status field; the
    sanitizer keeps exactly that field (status, score, reason) and drops every other key under ``mlsys``."""
    nb = _graded()
    cell = nb["cells"][2]
    cell["metadata"]["mlsys"] = {"verdict": {"status": "not_graded", "score": None, "reason": "", "evidence": "x"},
                                 "other": "<script>"}
    out = sanitize_notebook(nb, SOURCE)
    assert out["cells"][2]["metadata"]["mlsys"] == {"verdict": {"status": "not_graded", "score": None, "reason": ""}}


def test_a_submitted_cells_own_mlsys_field_is_dropped_at_hand_in(tmp_path):
    """Only the grader writes ``metadata.mlsys``: a submission's forged "not graded" status is removed before any
    grading, so a cell the grader then leaves unwritten reads as nothing, never as "not graded here"."""
    from mlsys.grader.decide.verdict import cell_status
    from mlsys.grader.submission import _normalise_cells

    sub = json.loads(json.dumps(SOURCE))
    sub["cells"][1]["metadata"]["mlsys"] = {"verdict": {"status": "not_graded", "score": None, "reason": ""}}
    path = tmp_path / "sub.ipynb"
    path.write_text(json.dumps(sub))
    _normalise_cells(path, SOURCE)
    cell = json.loads(path.read_text())["cells"][1]
    assert "mlsys" not in cell["metadata"] and cell_status(cell) is None
