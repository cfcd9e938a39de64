"""The syllabus tables: hours and objectives measured from chapter sources, weeks and labs from the plan."""


import pytest

from mlsys import plan
from mlsys.book import syllabus

CHAPTER = """---
jupytext: {}
---

# Tiling

:::{admonition} Learning objectives
:class: tip
After this chapter you can

- compute the traffic of a tiled matmul, and explain how the tile
  size sets the intensity;
- choose a tile size.
:::

One two three four five six.

```{code-cell} ipython3
:tags: [remove-cell]
hidden = 1
```

```{code-cell} ipython3
x = 1
y = 2
```

## Exercises

**Exercise 1.** Seven eight.

:::{dropdown} Solution
nine ten eleven
:::

2. Twelve.
"""


@pytest.fixture
def root(tmp_path):
    (tmp_path / "chapters").mkdir()
    (tmp_path / "chapters" / "09_tiling.md").write_text(CHAPTER)
    return tmp_path


def test_a_chapter_is_measured_from_its_source(root):
    c = syllabus.chapter("chapters/09_tiling", root)
    assert c.title == "Tiling"
    assert c.objectives == ("compute the traffic of a tiled matmul, and explain how the tile size sets the intensity",
                            "choose a tile size")
    assert c.exercises == 2            # "**Exercise 1.**" and "2." (the solution's words are not counted)
    assert c.code_lines == 2           # the visible cell's two lines; the removed cell's line is not read
    assert c.figures == 0
    # prose words, counted by hand: title 1, objectives 5 + 16 + 4, "One..six" 6, "Exercises" 1,
    # "**Exercise 1.** Seven eight." 4, "2. Twelve." 2
    assert c.words == 39
    assert c.reading_minutes == pytest.approx(39 / 120 + 2 * 0.1)
    assert c.exercise_minutes == 16


def test_every_taught_chapter_has_objectives_and_exercises():
    for weeks in (plan.TEN_WEEKS, plan.FOURTEEN_WEEKS):
        for w in weeks:
            for short in w.chapters:
                if short == "20":  # Measuring a GPU is a reference chapter: no objectives or exercises
                    continue
                c = syllabus.chapter(plan.chapter_file(short))
                assert len(c.objectives) >= 3 and c.exercises >= 3, c.path


def test_week_rows_split_a_two_week_lab_and_keep_every_labs_hours():
    rows = syllabus.week_rows(plan.FOURTEEN_WEEKS)
    lab2 = [r for r in rows if r["lab"] and r["lab"].folder == "lab2_tiled_matmul"]
    assert len(lab2) == 2 and lab2[0]["lab_h"] == (3.0, 5.0)  # 6-10 h over two weeks
    low, high = plan.lab_hours()
    assert sum(r["lab_h"][0] for r in rows) == pytest.approx(low) == 22.5  # 1.5 + 6 + 3 + 3 + 6 + 3 (Lab 6)
    assert sum(r["lab_h"][1] for r in rows) == pytest.approx(high) == 38.0  # 3 + 10 + 5 + 5 + 10 + 5 (Lab 6)


def test_tables_link_every_chapter():
    text = syllabus.hours_table(plan.TEN_WEEKS)
    assert text.count("\n") == len(plan.TEN_WEEKS) + 2  # header, rule, one row a week, the total
    for w in plan.TEN_WEEKS:
        for short in w.chapters:
            assert f"<../{plan.chapter_file(short)}>" in text
    assert "`" not in text.replace("{doc}`", "").replace(">`", "")  # no stray backtick from a title
    assert "Lab FlashAttention" in syllabus.objectives_markdown(plan.TEN_WEEKS)
