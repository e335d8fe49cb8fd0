"""benchmarks/submission_hosts.py's count of PythonDriver calls of two hosts that overlapped on the JobManager."""

from __future__ import annotations

import pytest

from benchmarks.submission_hosts import overlapping

pytestmark = pytest.mark.unit


def test_calls_overlap_only_when_their_spans_share_time() -> None:
    a = [[0.0, 1.0], [2.0, 3.0], [5.0, 6.0]]
    b = [[0.5, 1.5], [3.0, 4.0]]  # overlaps a's first; touches a's second at 3.0 only
    assert overlapping(a, b) == 1
    assert overlapping(b, a) == 1
    assert overlapping(a, []) == 0
    assert overlapping([[0.0, 10.0]], b) == 1
