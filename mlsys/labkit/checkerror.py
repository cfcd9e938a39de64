"""What a failed check raises (:class:`GradingError`), and how its message names the value it found.

Every check of the course (:mod:`mlsys.labkit.grading`, :mod:`mlsys.labkit.librarycalls`,
:mod:`mlsys.labkit.checks`) raises this one error; :mod:`mlsys.labkit.grading` re-exports it, the name the
labs' cells use. The value is named by its type and shape only: a learner's object's ``repr`` is its code,
never called.
"""

from __future__ import annotations

import sys
from typing import Any


class GradingError(AssertionError):
    """A failed check; the message says what was expected and what was found."""


def _is_torch(x: Any) -> bool:
    """True only for an exact ``torch.Tensor``: a subclass or an object that imitates one (a class whose
    ``__module__`` says torch, a lazy result computed when read) is not a tensor to a check."""
    torch = sys.modules.get("torch")
    return torch is not None and type(x) is torch.Tensor


_PLAIN_SCALARS = (bool, int, float, complex)


def _plain(x: Any, depth: int = 0) -> bool:
    """Plain data a check may convert itself: an exact ndarray, number, numpy scalar, or a list/tuple of them."""
    import numpy as np

    if type(x) in _PLAIN_SCALARS or type(x) is np.ndarray or isinstance(x, np.generic):
        return type(x) is np.ndarray or type(x) in _PLAIN_SCALARS or type(x).__module__ == "numpy"
    if type(x) in (list, tuple) and depth < 8:
        return all(_plain(v, depth + 1) for v in x)
    return False


def _describe(x: Any) -> str:
    if _is_torch(x):
        return f"tensor(shape={tuple(x.shape)}, dtype={x.dtype}, device={x.device})"
    if _plain(x) and hasattr(x, "shape"):
        return f"array(shape={tuple(x.shape)}, dtype={x.dtype})"
    if _plain(x) or type(x) is str or x is None:
        return f"{type(x).__name__} {x!r}"[:200]
    from mlsys.labkit.proxy import Rejected, RemoteObject

    if isinstance(x, (RemoteObject, Rejected)):  # the grader's own stand-ins: their repr is safe
        return repr(x)
    return f"an object of type {type(x).__qualname__}"  # its repr is the learner's code: not called
