"""The AM driver's boot on the simulated PCI function: every boot path per target, state across processes,
mode1 reset, discovery read back from VRAM, AM_DEBUG=4, the PCI interface against a fake sysfs tree; the
real PSP, SMU, GMC and IH blocks on both sides."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from amdq.am import driver as drv
from amdq.am.driver import AMDriver, DRIVER_VERSION, SESSION_CLEAN
from amdq.errors import AMBootError, DeviceError
from amdq.hw import discovery as D
from amdq.iface import pci
from amdq.sim.pci.device import SimPCIDevice
from fake_sysfs import fake_function
from sims import am_env

ARCHS = ("gfx1100", "gfx1201", "gfx942")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    am_env(monkeypatch, tmp_path)


def boot(arch: str, fini: bool = True, small_bar: bool = False, inject: list | None = None):
    """Power the simulated function on (with its saved state), boot it, optionally fini; (device, iface)."""
    dev = SimPCIDevice(arch, small_bar=small_bar, mode="sync")
    for kind, params in inject or ():
        dev.inject(kind, **params)
    dev._inject_boot()
    iface = pci.PCI(dev, arch, standin=True)
    if fini:
        iface.close()
        dev.close()
    return dev, iface


@pytest.mark.parametrize("arch", ARCHS)
def test_full_partial_unclean(arch):
    _, a = boot(arch)
    assert (a.report.kind, a.report.reason, a.report.mode1_reset) == ("full", "uninitialised", False)
    tmr_full = a.driver.am.boot.entries["psp_km_ring"]
    _, b = boot(arch, fini=False)
    assert (b.report.kind, b.report.reason) == ("partial", "initialised by this driver")
    assert b.driver.am.boot.entries["psp_km_ring"] == tmr_full   # the boot memory of the full boot, reused
    assert b.driver.am.tmr_size == a.driver.am.tmr_size             # from SCRATCH_REG5
    assert (a.driver.am.tmr_size > 0) == (arch == "gfx1100")        # gfx1201/gfx942: the boot firmware's TMR
    assert b.driver.regs.GC.regSCRATCH_REG6.read() == 0             # a session runs
    full_n = a.report.reads + a.report.writes
    assert b.report.reads + b.report.writes < full_n
    b.fn.close()                                                    # gone without fini: REG6 stays unclean
    dev, c = boot(arch)
    assert c.report.kind == "full" and c.report.mode1_reset
    assert c.report.reason == "the previous session did not end cleanly (SCRATCH_REG6=0x0)"
    assert dev.resets == 1


@pytest.mark.parametrize("arch", ARCHS)
def test_amdgpu_initialised_gets_mode1_reset(arch):
    dev, a = boot(arch, inject=[("amdgpu_initialised", {})])
    assert (a.report.kind, a.report.reason, a.report.mode1_reset) == ("full", "initialised by amdgpu", True)
    assert dev.resets == 1


@pytest.mark.parametrize("arch", ARCHS)
def test_am_reset_forces_full(arch, monkeypatch):
    boot(arch)
    monkeypatch.setenv("AM_RESET", "1")
    dev, a = boot(arch)
    assert (a.report.kind, a.report.reason, a.report.mode1_reset) == ("full", "AM_RESET=1", True)
    monkeypatch.setenv("AM_RESET", "0")
    _, b = boot(arch)
    assert b.report.kind == "partial"


def test_dirty_scratch_is_not_trusted():
    _, a = boot("gfx1100", inject=[("dirty_scratch", {"reg7": DRIVER_VERSION, "reg6": SESSION_CLEAN, "reg5": 0})])
    assert a.report.kind == "full"
    assert a.report.reason == "SCRATCH_REG7 names this driver but the PSP's sOS is not running"
    _, b = boot("gfx1201", inject=[("dirty_scratch", {"reg7": 0x12345678, "reg6": 7})])
    assert (b.report.kind, b.report.reason) == ("full", "uninitialised (SCRATCH_REG7=0x12345678 is not this driver's)")


def test_mode1_reset_really_clears():
    dev = SimPCIDevice("gfx1100", mode="sync")
    top = D.vram_offset(dev.vram_size)
    dev.vram[top - 4096:top - 4092] = b"junk"
    dev.raw.GC.regSCRATCH_REG7.write(0x55)
    dev.gfx.loaded.add(8)
    dev.mode1_reset()
    assert bytes(dev.vram[top - 4096:top - 4092]) == bytes(4)
    assert dev.raw.GC.regSCRATCH_REG7.read() == 0 and not dev.gfx.loaded
    assert D.decode(bytes(dev.vram[top:top + D.TMR_SIZE])) == D.decode(D.encode(D.for_target(dev.target)))
    assert dev.raw.GC.regCP_MEC_RS64_CNTL.read_fields()["MEC_HALT"] == 1
    dev.close()


def test_rlc_autoload_needs_the_firmware():
    dev = SimPCIDevice("gfx1100", mode="sync", persist=False)
    st = dev.raw.GC.regRLC_RLCS_BOOTLOAD_STATUS
    assert not dev.autoload_rlc() and st.read() == 0
    dev.firmware_loaded(8, b"")
    assert not dev.autoload_rlc() and st.read() == 0                  # the IMU is missing still
    dev.firmware_loaded(0x44, b""), dev.firmware_loaded(0x45, b"")
    assert dev.autoload_rlc() and st.read_fields()["BOOTLOAD_COMPLETE"] == 1
    dev.close()


@pytest.mark.parametrize("arch", ARCHS)
def test_discovery_from_simulated_vram(arch):
    dev = SimPCIDevice(arch, mode="sync", persist=False, small_bar=True)
    dev.config_write(4, 2, 6)
    d = AMDriver(dev.bar(5), dev.bar(0), dev.bar_sizes[5], standin=True)   # small BAR: through the MM window
    assert dev.bar_sizes[0] < dev.vram_size
    assert d.discovery == D.decode(D.encode(D.for_target(dev.target)))
    assert d.target.arch == arch and d.vram.size == dev.vram_size
    off = D.vram_offset(dev.vram_size)
    assert d.vram.read(off, 64) == bytes(dev.vram[off:off + 64])
    dev.close()


def test_small_bar_boot():
    _, a = boot("gfx1100", small_bar=True)
    assert a.report.kind == "full" and a.info()["small_bar"]


def test_disabled_function_reads_all_ones():
    dev = SimPCIDevice("gfx1100", mode="sync", persist=False)
    assert dev.bar(5).read32(D.REG_RCC_CONFIG_MEMSIZE) == 0xFFFFFFFF
    with pytest.raises(AMBootError, match="0xffffffff"):
        AMDriver(dev.bar(5), dev.bar(0), dev.bar_sizes[5])
    dev.close()


def test_am_debug_4_names_registers(monkeypatch, capfd):
    monkeypatch.setenv("AM_DEBUG", "4")
    boot("gfx1100")
    err = capfd.readouterr().err
    assert "W GC.regSCRATCH_REG6 @0x" in err and "R GC.regRLC_RLCS_BOOTLOAD_STATUS" in err
    assert "BOOTLOAD_COMPLETE=1" in err and "am: boot: full (uninitialised)" in err


def test_missing_blocks_are_named(monkeypatch):
    real = drv.block_class
    monkeypatch.setattr(drv, "block_class", lambda n: None if n == "psp" else real(n))
    dev = SimPCIDevice("gfx1100", mode="sync", persist=False)
    with pytest.raises(AMBootError, match=r"the IP blocks psp \(amdq/am/\{psp\}.py\) are not in it"):
        pci.PCI(dev, standin=True)
    dev.close()


def test_state_file_lock(tmp_path):
    dev = SimPCIDevice("gfx1100", mode="sync")
    with pytest.raises(DeviceError, match="in use by another process"):
        SimPCIDevice("gfx1100", mode="sync")
    dev.close()


# --- processes in a row ------------------------------------------------------------------------------------
SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    sys.path.insert(0, {tests!r})
    import amdq
    d = amdq.open_device("SIMPCI+AMD:{arch}")
    print(json.dumps(d.info()["boot_reason"]), flush=True)
    if os.environ.get("HANG"):
        time.sleep(60)
    d.close()
""")


