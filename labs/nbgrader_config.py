"""nbgrader configuration for the course's labs (this folder is the nbgrader course root).

Teachers normally do not call nbgrader directly: ``make release`` and ``make grade`` (``python -m
mlsys.grader.teach``) run it in a scratch copy of this folder with this file, so that the committed
student versions stay byte-for-byte reproducible and submitted files are never touched.
"""

import os  # noqa: E402
import sys  # noqa: E402

c = get_config()  # noqa: F821 -- provided by nbgrader when it loads this file

# nbgrader runs the `alembic` script of its own environment to set up a gradebook: find it even when the venv
# is not activated (`.venv/bin/nbgrader ...`), instead of failing after `--force` removed the old output.
_bin = os.path.dirname(sys.executable)
if _bin not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = os.pathsep.join([_bin, os.environ.get("PATH", "")])

# A new gradebook's schema revision read in this process, not by an `alembic heads` process (1.6 CPU-s each);
# without mlsys, nbgrader's own way (the PATH above).
try:
    from mlsys.grader.gradebook import schema_head_in_process

    schema_head_in_process()
except Exception:  # noqa: BLE001,S110 -- only a shortcut: nbgrader's own way still works
    pass

c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
# never pick up checkpoints or caches that a learner zipped up with the notebook
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".*"]

# What a learner sees where a solution was removed: clear instructions, and a NotImplementedError
# that says what to do (release cells that raise it are tagged `raises-exception` for nbval).
c.ClearSolutions.code_stub = {
    "python": (
        "# YOUR CODE HERE: replace this line with your answer, then run the checks below.\n"
        'raise NotImplementedError("Write your answer in this cell (replace this raise), then re-run it.")'
    ),
}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE (replace this line with your explanation)."

# Per-cell limit while grading: long enough for Triton's JIT and GPU benchmarks, short enough
# that an endless loop costs one cell. A whole submission also runs under a wall-clock limit in
# its own process group (mlsys.grader.teach grade --timeout), which stops a loop that ignores interrupts.
c.Execute.timeout = 600
c.Execute.interrupt_on_timeout = True
c.Execute.startup_timeout = 120
c.Execute.execute_retries = 0

# Test cells are restored from the gradebook: edited ones are overwritten (OverwriteCells does
# this by default), deleted ones are added back and run, so deleting a test earns nothing.
c.OverwriteCells.add_missing_cells = True
c.OverwriteCells.missing_cell_notification = (
    "This cell (id:{cell_id}) was missing from the submission; the grader added it back.\n\n"
)

# Keep feedback readable when a submission prints without end.
c.LimitOutput.max_lines = 200
c.LimitOutput.max_traceback = 60

# Grading is headless: no late penalties, no timestamps needed.
c.Autograde.create_student = True

# Student code never runs in nbgrader's own process. `make grade` sets MLSYS_SANDBOX: nbgrader then
# executes each submission in a bubblewrap sandbox (mlsys.grader.sandboxed_execute) and performance
# cells get the trusted process's verdict; the gradebook and the scoring stay out here. Plain
# `nbgrader autograde` and formgrader's Autograde button (no MLSYS_SANDBOX) get the same sandbox and
# trusted process, set up by mlsys.grader.nbgrader_direct, or a refusal that says to use `make grade`
# (bubblewrap missing, or mlsys not importable): never nbgrader's unsandboxed Execute.
from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor  # noqa: E402
from nbgrader.preprocessors import (  # noqa: E402
    AssignLatePenalties,
    CheckCellMetadata,
    GetGrades,
    IgnorePattern,
    LimitOutput,
    NbGraderPreprocessor,
    SaveAutoGrades,
)

try:
    if os.environ.get("MLSYS_SANDBOX"):
        from mlsys.grader.sandboxed_execute import SandboxedExecute as _Execute
    else:
        from mlsys.grader.nbgrader_direct import DirectSandboxedExecute as _Execute
except Exception as _exc:  # noqa: BLE001 -- any import failure must refuse, not fall back to Execute
    _why = f"the course package mlsys cannot be imported here ({type(_exc).__name__}: {_exc})"

    class _Execute(NbGraderPreprocessor):
        """Refuses to execute: no sandbox can be set up in this environment."""

        def preprocess(self, nb, resources):
            raise RuntimeError(
                f"refusing to run student code outside the course's sandbox: {_why}. Grade with `make grade` "
                "(python -m mlsys.grader.teach grade) from the course's checkout and environment")

c.Autograde.autograde_preprocessors = [
    _Execute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput, SaveAutoGrades,
    AssignLatePenalties, CheckCellMetadata,
]

# Nothing leaks back, on every route (`make grade`, `nbgrader generate_feedback`, formgrader's Generate Feedback
# button): the page a learner gets has no hidden test source, no live markup and nothing the learner's code
# printed after the tests started (mlsys.grader.nbgrader_hooks.ReturnableFeedback); without mlsys, no page at all.
# And a failed or refused nbgrader run puts back the folder it removed (a release, a graded notebook).
try:
    from mlsys.grader.nbgrader_hooks import ReturnableAutograded as _Autograded
    from mlsys.grader.nbgrader_hooks import ReturnableFeedback as _Feedback
    from mlsys.grader.nbgrader_hooks import install_restore_on_failure

    install_restore_on_failure()
    # the teacher's autograded copy, which formgrader shows in the teacher's browser, holds no live markup either
    _steps = c.Autograde.autograde_preprocessors
    c.Autograde.autograde_preprocessors = [*_steps[:_steps.index(SaveAutoGrades) + 1], _Autograded,
                                           *_steps[_steps.index(SaveAutoGrades) + 1:]]
except Exception as _exc:  # noqa: BLE001 -- no sanitizer: refuse to write feedback rather than leak
    _fb_why = f"the course package mlsys cannot be imported here ({type(_exc).__name__}: {_exc})"

    class _Feedback(NbGraderPreprocessor):
        """Refuses to write feedback: the hidden tests could not be removed."""

        def preprocess(self, nb, resources):
            raise RuntimeError(f"refusing to write feedback that could show hidden tests: {_fb_why}")

c.GenerateFeedback.preprocessors = [GetGrades, _Feedback, CSSHTMLHeaderPreprocessor]

# `nbgrader export` writes nbgrader_grades.csv: labs/grades.csv is `make grade`'s report (python -m
# mlsys.grader.teach grade), which already holds nbgrader's scores, the written answers graded in formgrader too.
c.CsvExportPlugin.to = "nbgrader_grades.csv"
