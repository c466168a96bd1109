"""A local Ray for the tests that need one (the ``ray_executor`` fixture starts it with 2
CPUs, once per session: mark those tests ``slow`` and ``needs_ray``)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest

from medverify.executor import RayExecutor

HAS_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason="ray is not installed "
                               "(pip install 'medverify[ray]')")


@pytest.fixture(scope="session")
def ray_executor() -> Iterator[RayExecutor]:
    """One local Ray (2 CPUs) for the whole session, shut down at its end."""
    executor = RayExecutor(num_cpus=2)
    executor._connect()
    try:
        yield executor
    finally:
        executor.close()


class NoRay:
    """Stands in for the ray module: never initialized, and ray.init must not be reached."""

    @staticmethod
    def is_initialized() -> bool:
        return False

    @staticmethod
    def init(**options: Any) -> None:
        raise AssertionError(f"ray.init called with {options}")
