"""GPU faults through the AM driver on the simulated PCI function: the runtime's GPUFault names the address,
the direction and the UTCL2 client the hub's fault registers give (am/vmfault.py, through the IH), and the
kernel; the device recovers and the next launch is correct."""
from __future__ import annotations

import numpy as np
import pytest

from amdq.errors import GPUFault
from sims import open_sim

SRC = """
__kernel void poke(__global int *p, int v) { p[get_global_id(0)] = v; }
"""
ARCHS = ("gfx1100", "gfx1201", "gfx942")


@pytest.mark.parametrize("arch", ARCHS)
def test_page_fault_names_address_client_and_kernel_then_recovers(arch, monkeypatch, tmp_path):
    monkeypatch.setenv("AMDQ_WAIT_TIMEOUT_MS", "5000")
    dev = open_sim(monkeypatch, tmp_path, "SIMPCI", arch)
    try:
        k = dev.load(_cl(arch))["poke"]
        bad = 0x2000_0000_0000 + (15 << 40)                    # in the address window, never mapped
        with pytest.raises(GPUFault) as e:
            k(bad, 7, grid=1, block=64, wait=True)
        msg = str(e.value)
        assert f"{bad:#x}" in msg and "write" in msg and "poke" in msg, msg
        client = e.value.info["client"]
        assert client and client.split()[0] != "shader", client         # the hub's client name, not the sim's
        out = dev.upload(np.zeros(64, np.int32))
        k(out, 5, grid=1, block=64, wait=True)                          # the same device, after recovery
        assert (out.numpy(np.int32) == 5).all()
    finally:
        dev.close()


def _cl(arch: str) -> bytes:
    from clang import compile_cl
    return compile_cl(SRC, arch).read_bytes()
