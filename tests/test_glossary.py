"""The glossary page: at least 60 entries, each defined briefly and linked to a chapter that exists."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mlsys.book import glossary

ROOT = Path(__file__).resolve().parents[1]

SAMPLE = """# Glossary

```{glossary}
:sorted:

warp
  A group of 32 threads, e.g. one instruction for all. Taught in {doc}`chapters/04_execution_model`.

block
CTA
  A group of threads
  on one SM. Taught in {doc}`chapters/04_execution_model`.

orphan
  No chapter named here.
```
"""


def test_the_parser_reads_aliases_multiline_definitions_and_the_chapter():
    e = glossary.entries(SAMPLE)
    assert [x.terms for x in e] == [("warp",), ("block", "CTA"), ("orphan",)]
    assert e[1].definition == "A group of threads on one SM. Taught in {doc}`chapters/04_execution_model`."
    assert [x.chapter for x in e] == ["chapters/04_execution_model"] * 2 + [None]
    assert glossary.term_names(SAMPLE) == {"warp", "block", "cta", "orphan"}


def test_the_parser_refuses_a_page_without_the_directive_or_a_bare_term():
    with pytest.raises(ValueError, match="glossary"):
        glossary.entries("# Glossary\n\nwarp: 32 threads\n")
    with pytest.raises(ValueError, match="no indented definition"):
        glossary.entries("```{glossary}\nwarp\n```\n")


def test_the_glossary_has_at_least_60_entries_each_with_a_chapter_that_exists():
    e = glossary.entries()
    assert len(e) >= 60, f"the glossary has {len(e)} entries; the book promises at least 60"
    missing = [x.terms[0] for x in e if x.chapter is None]
    assert not missing, f"entries that name no teaching chapter: {missing}"
    gone = [x.chapter for x in e if not (ROOT / f"{x.chapter}.md").is_file()]
    assert not gone, f"entries link chapters that do not exist: {gone}"


def test_definitions_are_one_or_two_plain_sentences():
    # a definition ends with "Taught in ...": everything before it is at most two sentences (a sentence ends
    # with ". " before a capital letter; "e.g." and "i.e." do not end one)
    import re

    long = []
    for x in glossary.entries():
        text = x.definition.split(" Taught in ")[0]
        ends = re.findall(r"(?<!e\.g)(?<!i\.e)[.!?] (?=[A-Z(`{$])", text + " X")
        if len(ends) > 2:
            long.append(x.terms[0])
    assert not long, f"definitions of more than two sentences: {long}"


def test_the_issue_s_core_terms_are_defined():
    names = glossary.term_names()
    core = {"warp", "sm", "sass", "ptx", "wgmma", "tma", "occupancy", "coalescing", "ridge point", "busbw", "hbm",
            "l2 cache", "shared memory", "register file", "tensor core", "kernel", "launch", "stream", "cuda event",
            "grid", "block", "cta", "thread", "triton program", "tile", "roofline", "arithmetic intensity",
            "memory-bound", "compute-bound", "latency-bound", "little's law", "fusion", "online softmax",
            "flashattention", "kv cache", "all-reduce", "ring", "nccl", "nvlink", "infiniband", "data parallelism",
            "tensor parallelism", "pipeline parallelism", "bf16", "fp8", "dispatcher", "autograd", "torch.compile",
            "inductor", "cublas", "bank conflict", "wave", "tail effect", "l2 flush", "tdp", "clock throttling",
            "mfu", "tpu", "systolic array", "hlo", "xla"}
    assert core <= names, f"missing: {sorted(core - names)}"


def test_the_glossary_is_in_the_table_of_contents():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    assert "glossary" in files


#: entries whose chapter teaches the idea in other words: the phrase it uses instead
TAUGHT_AS = {"alpha-beta model": r"$\alpha$", "clock throttling": "clock falls"}


def _plain(text: str) -> str:
    return " ".join(text.lower().replace("*", "").replace("-", " ").split())


def test_each_term_appears_in_the_chapter_said_to_teach_it():
    absent = []
    for x in glossary.entries():
        text = _plain((ROOT / f"{x.chapter}.md").read_text(encoding="utf-8"))
        phrases = [_plain(t) for t in x.terms] + [_plain(TAUGHT_AS.get(x.terms[0], x.terms[0]))]
        if not any(p in text for p in phrases):
            absent.append(f"{x.terms[0]} ({x.chapter})")
    assert not absent, f"terms their chapter never mentions: {absent}"
