"""The labs in Colab, simulated, and the one repository URL they are generated from.

Colab gives a Python with torch, triton, numpy and matplotlib, and nothing of this course. The slow
test builds the course package (a wheel, as pip builds it from the repository URL), creates a fresh
virtual environment holding only what Colab has (preinstalled, as Colab has it: those packages and what they
require, linked in from this environment), puts a fake ``google.colab`` module on the path,
and runs each lab's setup cell and first exercise (instructor answers) from a folder outside the
checkout. The setup cell's install line is pointed at the local wheel instead of GitHub; everything
else runs as written. It checks that the install adds the course package and its small runtime needs
but leaves Colab's own packages alone, and that the recorded GPU figures ship inside the package.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from mlsys.book import site

REPO = Path(__file__).resolve().parents[1]
LABS = REPO / "labs" / "source"
# the cells a learner runs first: the setup cell and the first graded exercise (instructor answers)
FIRST_EXERCISE = {
    "lab1_roofline": ["setup", "counts", "check_counts", "test_matmul_counts"],
    "lab2_tiled_matmul": ["setup", "add_kernel", "test_add"],
    "lab3_fusion": ["setup", "imports", "predict_arities", "predict_show", "test_predict"],
}
COLAB_HAS = ["torch==2.13.0", "triton==3.7.1", "numpy", "matplotlib"]


def _src(cell: dict) -> str:
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def test_every_lab_notebook_carries_the_configured_url():
    """Badges and install cells in labs/source and labs/release agree with _config.yml."""
    problems = site.check(REPO)
    assert not problems, "\n".join(problems)


def test_the_url_is_typed_in_one_place_only():
    url, _ = site.repository(REPO / "_config.yml")
    owner_repo = url.removeprefix("https://github.com/")
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    # tests/test_lab_pipeline.py (helper "grading") still types the Colab URL; it should read
    # `site.colab_url("{lab}", *site.repository())` instead (see the merge notes)
    allowed = {"_config.yml", "tests/test_lab_pipeline.py"}
    offenders = []
    for rel in tracked:
        path = REPO / rel
        if rel in allowed or not path.is_file() or path.suffix not in {".py", ".md", ".yml", ".toml", ".txt", ".cfg"}:
            continue
        if owner_repo in path.read_text(encoding="utf-8", errors="replace"):
            offenders.append(rel)
    assert not offenders, f"the repository URL is typed outside _config.yml in {offenders}"
    # the notebooks hold it only inside generated parts: the badge line and the install block
    for _lab, path in site.notebooks(REPO):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            text = _src(cell)
            for block in (site.install_block(url, site.install_ref(REPO / "_config.yml")),):
                text = text.replace(block, "")
            text = re.sub(r"\[\*\*Open in Colab\*\*\]\([^)]*\)", "", text)
            assert owner_repo not in text, f"{path}: the URL appears outside the generated badge and install block"


def test_apply_rewrites_a_fork_url_everywhere(tmp_path):
    nb = json.loads((LABS / "lab1_roofline" / "lab1_roofline.ipynb").read_text(encoding="utf-8"))
    site.apply(nb, "lab1_roofline", "https://github.com/someone/my-fork", "course")
    text = json.dumps(nb)
    assert "https://colab.research.google.com/github/someone/my-fork/blob/course/labs/release/lab1_roofline/" in text
    assert "git+https://github.com/someone/my-fork@course" in text
    # the chapter line: chapter 7 teaches Lab 1 (_toc.yml: Part I ends with Measuring a GPU, chapter 6), linked relatively and on the fork's Pages site
    assert "**Taught in**: chapter 7, [The roofline model](../../../chapters/06_roofline.md)" in text
    assert "(https://someone.github.io/my-fork/chapters/06_roofline.html)" in text
    assert site.repository(REPO / "_config.yml")[0].removeprefix("https://github.com/") not in text
    with pytest.raises(ValueError, match="github.com/<owner>/<repo>"):
        cfg = tmp_path / "_config.yml"
        cfg.write_text("repository:\n  url: https://gitlab.com/x/y\n")
        site.repository(cfg)


def test_labs_and_their_chapters_link_both_ways():
    """mlsys.plan names the chapter that teaches each lab: the lab names that chapter (site.check above)
    and the chapter links to the lab with a {doc} reference (so the book resolves it, and the browser test
    follows it)."""
    chapters = site.lab_chapters(REPO)
    assert set(chapters) == {lab for lab, _ in site.notebooks(REPO, ("release",))}
    for lab, (_number, _title, path) in chapters.items():
        text = (REPO / f"{path}.md").read_text(encoding="utf-8")
        assert f"../labs/release/{lab}/{lab}>`" in text, f"{path}.md has no {{doc}} link to {lab}"


_RUN = textwrap.dedent('''
    import json, linecache, sys
    sys.path.insert(0, sys.argv[3])      # the fake google.colab
    import google.colab                  # noqa: F401  (Colab has it imported)
    cells = json.loads(open(sys.argv[1]).read())
    ns = {"__name__": "__main__"}
    for gid, src in cells:               # as Jupyter does: each cell's source is findable by inspect
        linecache.cache[f"<{gid}>"] = (len(src), None, src.splitlines(True), f"<{gid}>")
        exec(compile(src, f"<{gid}>", "exec"), ns)
    import mlsys
    from mlsys.book import page
    from mlsys.grader.decide.trusted import find_spec  # the performance cells' specs, for a speed preview on a GPU
    json.dump({"mlsys": mlsys.__file__, "lab2": page.reference("lab2_matmul").device,
               "lab3": page.reference("lab3_fusion").device,
               "perf": {lab: str(find_spec(lab)) for lab in ("lab2_tiled_matmul", "lab3_fusion", "lab5_attention")}},
              open(sys.argv[2], "w"))
''')


def _preinstall(venv: Path, pins: list[str]) -> None:
    """``pins`` (``name==version`` or a name) and every distribution they require, preinstalled in ``venv`` as this
    environment has them: each distribution's recorded files hard-linked into the venv's site-packages (copied
    where links cannot be made). A pin this environment does not satisfy fails: the test would not be Colab's.
    (Installing them with pip took 40 CPU-seconds of unpacking and byte-compiling, in every CI run.)"""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    (site_packages,) = venv.glob("lib/python*/site-packages")
    todo, seen = [Requirement(p) for p in pins], set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        dist = metadata.distribution(name)
        assert req.specifier.contains(dist.version, prereleases=True), f"this environment has {name} {dist.version}, not {req}"
        for file in dist.files or []:
            source = Path(dist.locate_file(file))
            target = site_packages / file
            if file.parts[0] == ".." or not source.is_file() or target.exists():
                continue  # scripts outside site-packages (Colab's are not on the learner's path), a file listed twice
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)
        todo += [r for r in map(Requirement, dist.requires or []) if r.marker is None or r.marker.evaluate({"extra": ""})]


def _pip_list(python: Path, env: dict[str, str]) -> dict[str, str]:
    out = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True,
                         check=True, env=env).stdout
    return {p["name"].lower(): p["version"] for p in json.loads(out)}


@pytest.mark.slow
def test_setup_cell_and_first_exercise_in_a_fresh_colab_like_venv(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "TRITON_INTERPRET")}
    env["MPLBACKEND"] = "Agg"
    wheels = tmp_path / "wheels"
    # build from a copy, so the checkout gets no build/ or *.egg-info folders
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    for rel in files:
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes((REPO / rel).read_bytes())
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    str(src), "-w", str(wheels)], check=True, env=env, timeout=300, capture_output=True)
    (wheel,) = wheels.glob("gpus_for_ml_mlsys-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(re.match(r"mlsys/_measurements/.*lab2.*\.json$", n) for n in names), "recorded figures not packaged"
    assert "mlsys/_labs/lab2_tiled_matmul/perf.toml" in names, "the performance specs are not packaged (issue 45)"

    venv = tmp_path / "colab"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    _preinstall(venv, COLAB_HAS)
    before = _pip_list(python, env)
    assert "pint" not in before and "gpus-for-ml-mlsys" not in before

    fake = tmp_path / "fake"
    (fake / "google" / "colab").mkdir(parents=True)
    (fake / "google" / "__init__.py").write_text("")
    (fake / "google" / "colab" / "__init__.py").write_text('"""Stands in for Colab\'s own module."""\n')
    url, _ = site.repository(REPO / "_config.yml")
    branch = site.install_ref(REPO / "_config.yml")  # the course release the install cell pins
    work = tmp_path / "work"  # outside the checkout: nothing of the repository is importable from here
    work.mkdir()
    for lab, gids in FIRST_EXERCISE.items():
        cells = {c["metadata"]["nbgrader"]["grade_id"]: _src(c)
                 for c in json.loads((LABS / lab / f"{lab}.ipynb").read_text(encoding="utf-8"))["cells"]
                 if c["cell_type"] == "code"}
        spec = f"{site.PACKAGE} @ git+{url}@{branch}"
        assert spec in cells["setup"], f"{lab}: the setup cell does not install {spec}"
        cells["setup"] = cells["setup"].replace(spec, f"{site.PACKAGE} @ {wheel.as_uri()}")
        (work / f"{lab}.json").write_text(json.dumps([(g, cells[g]) for g in gids]))
        proc = subprocess.run([str(python), "-c", _RUN, str(work / f"{lab}.json"), str(work / f"{lab}.out"), str(fake)],
                              cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{lab} in the simulated Colab:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        result = json.loads((work / f"{lab}.out").read_text())
        assert Path(result["mlsys"]).is_relative_to(venv), result
        assert result["lab2"] and result["lab3"], "the recorded GPU figures are not found in the installed package"
        for spec in result["perf"].values():  # issue 45: a speed preview needs no checkout beside the notebook
            assert Path(spec).is_relative_to(venv) and spec.endswith("perf.toml"), result["perf"]
    after = _pip_list(python, env)
    for name in ("torch", "triton", "numpy", "matplotlib"):
        assert after[name] == before[name], f"the setup cell reinstalled {name} ({before[name]} -> {after[name]})"
    added = set(after) - set(before)
    assert "gpus-for-ml-mlsys" in added and "pint" in added
    assert added <= {"gpus-for-ml-mlsys", "pint", "flexcache", "flexparser", "platformdirs", "typing-extensions",
                     "typing_extensions"}, f"the setup cell installed more than the course needs: {sorted(added)}"


def test_lab_pages_in_the_book_are_not_executed():
    """Issue 18 item 16: the book shows the student version as written, not executed with tracebacks.

    myst-nb skips a notebook whose path matches one of ``execute.exclude_patterns`` with
    ``PurePosixPath.match`` (matching from the right), so every lab page in the table of contents
    must match one, and no chapter may.
    """
    from pathlib import PurePosixPath

    import yaml

    config = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))
    patterns = config["execute"]["exclude_patterns"]
    assert config["execute"]["allow_errors"] is False and config["execute"]["execute_notebooks"] != "off"
    toc = (REPO / "_toc.yml").read_text(encoding="utf-8")
    files = re.findall(r"file:\s*(\S+)", toc)
    labs = [f for f in files if f.startswith("labs/")]
    assert labs, "expected lab pages in _toc.yml"
    for f in files:
        path = PurePosixPath(REPO.as_posix()) / (f + (".ipynb" if f.startswith("labs/") else ".md"))
        excluded = any(path.match(p) for p in patterns)
        assert excluded == f.startswith("labs/"), f"{f}: excluded from execution = {excluded}"
        if f.startswith("labs/"):  # and a release notebook carries no outputs to show
            nb = json.loads(Path(path).read_text(encoding="utf-8"))
            assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"), f
