"""The course plan (labs, hours, reading paths) the landing page and the syllabus read, and the
measurement-notes text that chapters fold under their figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlsys import plan
from mlsys.book import notes, site

ROOT = Path(__file__).resolve().parents[1]


def test_lab_hours_add_up_to_the_review_s_range():
    # the reader review's learner hours per lab: 1.5-3, 6-10, 3-5, 3-5, 6-10 -> 19.5-33 ("20-33 h")
    # the review's 20-33 h for Labs 1-5 (1.5-3 + 6-10 + 3-5 + 3-5 + 6-10), plus Lab 6's 3-5 h
    assert plan.lab_hours() == (22.5, 38)
    assert plan.total_hours() == (9 + 9 + 22.5, 9 + 9 + 38)


def test_the_six_labs_are_the_release_folders_and_the_toc_lists_them_in_number_order_in_their_own_part():
    import yaml

    folders = sorted(p.name for p in (ROOT / "labs" / "release").iterdir() if p.is_dir() and p.name.startswith("lab"))
    assert [lab.folder for lab in plan.LABS] == folders
    # a learner meets the labs in the order of their numbers: one "Labs" part, Lab 1 to Lab 6, and no lab
    # anywhere else (under its chapter, Lab 5 of Part II would come before Lab 4 of Part III)
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    files += [s["file"] for part in toc["parts"] for c in part["chapters"] for s in c.get("sections", [])]
    labs = [f for f in files if f.startswith("labs/")]
    assert labs == [f"labs/release/{n}/{n}" for n in ("lab1_roofline", "lab2_tiled_matmul", "lab3_fusion",
                                                       "lab4_collectives", "lab5_attention", "lab6_profiling")]
    (part,) = [p for p in toc["parts"] if any(c["file"].startswith("labs/") for c in p["chapters"])]
    assert part["caption"] == "Labs" and [c["file"] for c in part["chapters"]] == labs
    # each lab names the chapter that teaches it, numbered as the book numbers it
    assert site.lab_chapters(ROOT)["lab5_attention"][:1] == (12,)
    assert site.lab_chapters(ROOT)["lab4_collectives"][:1] == (13,)
    with pytest.raises(ValueError, match="lab1_roofline"):
        plan.lab("lab9")


@pytest.mark.parametrize("weeks, n", [(plan.TEN_WEEKS, 10), (plan.FOURTEEN_WEEKS, 14)])
def test_each_path_has_its_weeks_all_six_labs_in_number_order_and_real_chapters_in_book_order(weeks, n):
    assert len(weeks) == n
    assert {w.lab for w in weeks if w.lab} == {lab.folder for lab in plan.LABS}
    met = list(dict.fromkeys(w.lab for w in weeks if w.lab))  # each lab in the week it starts
    assert met == sorted(met, key=lambda f: int(f[3])), "the labs are met in the order of their numbers"
    read = [plan.chapter_file(c) for w in weeks for c in w.chapters]
    assert len(read) == len(set(read)), "a chapter is read twice"
    toc = (ROOT / "_toc.yml").read_text()
    assert [toc.index(f"file: {c}") for c in read] == sorted(toc.index(f"file: {c}") for c in read)
    assert read[:6] == list(plan.PART1), "both paths start with Part I, in order"
    for w in weeks:  # a lab comes in the week of its chapter or after it
        if w.lab:
            taught = plan.lab(w.lab).chapter
            assert taught in read[: sum(len(x.chapters) for x in weeks[: weeks.index(w) + 1])]


def test_the_fourteen_week_path_reads_every_chapter():
    every = {f"chapters/{p.stem}" for p in (ROOT / "chapters").glob("*.md")} - {"chapters/90_accelerators"}
    assert {plan.chapter_file(c) for w in plan.FOURTEEN_WEEKS for c in w.chapters} == every


def test_a_chapter_short_name_that_matches_no_file_is_an_error():
    assert plan.chapter_file("06") == "chapters/06_roofline"
    with pytest.raises(ValueError, match="chapters/77_"):
        plan.chapter_file("77")


RECORD = {"experiment": "divergence", "date": "2026-11-23T06:46:09+00:00",
          "device": {"name": "NVIDIA H100 80GB HBM3", "slug": "nvidia-h100-80gb-hbm3"},
          "software": {"python": "3.12.3", "torch": "2.11.0+cu130", "cuda": "13.0", "numpy": "2.5.2"}}


def test_measurement_notes_name_device_date_software_repeats_and_the_command():
    text = notes.notes_text(RECORD, repeats="median of 20 runs")
    assert text.split("\n") == [
        "- **Device**: NVIDIA H100 80GB HBM3, recorded 2026-11-23.",
        "- **Software**: torch 2.11.0+cu130, cuda 13.0, python 3.12.3.",
        "- **Repeats**: median of 20 runs.",
        '- **Re-measure** on a GPU: `python -m mlsys.bench run divergence` (or `mlsys.bench.run("divergence")` in Python).',
        "- **Record**: `data/measurements/nvidia-h100-80gb-hbm3/divergence.json`.",
    ]
    assert "Repeats" not in notes.notes_text(RECORD)


def test_measurement_notes_refuse_a_record_without_a_device():
    with pytest.raises(ValueError, match="device.name"):
        notes.notes_text({"experiment": "x", "date": "2026-01-01"})
    with pytest.raises(ValueError, match="at least one record"):
        notes.measurement_notes()


def test_the_notes_re_measure_command_names_a_real_experiment_and_its_record_exists():
    from mlsys.bench import experiment
    from mlsys.book.page import reference

    rec = reference("divergence")
    assert "divergence" in experiment.catalogue()
    md = notes.measurement_notes(rec).data
    assert f"`data/measurements/{rec.data['device']['slug']}/divergence.json`" in md
    assert (ROOT / "data" / "measurements" / rec.data["device"]["slug"] / "divergence.json").is_file()


def test_book_numbers_follow_the_toc_with_measuring_a_gpu_closing_part_one():
    n = plan.chapter_numbers(ROOT)
    # Part I: chapters 1-5 then Measuring a GPU (6); Part II starts at the roofline (7) and ends with the attention
    # chapter (12); the accelerators page follows Part III's five chapters (13-17) as 18, then the glossary and
    # "How the numbers are made"
    assert n["chapters/05_memory_hierarchy"] == 5
    assert n["chapters/20_measuring_a_gpu"] == 6
    assert n["chapters/06_roofline"] == 7
    assert n["chapters/10a_attention"] == 12
    assert n["chapters/11_many_gpus"] == 13
    assert n["chapters/90_accelerators"] == 18
    assert {num: path for path, num in n.items()}[7] == site.lab_chapters(ROOT)["lab1_roofline"][2]
    assert site.lab_chapters(ROOT)["lab1_roofline"][0] == 7
