"""The shader-core kernel suite compiled for RDNA4 (clang-19, gfx1201 and gfx1200) and run through the RDNA4
front end: on the shader core alone (tests.harness) for gfx1201 and through the public API on
SIMKFD+AMD:gfx1200 (tests.device_harness); outputs checked against numpy by the suite's own assertions."""
from __future__ import annotations

import pytest

import device_harness
import harness
import test_shader_kernels as suite
from test_shader_kernels import *  # noqa: F401,F403  (the same test functions, collected here again)


@pytest.fixture(autouse=True, params=["gfx1201-core", "gfx1200-device"])
def _on_rdna4(request, monkeypatch):
    arch, where = request.param.split("-")
    run = harness.run_cl if where == "core" else device_harness.run_cl
    monkeypatch.setattr(suite, "run_cl", lambda *a, **k: run(*a, **{**k, "arch": arch}))
