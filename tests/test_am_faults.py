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


def test_a_waiting_host_thread_sleeps_while_the_gpu_runs(monkeypatch, tmp_path):
    """Device.wait on SIMPCI sleeps on the IH (the simulated MSI) while a long kernel runs: the waiting thread's
    CPU time is a small part of the time it waited. (Interpreted: the kernel's length, > 0.3 s, is the interpreter's;
    the JIT compiles its loop and runs it in less.)"""
    import threading
    import time
    monkeypatch.setenv("AMDQ_SIM_MODE", "async")
    monkeypatch.setenv("AMDQ_SIM_JIT", "0")
    dev = open_sim(monkeypatch, tmp_path, "SIMPCI", "gfx1100")
    try:
        from clang import compile_cl
        src = "__kernel void spin(__global int *o, int n) { int s = 0; for (int k = 0; k < n; k++) s = s * 3 + k;" \
              " o[get_global_id(0)] = s; }"
        k = dev.load(compile_cl(src, "gfx1100").read_bytes())["spin"]
        out = dev.upload(np.zeros(64, np.int32))
        k(out, 10, grid=1, block=64, wait=True)                       # warm: code loaded, queue running
        took = {}

        def waiter():
            t0, c0 = time.monotonic(), time.thread_time()
            k(out, 20_000, grid=1, block=64, wait=True)
            took["wall"], took["cpu"] = time.monotonic() - t0, time.thread_time() - c0
        t = threading.Thread(target=waiter)
        t.start()
        t.join(120)
        assert took["wall"] > 0.3, took                                 # the kernel ran long enough to measure
        assert took["cpu"] < 0.25 * took["wall"], took
    finally:
        dev.close()
