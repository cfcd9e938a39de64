"""What the grading scripts share: a scratch course in which every student handed in the instructor notebook.

``scripts/repeat_grading.py`` and ``scripts/grading_throughput.py`` import it (both run as
``python scripts/<name>.py``, so this folder is on ``sys.path``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def course(root: Path, lab: str, n: int, tag: str) -> Path:
    """A scratch nbgrader course at ``root`` with ``n`` students who each handed in the instructor notebook of
    ``lab``; each copy carries its number under the notebook metadata key ``tag``, so each has a checksum of its
    own and is graded for real."""
    (root / "source").mkdir(parents=True)
    shutil.copy2(REPO / "labs" / "nbgrader_config.py", root / "nbgrader_config.py")
    shutil.copytree(REPO / "labs" / "source" / lab, root / "source" / lab,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    nb = json.loads((REPO / "labs" / "source" / lab / f"{lab}.ipynb").read_text())
    for i in range(n):
        nb["metadata"][tag] = i
        d = root / "submitted" / f"student{i:03d}" / lab
        d.mkdir(parents=True)
        (d / f"{lab}.ipynb").write_text(json.dumps(nb))
    return root
