"""Simulated devices for tests that run on both simulated interfaces: SIMKFD (the KFD interface over the
simulated kernel driver) and SIMPCI (the AM driver over the simulated PCI function)."""
from __future__ import annotations

import amdq

INTERFACES = ("SIMKFD", "SIMPCI")


def open_sim(monkeypatch, tmp_path, interface: str = "SIMKFD", arch: str = "gfx1100") -> amdq.Device:
    """A simulated device on `interface`; a SIMPCI function keeps its state under `tmp_path`."""
    if interface == "SIMPCI":
        monkeypatch.setenv("AMDQ_SIM_STATE", str(tmp_path / "sim-state"))
    return amdq.open_device(f"{interface}+AMD:{arch}")
