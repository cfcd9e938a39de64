"""A page that shows a figure timed with the old write flush says so in its evidence layer.

Until 2026-12-02 the timer cleared the L2 by *writing* a 256 MiB buffer; the dirty lines' write-back fell
into the timed kernel (on an H200: decode GEMV +21.5%, LayerNorm +3.0%, ``flush_bias.json``). Every chapter
that reads such a record must glue :func:`mlsys.book.notes.flush_note` for it into a ``{glue:md}`` block (its
measurement notes). The pages are read statically: which records their code cells load (``reference``,
``second``, ``load_experiment``), and which records their ``flush_note`` calls name.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from mlsys.book import notes

ROOT = Path(__file__).resolve().parents[1]
H100, H200 = "nvidia-h100-80gb-hbm3", "nvidia-h200"
_LOADERS = {"reference": H100, "second": H200, "load_experiment": H100}
_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", re.S | re.M)


def _code(page: Path) -> ast.Module:
    cells = []
    for src in _CELL.findall(page.read_text(encoding="utf-8")):
        if src.startswith("---\n"):  # a YAML header of cell options
            src = src.split("\n---\n", 1)[1]
        cells.append("\n".join(line for line in src.splitlines() if not line.startswith((":", "%", "!"))))
    return ast.parse("\n".join(cells))


def _name(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _loaded(call: ast.Call, loops: dict[str, list[str]]) -> list[tuple[str, str]]:
    """(experiment, device slug) of one loader call; a loop variable stands for every name it iterates over."""
    device = _LOADERS[_name(call.func)]
    for kw in call.keywords:
        if kw.arg == "device" and isinstance(kw.value, ast.Constant):
            device = kw.value.value
    if len(call.args) > 1 and isinstance(call.args[1], ast.Constant):
        device = call.args[1].value
    arg = call.args[0] if call.args else None
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [(arg.value, device)]
    if isinstance(arg, ast.Name):
        return [(n, device) for n in loops.get(arg.id, [])]
    return []


def uses_and_marks(page: Path) -> tuple[set[tuple[str, str]], set[tuple[str, str]], set[str]]:
    """The records a page loads, the records its flush_note calls name, and the names those notes are glued as."""
    tree = _code(page)
    loops: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.comprehension, ast.For)) and isinstance(node.target, ast.Name) \
                and isinstance(node.iter, (ast.Tuple, ast.List)):
            loops[node.target.id] = [e.value for e in node.iter.elts if isinstance(e, ast.Constant)]
    bound: dict[str, list[tuple[str, str]]] = {}  # variable -> the record(s) assigned to it
    used: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) in _LOADERS:
            used.update(_loaded(node, loops))
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            targets = node.targets[0].elts if isinstance(node.targets[0], ast.Tuple) else [node.targets[0]]
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for t, v in zip(targets, values, strict=False):
                if isinstance(t, ast.Name) and isinstance(v, ast.Call) and _name(v.func) in _LOADERS:
                    bound[t.id] = _loaded(v, loops)
    marked: set[tuple[str, str]] = set()
    glued: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) == "glue" and len(node.args) > 1 \
                and isinstance(node.args[1], ast.Call) and _name(node.args[1].func) == "flush_note":
            glued.add(node.args[0].value)
            for a in node.args[1].args[1:]:
                marked.update(bound.get(a.id, []) if isinstance(a, ast.Name) else
                              _loaded(a, loops) if isinstance(a, ast.Call) and _name(a.func) in _LOADERS else [])
    return used, marked, glued


def _record(experiment: str, device: str) -> dict:
    return json.loads((ROOT / "data" / "measurements" / device / f"{experiment}.json").read_text(encoding="utf-8"))


def _exists(experiment: str, device: str) -> bool:
    return (ROOT / "data" / "measurements" / device / f"{experiment}.json").is_file()


PAGES = sorted((ROOT / "chapters").glob("*.md"))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_a_page_showing_a_write_flushed_record_marks_it_in_its_evidence_layer(page):
    used, marked, glued = uses_and_marks(page)
    # a record not yet made (the page shows its figures as missing) was timed by no flush at all
    flushed = {(e, d) for e, d in used if _exists(e, d) and notes.write_flushed(_record(e, d))}
    assert flushed <= marked, (f"{page.name} shows records timed with the write flush without a flush_note: "
                               f"{sorted(flushed - marked)}")
    text = page.read_text(encoding="utf-8")
    for name in glued:
        assert re.search(rf"^```\{{glue:md\}} {re.escape(name)}\s*$", text, re.M), f"{page.name}: {name} is never shown"


def test_the_page_reader_finds_loads_loops_and_marks():
    # a hand-made page: an H100 record loaded directly, two through a loop, one H200 record marked
    src = ('```{code-cell} ipython3\n:tags: [remove-cell]\nlr = reference("layer_roofline")\n'
           'recs = {n: load_experiment(n) for n in ("coalescing", "divergence")}\nw = second("tile_configs")\n'
           'glue("x_flush", flush_note(second("flush_bias"), w))\n```\n\n```{glue:md} x_flush\n:format: myst\n```\n')
    page = ROOT / "_build" / "test_flush_marks_page.md"
    page.parent.mkdir(exist_ok=True)
    page.write_text(src, encoding="utf-8")
    try:
        used, marked, glued = uses_and_marks(page)
    finally:
        page.unlink()
    assert used == {("layer_roofline", H100), ("coalescing", H100), ("divergence", H100), ("tile_configs", H200),
                    ("flush_bias", H200)}
    assert marked == {("tile_configs", H200)} and glued == {"x_flush"}


def test_write_flushed_reads_the_timer_of_a_record():
    gpu = {"experiment": "x", "device": {"kind": "cuda", "name": "G", "slug": "g"}, "date": "2026-11-23"}
    old = {**gpu, "results": {"a": {"timing": {"flush": "L2 flushed before each timed call by writing 268435456 bytes"}}}}
    new = {**gpu, "results": {"a": {"timing": {"flush": "L2 flushed before each timed call by reading 268435456 bytes",
                                               "flush_mode": "read"}}}}
    assert notes.write_flushed(old) and not notes.write_flushed(new)
    assert notes.write_flushed({**gpu, "results": [{"flush_mode": "write"}]})
    assert not notes.write_flushed({**old, "device": {"kind": "cpu", "name": "C"}})  # a CPU's cache flush
    assert not notes.write_flushed({**old, "experiment": "flush_bias"})  # the side-by-side itself


def test_the_flush_note_states_the_measured_bias_and_refuses_a_clean_record():
    bias = {"experiment": "flush_bias", "date": "2026-12-02T01:49", "device": {"name": "G2", "slug": "g2"},
            "results": {"linear_t1": {"write": {"value": 12.0}, "read": {"value": 10.0}},
                        "layer_norm": {"write": {"value": 103.0}, "read": {"value": 100.0}}}}
    old = {"experiment": "layer_roofline", "device": {"kind": "cuda", "name": "G1"}, "results": {"flush_mode": "write"}}
    text = notes.flush_note_text(bias, old)
    assert "`layer_roofline` (G1)" in text and "20.0% longer" in text and "LayerNorm 3.0%" in text  # 12/10, 103/100
    assert "data/measurements/g2/flush_bias.json" in text
    with pytest.raises(ValueError, match="needs no flush note"):
        notes.flush_note_text(bias, {**old, "results": {"flush_mode": "read"}})
    with pytest.raises(ValueError, match="flush_bias record"):
        notes.flush_note_text(old, old)
    # the course's own record: the GEMV's bias is the one the review measured independently (17.3 / 14.4 us,
    # +20%), within its run-to-run spread
    real = _record("flush_bias", H200)
    assert abs(notes._bias(real, "linear_t1") - (17.3 / 14.4 - 1)) < 0.05
