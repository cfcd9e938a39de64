"""Chapter sources, read as Markdown without building the book (fast; runs under ``make test``).

* A MyST role inside inline code is never parsed: ```{glue:text}`name``` ``` renders as the literal
  text ``{glue:text} name``. No chapter may have one.
* A chapter's re-measure line shows the command itself; every ``python -m mlsys.bench run NAME``
  it shows names an experiment that exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))
_MD = MarkdownIt("commonmark")


def inline_code(md: str) -> list[str]:
    """The contents of every inline code span in ``md`` (CommonMark's reading, as MyST's parser does)."""
    out: list[str] = []
    for token in _MD.parse(md):
        for child in token.children or []:
            if child.type == "code_inline":
                out.append(child.content)
    return out


def roles_in_inline_code(md: str) -> list[str]:
    return [c for c in inline_code(md) if re.search(r"\{[\w:-]+\}", c) and "{glue" in c]


def test_the_check_sees_a_role_in_inline_code_and_passes_a_plain_role():
    assert roles_in_inline_code("To re-measure: `{glue:text}`ch6_reproduce``.") == ["{glue:text}"]
    assert roles_in_inline_code("It runs at {glue:text}`bw`, see `x = {1: 2}`.") == []
    # two roles side by side are two roles, not code
    assert roles_in_inline_code("{glue:text}`versions`{glue:text}`which_file`") == []


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_no_glue_role_inside_inline_code(path):
    bad = roles_in_inline_code(path.read_text(encoding="utf-8"))
    assert not bad, f"{path.name}: a glue role inside inline code renders as literal text: {bad}"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_reproduction_commands_name_real_experiments(path):
    from mlsys.bench import experiment

    names = set(experiment.catalogue())
    shown = [m.group(1) for code in inline_code(path.read_text(encoding="utf-8"))
             for m in [re.match(r"python -m mlsys\.bench run (\w+)", code)] if m]
    missing = [n for n in shown if n not in names]
    assert not missing, f"{path.name}: re-measure lines name experiments that do not exist: {missing}"


# ---------------------------------------------------------------------------------------------------
# The idea on the page, the plumbing hidden, the model in the package (issue 32, item 3)
# ---------------------------------------------------------------------------------------------------

_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", re.S | re.M)
#: tags that hide a cell's code from a reader (hide-input folds it away behind a toggle)
_HIDING = {"remove-cell", "remove-input", "hide-input", "hide-cell"}
#: names from mlsys that only format, glue, check or style: a visible cell calling only these shows no idea
_PLUMBING = {"check", "fmt", "glue", "table", "recorded_in", "viz", "Q_", "short_kernel_name",
             "REFERENCE_DEVICE", "SECOND_DEVICE"}


def code_cells(md: str) -> list[tuple[int, bool, str]]:
    """Each MyST code cell of ``md`` as (line, hidden, Python source); IPython magics are blanked."""
    import yaml

    out = []
    for m in _CELL.finditer(md):
        body, opts = m.group(1), {}
        if body.startswith("---\n"):
            end = body.index("\n---\n", 3)
            opts, body = yaml.safe_load(body[4:end]) or {}, body[end + 5:]
        else:
            lines = body.split("\n")
            while lines and lines[0].startswith(":"):
                key, _, value = lines.pop(0)[1:].partition(":")
                opts[key] = yaml.safe_load(value)
            body = "\n".join(lines)
        src = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in body.split("\n"))
        out.append((md[:m.start()].count("\n") + 1, bool(_HIDING & set(opts.get("tags") or [])), src))
    return out


def _mlsys_names(trees: list) -> set[str]:
    import ast

    names: set[str] = set()
    for tree in trees:
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] == "mlsys":
                names |= {a.asname or a.name for a in n.names}
            elif isinstance(n, ast.Import):
                names |= {(a.asname or a.name).split(".")[0] for a in n.names if a.name.split(".")[0] == "mlsys"}
    return names


def shown_mlsys_calls(md: str) -> list[tuple[int, list[str]]]:
    """The visible cells of ``md`` that call into ``mlsys`` beyond plumbing: (line, the names they call)."""
    import ast

    cells = [(line, hidden, ast.parse(src)) for line, hidden, src in code_cells(md)]
    names = _mlsys_names([t for _, _, t in cells]) - _PLUMBING
    out = []
    for line, hidden, tree in cells:
        called = {n.func.id if isinstance(n.func, ast.Name) else None for n in ast.walk(tree) if isinstance(n, ast.Call)}
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in names}
        # a module name counts where an attribute of it is called (viz-like plumbing is excluded above)
        hit = sorted(used & (called | {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}))
        if not hidden and hit:
            out.append((line, hit))
    return out


def hidden_model_code(md: str) -> list[str]:
    """Functions (``def`` or ``lambda``) defined in a hidden cell of ``md`` that do arithmetic.

    A hidden cell may look figures up, pass them to ``mlsys`` and format the result; a formula in one is
    model code the reader cannot see and no test covers: it belongs in an ``mlsys`` module with tests
    worked by hand (or, if it is what the page teaches, in a visible cell).
    """
    import ast

    bad = []
    for line, hidden, src in code_cells(md):
        if not hidden:
            continue
        for n in ast.walk(ast.parse(src)):
            if isinstance(n, ast.FunctionDef | ast.Lambda):
                index = {id(b) for s in ast.walk(n) if isinstance(s, ast.Subscript) for b in ast.walk(s.slice)}
                index |= {id(b) for b in ast.walk(n) if isinstance(b, ast.BinOp) and isinstance(b.op, ast.Add | ast.Sub)
                          and isinstance(b.left, ast.Name) and isinstance(b.right, ast.Constant) and b.right.value == 1}
                arith = [b for b in ast.walk(n) if isinstance(b, ast.BinOp) and id(b) not in index  # x[i - 1], i + 1: no formula
                         and not isinstance(b.op, ast.Mod)  # "%s" % x, or a divisibility test
                         and not (isinstance(b.op, ast.Add) and (isinstance(b.left, ast.Constant | ast.JoinedStr)
                                                                 and isinstance(getattr(b.left, "value", ""), str)
                                                                 or isinstance(b.left, ast.JoinedStr)))]
                if arith:
                    name = n.name if isinstance(n, ast.FunctionDef) else "lambda"
                    bad.append(f"line {line + n.lineno}: {name}")
    return bad


def test_the_checks_see_hidden_model_code_and_shown_calls():
    md = ("```{code-cell} ipython3\n:tags: [remove-cell]\nfrom mlsys import comm\nfrom mlsys.book.page import glue\n"
          "def f(n):\n    return 2 * n\ng = lambda r: r['x']\n```\n\n"
          "```{code-cell} ipython3\nglue('a', 1)\n```\n")
    assert [b.split(": ")[1] for b in hidden_model_code(md)] == ["f"]
    step = "```{code-cell} ipython3\n:tags: [remove-cell]\ndef h(i):\n    return f(x[i - 1], i + 1)\n```\n"
    assert hidden_model_code(step) == []  # index steps are no formula
    assert hidden_model_code(step.replace("i + 1", "i + 2")) != []
    assert shown_mlsys_calls(md) == []  # glue is plumbing; comm is imported but only in a hidden cell
    md += "```{code-cell} ipython3\nt = comm.allreduce_time(1, 2, 3, 4)\n```\n"
    assert [names for _, names in shown_mlsys_calls(md)] == [["comm"]]
    shown = "```{code-cell} ipython3\n---\ntags: [hide-input]\n---\nt = comm.x()\n```\n"
    assert shown_mlsys_calls(md.split("```{code-cell} ipython3\nt")[0] + shown) == []


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_a_chapter_shows_the_mlsys_calls_that_make_its_figures(path):
    shown = shown_mlsys_calls(path.read_text(encoding="utf-8"))
    assert shown, (f"{path.name}: every call into mlsys is hidden; show the one or two calls that make the "
                   "chapter's key figures in a short visible cell (hide only glue, fmt, check and tables)")


#: hidden arithmetic allowed for now, by chapter (empty: every chapter passes); the test fails when an entry is
#: gone, so the list only shrinks
KNOWN_HIDDEN_MODEL_CODE: dict[str, set[str]] = {}


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_no_chapter_hides_model_code(path):
    found = {b.split(": ")[1] for b in hidden_model_code(path.read_text(encoding="utf-8"))}
    known = KNOWN_HIDDEN_MODEL_CODE.get(path.stem, set())
    assert found <= known, (f"{path.name}: hidden cells define functions that compute: "
                            f"{hidden_model_code(path.read_text(encoding='utf-8'))}; move the formula into mlsys "
                            "with a test worked by hand, or show it if it is what the page teaches")
    assert known <= found, f"{path.name}: {sorted(known - found)} no longer hidden here; drop them from the list"


# ---------------------------------------------------------------------------------------------------
# Device slugs come from the page helper (REFERENCE_DEVICE, SECOND_DEVICE), never typed in a page
# ---------------------------------------------------------------------------------------------------

SLUGS = sorted(p.name for p in (ROOT / "data" / "measurements").iterdir() if p.is_dir())
LAB_PAGES = sorted((ROOT / "labs" / "source").glob("*/*.ipynb"))


def slug_literals(text: str) -> list[str]:
    return [s for s in SLUGS if re.search(rf"(?<![\w-]){re.escape(s)}(?![\w-])", text)]


def test_the_slug_check_knows_the_recorded_devices_and_finds_one():
    assert {"nvidia-h100-80gb-hbm3", "nvidia-h200"} <= set(SLUGS)
    assert slug_literals('load_experiment("x", device="nvidia-h200")') == ["nvidia-h200"]
    assert slug_literals("second('x')  # the nvidia-h200-ish") == []


@pytest.mark.parametrize("path", CHAPTERS + [ROOT / "intro.md"], ids=[p.stem for p in CHAPTERS] + ["intro"])
def test_no_device_slug_typed_in_a_chapter(path):
    found = slug_literals(path.read_text(encoding="utf-8"))
    assert not found, (f"{path.name} types the device slug(s) {found}; use mlsys.book.page's REFERENCE_DEVICE / "
                       "SECOND_DEVICE, reference() / second() and recorded_in()")


@pytest.mark.parametrize("path", LAB_PAGES, ids=[p.stem for p in LAB_PAGES])
def test_no_device_slug_typed_in_a_lab(path):
    import json

    text = "\n".join("".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"])
    found = slug_literals(text)
    assert not found, (f"{path.name} types the device slug(s) {found}; use mlsys.book.page's REFERENCE_DEVICE / "
                       "SECOND_DEVICE")