def _proc(arch: str, **env):
    e = dict(os.environ, PYTHONPATH=ROOT, **env)
    return subprocess.Popen([sys.executable, "-c", SCRIPT.format(tests=HERE, arch=arch)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=e)


@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
def test_two_processes_then_a_killed_one(arch):
    outs = []
    for _ in range(2):
        p = _proc(arch)
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(json.loads(out.splitlines()[-1]))
    assert outs == ["full: uninitialised", "partial: initialised by this driver"]
    p = _proc(arch, HANG="1")
    line = p.stdout.readline()
    assert json.loads(line) == "partial: initialised by this driver"
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    p = _proc(arch)
    out, err = p.communicate(timeout=120)
    assert json.loads(out.splitlines()[-1]) == "full: the previous session did not end cleanly (SCRATCH_REG6=0x0)"


# --- the interface and the CLI ------------------------------------------------------------------------------
def test_open_device_simpci_info_and_a_buffer():
    import amdq
    d = amdq.open_device("SIMPCI+AMD:gfx1201")
    info = d.info()
    assert info["boot"] == "full" and info["ip_versions"]["GC"] == "12.0.1" and info["bars"]["BAR0"] == 16 << 30
    assert info["queue"] == "compute" and info["compute_units"] == 64
    b = d.upload(bytes(range(16)))
    assert b.read(16) == bytes(range(16))
    d.close()
    d = amdq.open_device("SIMPCI+AMD:gfx1201")
    assert d.info()["boot_reason"] == "partial: initialised by this driver"
    d.close()


def test_cli_info_json(capsys):
    from amdq.cli import main
    assert main(["info", "--device", "SIMPCI+AMD:gfx942", "--json"]) == 0
    (e,) = json.loads(capsys.readouterr().out)
    assert e["device"] == "SIMPCI+AMD:gfx942" and e["interface"] == "SIMPCI" and e["arch"] == "gfx942"
    assert e["ip_versions"]["GC"] == "9.4.3" and e["boot"] == "full" and e["boot_reason"] == "full: uninitialised"
    files = {f["file"] for f in e["firmware"]}
    assert "gc_9_4_3_mec.bin" in files and all(len(f["sha256"]) == 64 for f in e["firmware"])


def test_parse_specs():
    from amdq.runtime.device import parse_spec
    assert parse_spec("PCI+AMD") == ("PCI", None)
    assert parse_spec("SIMPCI+AMD:gfx1100") == ("SIMPCI", "gfx1100")


def test_sysfs_discovery_and_refusal(tmp_path):
    root = tmp_path / "devices"
    fake_function(root, "0000:03:00.0", driver="amdgpu")
    fake_function(root, "0000:04:00.0")
    fake_function(root, "0000:05:00.0", vendor="0x10de")                  # not AMD
    fake_function(root, "0000:06:00.0", cls="0x020000")                   # AMD, but a network function
    fns = pci.list_functions(str(root))
    assert [(f.address, f.driver) for f in fns] == [("0000:03:00.0", "amdgpu"), ("0000:04:00.0", None)]
    with pytest.raises(DeviceError, match="modprobe -r amdgpu"):
        pci.SysfsFunction(fns[0])
    fn = pci.SysfsFunction(pci.usable(fns)[0])
    assert fn.bar_sizes[0] == 1 << 20 and fn.bar_sizes[5] == 1 << 16
    fn.enable()
    assert (root / "0000:04:00.0" / "enable").read_text() == "1"
    assert fn.config_read(0, 2) == 0x1002 and fn.config_read(4, 2) & (pci.CMD_MEMORY | pci.CMD_MASTER) == 6
    mmio = fn.bar(5)
    mmio.write32(0x10, 0xDEADBEEF)
    fn.close()
    data = (root / "0000:04:00.0" / "resource5").read_bytes()
    assert data[0x40:0x44] == (0xDEADBEEF).to_bytes(4, "little")


def test_pci_requested_without_a_function(tmp_path, monkeypatch):
    import amdq
    monkeypatch.setenv("AMDQ_SYSFS_PCI", str(tmp_path))
    with pytest.raises(DeviceError, match="no AMD display or compute function"):
        amdq.open_device("PCI+AMD")
