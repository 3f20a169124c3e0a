"""The shader-core kernel suite again, end to end through the public API on SIMKFD+AMD:gfx1100:
runtime -> KFD interface -> simulated kernel driver -> PM4 queue -> command processor -> shader core,
with the simulated GPU in both modes (engines on the doorbell thread, or on their own thread), and
without the SDMA copy engine (AMD_DISABLE_SDMA=1: CPU-visible buffers, CPU copies); and on
SIMPCI+AMD:gfx1100: runtime -> PCI interface -> the AM driver (page tables, MEC-bound queue, IH) -> the
simulated PCI function's command processor -> shader core; and on SIMUSB+AMD:gfx1100: the same AM driver over the
simulated USB bridge (every register, doorbell and VRAM access a USB transfer, copies through the bridge SRAM)."""
from __future__ import annotations

import pytest

import device_harness
import test_shader_kernels as suite
from test_shader_kernels import *  # noqa: F401,F403  (the same test functions, collected here again)


@pytest.fixture(autouse=True, params=["sync", "async", "nosdma", "simpci", "simusb"])
def _through_the_device(request, monkeypatch):
    monkeypatch.setenv("AMDQ_SIM_MODE", "sync" if request.param == "sync" else "async")
    if request.param == "nosdma":
        monkeypatch.setenv("AMD_DISABLE_SDMA", "1")
    else:
        monkeypatch.delenv("AMD_DISABLE_SDMA", raising=False)
    iface = {"simpci": "SIMPCI", "simusb": "SIMUSB"}.get(request.param, "SIMKFD")
    monkeypatch.setattr(suite, "run_cl", lambda *a, **k: device_harness.run_cl(*a, spec_suffix=request.param,
                                                                               interface=iface, **k))
