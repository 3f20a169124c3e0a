"""The shader-core kernel suite again, end to end through the public API on SIMKFD+AMD:gfx1100:
runtime -> KFD interface -> simulated kernel driver -> PM4 queue -> command processor -> shader core."""
from __future__ import annotations

import pytest

import device_harness
import test_shader_kernels as suite
from test_shader_kernels import *  # noqa: F401,F403  (the same test functions, collected here again)


@pytest.fixture(autouse=True)
def _through_the_device(monkeypatch):
    monkeypatch.setattr(suite, "run_cl", device_harness.run_cl)
