"""Test cells run in the grader process, never in the learner's kernel.

:mod:`mlsys.grader.learnerside.cellrunner` executes answer cells (and the course's other cells) in a worker
kernel, as a learner would run them. A test cell is not sent there: this module executes its source
in the cellrunner's own interpreter, which never executes an answer cell, so nothing an answer cell
registers (an IPython input transformer or AST transformer, a ``pre_run_cell`` hook, a display
formatter, ``sys.excepthook``, a custom exception handler, a rebound global such as ``grading``, a
patched ``mlsys`` module) exists where the test runs or where its outcome is written down.

Names a test cell uses resolve in this order (:class:`GraderNamespace`):

1. what the cell itself defines;
2. builtins (a learner's global ``len`` or ``print`` never shadows them);
3. the imports of the course's own cells, taken from the **instructor** notebook and executed here
   (``grading``, ``Q_``, ``torch``...: never the learner's rebinding);
4. the learner's globals, fetched from the worker through :class:`Rpc` as plain data (numbers,
   strings, exact tensors and arrays rebuilt from bytes, quantities, course objects rebuilt by the
   course's constructors) or as handles to call (:mod:`mlsys.labkit.proxy`). A module never crosses.

The outcome becomes the cell's nbformat outputs: printed text, an ``error`` output when it raised
(nbgrader scores the cell zero) and the last expression's value as ``text/plain`` (partial credit).
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import json
import re
import secrets
from typing import Any

from mlsys.labkit import proxy, watchdog
from mlsys.runtime import pysource

__all__ = ["Rpc", "GraderNamespace", "course_imports", "answer_definitions", "run_test_cell", "grader_cells",
           "grader_only_names", "answer_names"]

_MAGIC = re.compile(r"^\s*(%%?|!).*$", re.M)


def _parse(source: str) -> ast.Module | None:
    try:
        return pysource.parse(_MAGIC.sub("", source))
    except SyntaxError:
        return None


def course_imports(cells: list[dict[str, Any]]) -> str:
    """The top-level import statements of the course's own code cells (not answers, not tests) of an
    instructor notebook, as one program (statements that fail are skipped when run)."""
    out = []
    for cell in cells:
        meta = (cell.get("metadata", {}) or {}).get("nbgrader", {}) or {}
        if cell.get("cell_type") != "code" or meta.get("solution") or meta.get("grade"):
            continue
        src = cell.get("source", "")
        tree = _parse("".join(src) if isinstance(src, list) else str(src))
        if tree is None:
            continue
        out += [ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    return "\n".join(out)


def answer_definitions(sources: list[str]) -> tuple[dict[str, ast.AST], ast.Module]:
    """The learner's top-level ``def``s by name (the last one wins) and all answer code as one module,
    parsed here from the notebook as submitted: the source the static checks read is never what the
    worker reports."""
    defs: dict[str, ast.AST] = {}
    body: list[ast.stmt] = []
    for src in sources:
        tree = _parse(src)
        if tree is None:
            continue
        body += tree.body
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defs[node.name] = node
    return defs, ast.Module(body=body, type_ignores=[])


class Rpc:
    """Requests to the worker kernel through nbclient; replies are plain data (:mod:`mlsys.labkit.proxy`)."""

    def __init__(self, client: Any, nbformat: Any, *, static: dict[str, Any] | None = None) -> None:
        self.client, self.nbformat = client, nbformat
        self.static = static or {}  # name -> (ast.Module of its def, scope) for grading.assert_no_library_calls
        self.lambdas: list[tuple[frozenset[str], proxy.RemoteFunction]] = []  # this test cell's (see make_lambda)

    def _request(self, req: dict[str, Any]) -> dict[str, Any]:
        rid = secrets.token_hex(8)
        code = (f"__import__('mlsys.grader.learnerside.worker', fromlist=['serve']).serve(globals(), "
                f"{json.dumps(json.dumps(req))}, {rid!r})")
        cell = self.nbformat.v4.new_code_cell(code)
        try:
            self.client.execute_cell(cell, 0, store_history=False)
        except Exception as exc:  # the kernel died: say so with the watchdog's words if it ended a hung GPU kernel
            hung = [str(o.get("text", "")).strip() for o in cell.outputs if watchdog.MARK in str(o.get("text", ""))]
            if hung:
                raise type(exc)(hung[-1].splitlines()[-1]) from None
            raise
        for out in cell.outputs:
            reply = (out.get("data") or {}).get(proxy.RPC_MIME) if out.get("output_type") == "display_data" else None
            if isinstance(reply, dict) and reply.get("id") == rid:
                return reply
        errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in cell.outputs if o.get("output_type") == "error"]
        raise proxy.LearnerCodeError("the notebook's kernel did not answer the grader" +
                                     (f" ({errors[0][:300]})" if errors else ""))

    def _ref(self, d: dict[str, Any]) -> Any:
        return proxy.RemoteFunction(self, d) if d.get("callable") else proxy.RemoteObject(self, d)

    def _out(self, reply: dict[str, Any], what: str) -> Any:
        if "error" in reply:
            raise proxy.LearnerCodeError(f"{what} raised {reply['error']}: {reply.get('message', '')}")
        return proxy.decode(reply.get("ok"), self._ref)

    def get(self, name: str) -> Any:
        reply = self._request({"op": "get", "name": name})
        if "missing" in reply:
            raise KeyError(name)
        value = self._out(reply, name)
        if isinstance(value, proxy.RemoteFunction) and name in self.static:
            object.__setattr__(value, "static", self.static[name])
            object.__setattr__(value, "__name__", name)
        return value

    def getattr(self, ref: dict[str, Any], name: str) -> Any:
        reply = self._request({"op": "getattr", "obj": ref["id"], "name": name})
        if reply.get("error") == "AttributeError":  # hasattr() and getattr(x, name, default) work as usual
            raise AttributeError(name)
        return self._out(reply, f".{name}")

    def _arg(self, x: Any) -> dict[str, Any]:
        def handle(v: Any) -> dict[str, Any]:
            if isinstance(v, proxy.RemoteObject):
                return {"t": "handle", "id": object.__getattribute__(v, "_ref")["id"]}
            raise TypeError(f"a test passed a {type(v).__name__} to learner code; only plain data and the "
                            "learner's own objects can cross")
        return proxy.encode(x, handle)

    def call(self, fn: proxy.RemoteFunction, args: tuple, kwargs: dict[str, Any], helper: str | None = None) -> Any:
        req = {"op": "call", "fn": object.__getattribute__(fn, "_ref")["id"], "args": [self._arg(a) for a in args],
               "kwargs": {str(k): self._arg(v) for k, v in kwargs.items()}}
        if helper is not None:
            req["helper"] = helper
        reply = self._request(req)
        fn.ops.update(str(op) for op in reply.get("ops", []))
        result = self._out(reply, fn.__name__)
        _refuse_in_place(fn.__name__, args, reply.get("changed"), offset=1 if helper is not None else 0)
        for r in _remote_functions(result):  # a function the call returned: its calls count for this one too
            object.__setattr__(r, "ops", fn.ops)
        return result


    def make_lambda(self, source: str) -> proxy.RemoteFunction:
        """A test cell's lambda, evaluated in the worker beside the learner's functions (it calls them there).
        Kept in :attr:`lambdas` with the names it uses: what its calls ran counts for those functions too."""
        value = self._out(self._request({"op": "lambda", "source": source}), "a lambda of the test")
        if not isinstance(value, proxy.RemoteFunction):
            raise proxy.LearnerCodeError("the notebook's kernel did not answer the grader with a function")
        object.__setattr__(value, "__name__", "<lambda>")
        tree = _parse(source)
        names = frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name)) if tree is not None else frozenset()
        self.lambdas.append((names, value))
        return value


def _refuse_in_place(name: str, args: tuple, changed: Any, offset: int) -> None:
    """A call that changed an array or tensor argument in place fails the test, and the grader's copy stays as it was.

    Writing the change back would let a function steer the test's own values: a test that computes its reference
    after the call, from the same arrays (``assert_close(f(s, v), reference(s, v))``), would compare with a
    reference the function chose (it zeroes ``v`` and returns zeros). Every function a test calls here must leave
    its arguments unchanged (a launcher reads its inputs; ``online_update`` returns new arrays)."""
    if not isinstance(changed, dict):
        return
    which = sorted(int(k) - offset + 1 for k in changed if str(k).isdigit() and 0 <= int(k) - offset < len(args))
    if which:
        raise proxy.LearnerCodeError(
            f"{name} changed its argument{'s' if len(which) > 1 else ''} {', '.join(map(str, which))} in place; it must "
            "leave its arguments unchanged and return new values (the test's own copies were not changed)")


def _remote_functions(x: Any, depth: int = 0) -> list[proxy.RemoteFunction]:
    if isinstance(x, proxy.RemoteFunction):
        return [x]
    if isinstance(x, (list, tuple)) and depth < 4:
        return [r for v in x for r in _remote_functions(v, depth + 1)]
    if isinstance(x, dict) and depth < 4:
        return [r for v in x.values() for r in _remote_functions(v, depth + 1)]
    return []


class GraderNamespace(dict):
    """A test cell's globals: its own names, builtins, the course's names, then the learner's values.

    ``grader_only`` names (what the course's grader-side cells define) are never fetched from the learner,
    even where the course cell that defines them failed; ``learner_names`` (what the instructor's answer
    cells define) always are, even where a course import has the same name."""

    def __init__(self, course: dict[str, Any], rpc: Rpc, grader_only: frozenset[str] = frozenset(),
                 learner_names: frozenset[str] = frozenset()) -> None:
        super().__init__(course)
        for name in learner_names:  # what the answers define (Lab 5's `attention`) shadows a course import of that name
            self.pop(name, None)
        self.rpc = rpc
        self.grader_only = grader_only
        self.fetched: dict[str, Any] = {}
        self["__builtins__"] = builtins
        self["__mlsys_lambda__"] = rpc.make_lambda

    def __missing__(self, name: str) -> Any:
        if hasattr(builtins, name):
            return getattr(builtins, name)
        if name.startswith("__") or name in self.grader_only:
            raise KeyError(name)
        value = self.rpc.get(name)  # KeyError when the learner never defined it: a NameError in the cell
        self[name] = self.fetched[name] = value
        return value


def _bound_names(tree: ast.AST, params: bool = True) -> set[str]:
    """Names a piece of code binds anywhere (assignments, loop targets, defs, imports, and parameters
    unless ``params`` is false)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg) and params:
            out.add(node.arg)
    return out


