"""`teach similarity`: copies with renamed variables are flagged; ten honest, independent answers are not."""

import csv
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from mlsys.grader import similarity
from mlsys.runtime.paths import labs_root

sys.path.insert(0, str(Path(__file__).parent / "similarity_corpus"))
from lab2_honest import HONEST  # noqa: E402

LAB = "lab2_tiled_matmul"
KERNELS = {"naive": ("naive_kernel", "naive_matmul_kernel"), "tiled": ("tiled_kernel", "tiled_matmul_kernel"),
           "grouped": ("grouped_kernel", "matmul_kernel")}
# a copier's renaming: every local name of the instructor's kernels changed, spacing and comments changed
RENAME = {"pid_m": "row_tile", "pid_n": "col_tile", "offs_m": "rr", "offs_n": "cc", "offs_k": "kk", "acc": "accum",
          "k0": "kstep", "a_ptrs": "pa", "b_ptrs": "pb", "num_pid_m": "tiles_m", "num_pid_n": "tiles_n",
          "tiles_per_group": "span", "first_m": "start", "rows_in_group": "height", "rows": "ri", "cols": "ci",
          "i": "r", "j": "c", "in_bounds": "ok", "ks": "kidx", "a": "lhs", "b": "rhs", "pid": "p"}


def _nb(path: Path) -> dict:
    return json.loads(path.read_text())


def _cells(nb: dict) -> dict[str, dict]:
    return {c["metadata"]["nbgrader"]["grade_id"]: c for c in nb["cells"]
            if c.get("metadata", {}).get("nbgrader", {}).get("solution") and c["cell_type"] == "code"}


def _fill(release: dict, bodies: dict[str, str]) -> dict:
    """The student version with the kernels' bodies written in (wrappers left as given)."""
    nb = json.loads(json.dumps(release))
    cells = _cells(nb)
    for key, body in bodies.items():
        gid, kernel = KERNELS[key]
        src = "".join(cells[gid]["source"])
        head, tail = src.split(f"def {kernel}(", 1)
        blank = re.search(r"    # YOUR CODE HERE[^\n]*\n    raise NotImplementedError\([^\n]*\)\n", tail)
        assert blank, f"no blank in {kernel}"
        cells[gid]["source"] = head + f"def {kernel}(" + tail[:blank.start()] + body.lstrip("\n") + tail[blank.end():]
    return nb


def _renamed_copy(source: dict, release: dict) -> dict:
    nb = json.loads(json.dumps(release))
    mine = _cells(nb)
    for gid, cell in _cells(source).items():
        text = "".join(cell["source"]).replace("### BEGIN SOLUTION\n", "").replace("### END SOLUTION\n", "")
        text = re.sub(r"\b(" + "|".join(RENAME) + r")\b", lambda m: RENAME[m.group(1)], text)
        text = re.sub(r"  # [^\n]*", "", text).replace(" = ", " =  ")  # comments dropped, spacing changed
        mine[gid]["source"] = "# my own work\n" + text
    return nb


@pytest.fixture
def course(tmp_path):
    root = tmp_path / "labs"
    for part in ("release", "source"):
        shutil.copytree(labs_root() / part / LAB, root / part / LAB)
    (root / "known_solutions").mkdir()
    shutil.copy(labs_root() / "known_solutions" / f"{LAB}.json", root / "known_solutions")
    return root


def _submit(root: Path, student: str, nb: dict) -> None:
    folder = root / "submitted" / student / LAB
    folder.mkdir(parents=True)
    (folder / f"{LAB}.ipynb").write_text(json.dumps(nb))


def _flags(root: Path) -> dict[str, str]:
    with open(root / "similarity" / f"{LAB}.csv") as f:
        return {r["student"]: r["similarity"] for r in csv.DictReader(f)}


