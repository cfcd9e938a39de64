"""A kernel that does not answer at start-up (a loaded grading machine) is replaced, not charged to the notebook.

The fake client below stands for nbclient's NotebookClient at the three calls ``start_kernel`` makes; its
first starts fail the way nbclient does when a kernel does not answer in time."""

from __future__ import annotations

import pytest

from mlsys.grader.learnerside import cellrunner


class SlowStarts:
    """A client whose first ``fail`` client starts time out, as nbclient's ``wait_for_ready`` does."""

    def __init__(self, fail: int) -> None:
        self.fail, self.km, self.kc = fail, None, None
        self.kernels_started = self.cleanups = 0

    def create_kernel_manager(self) -> object:
        return type("KM", (), {"has_kernel": False})()

    def start_new_kernel(self) -> None:
        self.kernels_started += 1
        self.km.has_kernel = True

    def start_new_kernel_client(self) -> None:
        if self.fail:
            self.fail -= 1
            raise RuntimeError("Kernel didn't respond in 120 seconds")
        self.kc = object()

    def _cleanup_kernel(self) -> None:
        self.cleanups += 1


def test_a_kernel_that_never_answered_is_replaced() -> None:
    client = SlowStarts(fail=2)
    assert cellrunner.start_kernel(client, tries=3) == 3
    assert client.kernels_started == 3 and client.cleanups == 2 and client.kc is not None


def test_a_kernel_that_answers_is_started_once() -> None:
    client = SlowStarts(fail=0)
    assert cellrunner.start_kernel(client) == 1
    assert client.kernels_started == 1 and client.cleanups == 0


def test_the_last_failure_is_reported() -> None:
    client = SlowStarts(fail=5)
    with pytest.raises(RuntimeError, match="didn't respond"):
        cellrunner.start_kernel(client, tries=2)
    assert client.kernels_started == 2


def test_no_tries_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        cellrunner.start_kernel(SlowStarts(fail=0), tries=0)
