from __future__ import annotations

import pytest


def test_fault_suite_tests_carry_the_marker(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("faults") is not None
