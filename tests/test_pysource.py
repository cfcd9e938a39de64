"""Parsing from several threads: the class grader audits submissions in a thread pool (teach.grade --jobs)."""

from __future__ import annotations

import ast
import gc
import threading
import time
from pathlib import Path

from mlsys.runtime import pysource

SOURCE = (Path(__file__).resolve().parents[1] / "mlsys" / "grader" / "decide" / "audit.py").read_text(encoding="utf-8")


def _parse_in_threads(parse, threads: int = 4, rounds: int = 20) -> list[BaseException]:
    """Parse a large module in ``threads`` threads while every garbage collection hands the GIL over."""
    errors: list[BaseException] = []

    def work() -> None:
        for _ in range(rounds):
            try:
                parse(SOURCE)
            except Exception as exc:  # noqa: BLE001 -- what one thread saw is the finding
                errors.append(exc)
                return

    def yield_gil(phase: str, info: dict) -> None:
        time.sleep(0)

    threshold = gc.get_threshold()
    gc.callbacks.append(yield_gil)
    gc.set_threshold(50)
    try:
        pool = [threading.Thread(target=work) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    finally:
        gc.callbacks.remove(yield_gil)
        gc.set_threshold(*threshold)
    return errors


def test_parse_gives_the_same_tree_as_ast_parse() -> None:
    assert ast.dump(pysource.parse("x = (1 + 2) * y\n")) == ast.dump(ast.parse("x = (1 + 2) * y\n"))


def test_parse_raises_syntax_error_with_the_filename() -> None:
    try:
        pysource.parse("def f(:\n", "<cell 3>")
    except SyntaxError as exc:
        assert exc.filename == "<cell 3>"
    else:
        raise AssertionError("a syntax error was parsed")


def test_parsing_in_four_threads_at_once_never_raises() -> None:
    # CPython 3.11's ast.parse raised "SystemError: AST constructor recursion depth mismatch" here
    # (gh-106905); it cost the 2026-12-02 class grading run an audit ("audit failed: SystemError").
    assert _parse_in_threads(pysource.parse) == []