class _WorkerLambdas(ast.NodeTransformer):
    """A lambda whose free names are not the cell's own becomes ``__mlsys_lambda__("<its source>")``: it is
    evaluated in the learner's kernel, where the learner's functions it calls live, so a check that runs a
    function there (a guarded call, a kernel count) can run the lambda too, on the tensors it was given
    (a transposed view stays a view)."""

    def __init__(self, local: set[str]) -> None:
        self.local = local

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        params = _bound_names(node.args)
        free = {n.id for n in ast.walk(node.body) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - params
        if free & self.local:
            return node
        return ast.copy_location(ast.Call(func=ast.Name("__mlsys_lambda__", ast.Load()),
                                          args=[ast.Constant(ast.unparse(node))], keywords=[]), node)


def _error(exc: BaseException) -> dict[str, Any]:
    ename = type(exc).__name__
    evalue = str(exc)[:4000]
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<test cell>":
            line = tb.tb_lineno
        tb = tb.tb_next
    where = f" (test cell, line {line})" if line else ""
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": [f"{ename}{where}: {evalue}"]}


def run_test_cell(source: str, course: dict[str, Any], rpc: Rpc, *, grader_only: frozenset[str] = frozenset(),
                  learner_names: frozenset[str] = frozenset(), filename: str = "<test cell>") -> list[dict[str, Any]]:
    """Execute one test cell here and return its nbformat outputs (see the module doc).

    What the cell defines is kept in ``course`` for the cells after it, as in a notebook (a reference
    defined by one test cell and used by the next); what it fetched from the learner is not."""
    from mlsys.labkit import grading

    ns = GraderNamespace(course, rpc, grader_only - learner_names, learner_names)
    out, err = io.StringIO(), io.StringIO()
    outputs: list[dict[str, Any]] = []
    value: Any = None
    grading.PENDING.clear()
    lambdas = getattr(rpc, "lambdas", [])
    lambdas.clear()
    try:
        tree = pysource.parse(source, filename)
        tree = ast.fix_missing_locations(_WorkerLambdas(_bound_names(tree)).visit(tree))
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            exec(compile(tree, filename, "exec"), ns)  # noqa: S102 - the course's own test code
            if last is not None:
                value = eval(compile(ast.Expression(last.value), filename, "eval"), ns)  # noqa: S307
            grading.recheck_library_calls(lambdas)  # every call the cell made, not only those before the check
    except BaseException as exc:  # noqa: BLE001 - every failure is the cell's outcome
        outputs.append(_error(exc))
    finally:
        for name, v in ns.items():
            if not name.startswith("__") and not (name in ns.fetched and ns.fetched[name] is v):
                course[name] = v
    for name, buf in (("stdout", out), ("stderr", err)):
        if buf.getvalue():
            outputs.insert(0 if name == "stdout" else len(outputs), {"output_type": "stream", "name": name,
                                                                     "text": buf.getvalue()})
    if value is not None and not any(o["output_type"] == "error" for o in outputs):
        if isinstance(value, (proxy.RemoteObject, proxy.Rejected)):
            text = repr(value)
        else:
            text = float.__repr__(value) if isinstance(value, float) else repr(value)
        outputs.append({"output_type": "execute_result", "execution_count": None, "metadata": {},
                        "data": {"text/plain": text}})
    return outputs


def grader_cells(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The course cells of an instructor notebook that the grader runs too (metadata
    ``"mlsys": {"grader": true}``: setup, imports, helpers the tests use, values computed from answers),
    each with its source and the grade id of the first test cell after it (``None``: none follows)."""
    out, pending = [], []
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata", {}) or {}
        nbg = meta.get("nbgrader", {}) or {}
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else str(src)
        if nbg.get("grade") and not nbg.get("solution"):
            out += [{"source": p, "before": nbg.get("grade_id")} for p in pending]
            pending = []
        elif (meta.get("mlsys", {}) or {}).get("grader") and not nbg.get("solution"):
            pending.append(_MAGIC.sub("", src))
    return out + [{"source": p, "before": None} for p in pending]


def answer_names(cells: list[dict[str, Any]]) -> frozenset[str]:
    """What the answer cells of an instructor notebook define at top level (functions, classes, assigned
    names; not imports): a test cell takes these from the learner, whatever the course imports."""
    names: set[str] = set()
    for cell in cells:
        meta = (cell.get("metadata", {}) or {}).get("nbgrader", {}) or {}
        if cell.get("cell_type") != "code" or not meta.get("solution"):
            continue
        src = cell.get("source", "")
        tree = _parse("".join(src) if isinstance(src, list) else str(src))
        for node in tree.body if tree is not None else []:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                names |= _bound_names(node, params=False)
    return frozenset(names)


def grader_only_names(sources: list[str]) -> frozenset[str]:
    """The names the grader's course cells bind: a test reads them from the grader, never from the learner."""
    names: set[str] = set()
    for src in sources:
        tree = _parse(src)
        if tree is not None:
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                else:
                    names |= _bound_names(node, params=False)
    return frozenset(n for n in names if not n.startswith("_"))
