"""Every written answer of every lab has a rubric whose points are the cell's nbgrader points."""

import json
import shutil
from pathlib import Path

import pytest

from mlsys.grader import rubrics
from mlsys.runtime.paths import labs_root


def test_every_manual_cell_has_a_rubric_with_its_points():
    labs = sorted((labs_root() / "source").glob("*/*.ipynb"))
    assert len(labs) == 6, "the course has six labs"
    found = 0
    for nb in labs:
        cells = rubrics.manual_cells(nb)
        by_id = {r.grade_id: r for r in rubrics.load(nb.parent.name)}
        for gid, pts in cells.items():
            assert gid in by_id, f"{nb.parent.name}/{gid} has no rubric"
            assert by_id[gid].points == pts
            found += 1
    assert found >= 5, "each lab has at least one written answer"
    assert rubrics.check() == []


def _course_copy(tmp_path: Path) -> Path:
    root = tmp_path / "labs"
    shutil.copytree(labs_root() / "rubrics", root / "rubrics")
    src = labs_root() / "source" / "lab1_roofline"
    (root / "source" / "lab1_roofline").mkdir(parents=True)
    shutil.copy(src / "lab1_roofline.ipynb", root / "source" / "lab1_roofline")
    return root


def test_points_that_differ_from_the_notebook_are_reported(tmp_path):
    root = _course_copy(tmp_path)
    nb_path = root / "source" / "lab1_roofline" / "lab1_roofline.ipynb"
    nb = json.loads(nb_path.read_text())
    for cell in nb["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        if meta.get("grade_id") == "explain_gaps":
            meta["points"] = 5  # the teacher raised the points, the rubric still says 2
    nb_path.write_text(json.dumps(nb))
    assert rubrics.check(root) == ["lab1_roofline/explain_gaps: rubric gives 2 points, the notebook 5"]


def test_a_lab_without_a_rubric_file_is_reported(tmp_path):
    root = _course_copy(tmp_path)
    (root / "rubrics" / "lab1_roofline.yml").unlink()
    [problem] = rubrics.check(root)
    assert "no rubric file" in problem


def test_criteria_must_add_up_to_the_points(tmp_path):
    root = _course_copy(tmp_path)
    path = root / "rubrics" / "lab1_roofline.yml"
    path.write_text(path.read_text().replace("      - points: 1\n", "      - points: 0.5\n", 1))
    assert rubrics.check(root) == ["lab1_roofline/explain_gaps: criteria add up to 1.5, not the rubric's 2"]


def test_markdown_shows_points_and_both_examples():
    text = rubrics.markdown("lab5_attention")
    assert "(3 points)" in text and "*Partial credit (1.5)*" in text and "| points | what earns them |" in text


def test_missing_key_says_what_was_expected(tmp_path):
    root = _course_copy(tmp_path)
    path = root / "rubrics" / "lab1_roofline.yml"
    path.write_text(path.read_text().replace("    zero:", "    nothing:"))
    with pytest.raises(ValueError, match="missing 'zero'"):
        rubrics.load("lab1_roofline", root)