def test_ten_honest_answers_are_not_flagged_and_a_renamed_copy_is(course):
    release = _nb(course / "release" / LAB / f"{LAB}.ipynb")
    assert len(HONEST) == 10
    for name, bodies in HONEST.items():
        _submit(course, name, _fill(release, bodies))
    _submit(course, "copier", _renamed_copy(_nb(course / "source" / LAB / f"{LAB}.ipynb"), release))
    matches = similarity.run(LAB, root=course)
    flags = _flags(course)
    assert set(flags) == set(HONEST) | {"copier"}
    assert "instructor solution" in flags["copier"], flags["copier"]
    assert {s: f for s, f in flags.items() if f and s != "copier"} == {}
    honest_best = max(m.score for m in matches if m.a.name != "copier" and m.b.name != "copier")
    assert honest_best < similarity.THRESHOLD
    report = (course / "similarity" / f"{LAB}.html").read_text()
    assert "copier ~ instructor solution" in report and "(flagged)" in report


def test_a_copy_of_a_known_public_solution_is_flagged(course):
    """A known solution is kept as fingerprints only; a submission that matches them is flagged and named."""
    release = _nb(course / "release" / LAB / f"{LAB}.ipynb")
    source = _nb(course / "source" / LAB / f"{LAB}.ipynb")
    kernel = "".join(_cells(source)["tiled_kernel"]["source"])
    known = {"source": {"name": "Public tutorial", "path": "tutorials/tiled.py"},
             "kernels": [{"name": "tiled", "fingerprints": similarity.fingerprints(kernel)}]}
    (course / "known_solutions" / f"{LAB}.json").write_text(json.dumps(known))
    (course / "source" / LAB / f"{LAB}.ipynb").write_text(json.dumps(release))  # no instructor match possible
    _submit(course, "copier", _renamed_copy(source, release))
    _submit(course, "h01", _fill(release, HONEST["h01"]))
    similarity.run(LAB, root=course)
    flags = _flags(course)
    assert "Public tutorial: tiled (tutorials/tiled.py)" in flags["copier"] and flags["h01"] == ""


def test_the_triton_tutorial_fingerprints_are_kept_without_the_code():
    for lab, kernels in {"lab2_tiled_matmul": {"matmul_kernel"}, "lab3_fusion": {"softmax_kernel"},
                         "lab5_attention": {"_attn_fwd_inner", "_attn_fwd"}}.items():
        data = json.loads((labs_root() / "known_solutions" / f"{lab}.json").read_text())
        assert data["source"]["repository"] == "https://github.com/triton-lang/triton"
        assert data["source"]["path"].startswith("python/tutorials/") and "MIT" in data["source"]["licence"]
        assert {k["name"] for k in data["kernels"]} == kernels
        assert all(len(k["fingerprints"]) >= 40 for k in data["kernels"])
        text = (labs_root() / "known_solutions" / f"{lab}.json").read_text()
        assert "tl.load" not in text and "def " not in text  # fingerprints only


def test_normalisation_ignores_names_comments_and_spacing():
    a = "x = tl.load(p + offs, mask=offs < n)  # load\ny = x * 2\n"
    b = "val=tl.load(ptr+o,mask=o<size)\n\n# twice\nout = val*3\n"
    assert similarity.canonical(t.text for t in similarity.normalise(a)) == similarity.canonical(
        t.text for t in similarity.normalise(b))
    assert similarity.fingerprints(a) == similarity.fingerprints(b)
    assert similarity.normalise("tl.load(x)")[2].text == "load"  # attributes keep their names


def test_unknown_lab_is_an_error(course):
    with pytest.raises(ValueError, match="unknown lab 'lab9'"):
        similarity.run("lab9", root=course)


def test_teach_similarity_runs_the_check(course, capsys):
    from mlsys.grader import teach

    release = _nb(course / "release" / LAB / f"{LAB}.ipynb")
    _submit(course, "copier", _renamed_copy(_nb(course / "source" / LAB / f"{LAB}.ipynb"), release))
    assert teach.main(["similarity", LAB, "--root", str(course)]) == 0
    assert "1 submission(s) flagged: copier" in capsys.readouterr().out
    assert teach.main(["similarity", "lab9", "--root", str(course)]) == 2
