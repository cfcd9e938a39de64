"""Parsing Python source safely from several threads at once.

CPython 3.11 keeps the AST builder's recursion depth in interpreter-wide state, so two threads that
parse at the same time (a garbage collection can hand the GIL over half-way through building a tree)
may get ``SystemError: AST constructor recursion depth mismatch`` (CPython issue gh-106905). The
class grader audits and grades submissions in a thread pool, so every parse in the package goes
through :func:`parse`, which lets one thread at a time build a tree.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, one thread at a time; raises ``SyntaxError`` as it does."""
    with _LOCK:
        return ast.parse(source, filename)
