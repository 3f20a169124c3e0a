"""Simulated devices for tests that run on every simulated interface: SIMKFD (the KFD interface over the
simulated kernel driver), SIMPCI (the AM driver over the simulated PCI function) and SIMUSB (the AM driver over
the simulated USB bridge: every buffer in VRAM, copies through the bridge SRAM)."""
from __future__ import annotations

import amdq

INTERFACES = ("SIMKFD", "SIMPCI", "SIMUSB")
# (interface, arch) of the tests that run on every simulated device kind: KFD's gfx1100, the simulated
# PCI function's three targets and gfx1100 behind the simulated USB bridge
DEVICES = [("SIMKFD", "gfx1100"), ("SIMPCI", "gfx1100"), ("SIMPCI", "gfx1201"), ("SIMPCI", "gfx942")]
# ... and behind the simulated USB bridge, for the tests that go through the public API only (launches, copies,
# graphs, profiles, arrays). The packet-processor tests (test_aql, test_sdma) write rings and memory through the CPU
# views behind the runtime's back, which over the bridge are host shadows sent only at doorbells: not for them.
RUNTIME_DEVICES = DEVICES + [("SIMUSB", "gfx1100")]


def device_id(p) -> str:
    return "-".join(p)


def open_sim(monkeypatch, tmp_path, interface: str = "SIMKFD", arch: str = "gfx1100") -> amdq.Device:
    """A simulated device on `interface`; a SIMPCI function keeps its state under `tmp_path`."""
    if interface == "SIMPCI":
        monkeypatch.setenv("AMDQ_SIM_STATE", str(tmp_path / "sim-state"))
    return amdq.open_device(f"{interface}+AMD:{arch}")


AM_ENV = ("AM_RESET", "AM_DEBUG", "AMDQ_SIM_INJECT")


def am_env(monkeypatch, tmp_path, *more: str) -> None:
    """A test of the AM driver starts from a clean environment (no AM_* knobs, no injection, plus the names in
    `more`) and a simulated PCI function state of its own under `tmp_path`."""
    for k in AM_ENV + more:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AMDQ_SIM_STATE", str(tmp_path / "state"))
