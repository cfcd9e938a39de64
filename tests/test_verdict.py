"""One verdict type from the verdict process to the graded cell (mlsys.grader.decide.verdict)."""

from __future__ import annotations

import pytest

from mlsys.grader.decide.verdict import Verdict


def test_the_status_is_a_field_and_the_cell_is_written_from_it():
    graded = Verdict("perf_x", 4, 0.5, "", ("matmul: 1 ms",))
    assert graded.status == "graded" and graded.score == 2.0
    outs = graded.outputs(4)
    assert outs[-1]["data"]["text/plain"] == "2" and outs[0]["text"] == "matmul: 1 ms\n"
    refused = Verdict("perf_x", 4, 0.0, "refused: aten::mm")
    assert refused.status == "refused" and refused.outputs(4)[-1]["ename"] == "PerformanceRefused"
    none = Verdict("perf_x", 4, None, "", ("performance: not graded (no GPU)",))
    assert none.status == "not_graded" and none.score is None and none.outputs(4)[-1]["data"]["text/plain"] == "0.0"
    lost = Verdict.not_measured("perf_x", 4, "no verdict (time limit)")
    assert lost.status == "not_measured" and lost.outputs(4)[0]["ename"] == "PerformanceNotMeasured"
    for v in (graded, refused, none, lost):  # the wire form reads back as the same verdict
        assert Verdict.from_dict(v.to_dict()) == v and v.metadata()["status"] == v.status


def test_a_malformed_verdict_is_a_clear_error():
    with pytest.raises(ValueError, match="grade_id"):
        Verdict.from_dict({"credit": 1.0})
    with pytest.raises(ValueError, match="credit must be"):
        Verdict.from_dict({"grade_id": "perf_x", "credit": "1.0"})
    with pytest.raises(ValueError, match=r"within \[0, 1\]"):
        Verdict("perf_x", 1, 1.5)


def test_the_verdict_process_sends_the_type():
    from mlsys.grader.decide import trusted

    case = trusted.PerfCase.from_dict("perf_double", {"function": "double", "points": 2, "args": {"x": [8]},
                                                      "dtype": "float32", "reference": "x * 2", "baseline": "copy"})
    d = trusted._verdict(case, 0.25, "", ["line"])
    assert d["status"] == "graded" and d["score"] == 0.5 and Verdict.from_dict(d).credit == 0.25


def test_a_perf_cell_its_perf_toml_does_not_name_never_runs_and_earns_nothing(tmp_path):
    """Issue 48 item 8: no in-notebook performance path. A ``perf_*`` cell without a table in the lab's perf.toml is
    not measured by anyone: the graded cell says why, its status is ``not_measured`` and no score is written."""
    import nbformat

    from mlsys.grader.sandboxed_execute import SandboxedExecute

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("result = 1.0  # the learner's own timing")
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "perf_new", "points": 2, "solution": False, "locked": True}
    nb.cells.append(cell)
    report: dict = {"perf": {}, "fatal": ""}
    SandboxedExecute()._performance(nb, {"perf": "fake", "cases": {}}, tmp_path, tmp_path, 1e12, report, {0}, nbformat)
    status = cell.metadata["mlsys"]["verdict"]
    assert status["status"] == "not_measured" and status["score"] in (None, 0, 0.0), status
    assert "perf.toml has no [perf_new]" in status["reason"]
    assert all(o.get("output_type") != "execute_result" for o in cell.outputs), cell.outputs
