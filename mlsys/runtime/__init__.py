"""The runtime both other rooms stand on: where code runs, how a notebook's cells run, how processes start and stop.

* :mod:`mlsys.runtime.device`: ``setup()`` (Triton's interpreter where there is no CUDA), ``has_cuda``,
  ``default_device``, ``pick_device`` (what ``--device auto|cpu|cuda`` means) and ``fake_timer``
  (``MLSYS_FAKE_TIMER=1``: CI's deterministic timer).
* :mod:`mlsys.runtime.notebook`: the notebook cell model: one :class:`~mlsys.runtime.notebook.Cell`, one
  reader (``code_cells``, ``cell_source``, ``is_autograded``) and one executor that registers each cell
  with :mod:`linecache` (``exec_cell``, ``exec_cells``, ``run_cells``).
* :mod:`mlsys.runtime.launch`: ``launch(fn, world_size, ...)``, torch.distributed ranks as child processes.
* :mod:`mlsys.runtime.processes`: ``kill_tree`` (a process, its group and every descendant).
* :mod:`mlsys.runtime.paths`: the checkout, the labs' nbgrader root and a lab's instructor notebook.

The order of the rooms is models < runtime < bench < course: this room imports the models at most,
never :mod:`mlsys.bench` or the course's rooms (:mod:`mlsys.book`, :mod:`mlsys.labkit`, :mod:`mlsys.grader`) (``tests/test_architecture.py`` holds it).
"""

from __future__ import annotations

from .lazy import lazy_submodules

__all__, __getattr__, __dir__ = lazy_submodules(__name__, __path__)
