"""Two simulated PCI GPUs in one process and peer memory between them: each function's BAR0 sits at a window of
the simulated PCIe bus (sim/host.py) that its config space reports; a VRAM buffer of device 0 is mapped into
device 1's VM context 0 at the same GPU address (through device 0's BAR0 bus address, or over XGMI between two
gfx942 nodes of one hive, sim/xgmi.py); device 1's GPU reads and writes it (its GMC hub path, its SDMA engine,
its shader core); unmapped or never mapped, device 1's access faults on device 1, never on the owner."""
from __future__ import annotations

import numpy as np
import pytest

import amdq
from amdq.am import peer as P
from amdq.errors import DeviceError, GPUFault
from amdq.iface.pci import PCI
from amdq.sim import host
from amdq.sim.pci.device import SimPCIDevice
from test_graph import AXPY

PAGE = 4096
# (device 0, device 1, XGMI hive or None)
PAIRS = [("gfx1100", "gfx1100", None), ("gfx1100", "gfx1201", None), ("gfx942", "gfx942", "xgmi")]


@pytest.fixture
def boot(tmp_path):
    """boot(arch, xgmi=None, small_bar=False) -> (simulated function, AM interface), each in a state dir of its own."""
    opened = []

    def make(arch, xgmi=None, small_bar=False):
        d = tmp_path / f"dev{len(opened)}"
        dev = SimPCIDevice(arch, small_bar=small_bar, state=str(d), mode="sync",
                           xgmi=f"{xgmi}-{tmp_path.name}" if xgmi else None)
        try:
            iface = PCI(dev, arch, standin=True)
        except BaseException:
            dev.close()
            raise
        opened.append((dev, iface))
        return dev, iface
    yield make
    for dev, iface in reversed(opened):
        iface.close()
        dev.close()


def fault_va(iface) -> int | None:
    """The page address the GFXHUB's fault registers name (None: no fault recorded)."""
    gc = iface.driver.regs.GC
    status = "regGCVM_L2_PROTECTION_FAULT_STATUS"
    if not gc[status if status in gc else status + "_LO32"].read():       # gfx12: a LO32/HI32 pair
        return None
    hi, lo = gc.regGCVM_L2_PROTECTION_FAULT_ADDR_HI32.read(), gc.regGCVM_L2_PROTECTION_FAULT_ADDR_LO32.read()
    return (hi << 32 | lo) << 12


# -- the bus -------------------------------------------------------------------------------------------
def test_each_bar0_has_a_bus_window_its_config_space_reports(boot):
    d0, i0 = boot("gfx1100")
    d1, _ = boot("gfx1201")
    bus = host.host_bus()
    bases = []
    for d in (d0, d1):
        base = d.bar_bus_address(0)
        assert base >= host.MMIO64_BASE and base % (1 << (d.bar_sizes[0] - 1).bit_length()) == 0   # naturally aligned
        # the config-space register (64-bit prefetchable memory BAR) holds the same address
        lo, hi = d.config_read(0x10), d.config_read(0x14)
        assert lo & 0xF == 0xC and (hi << 32 | lo & ~0xF) == base
        assert P.bar_bus_address(_ConfigOnly(d), 0) == base                      # the driver's decode of it
        w = bus.window(base)
        assert w.size == d.bar_sizes[0] and w.arena is d.gpu.vram
        bases.append(base)
    assert bases[0] != bases[1]
    # a DMA into the window reaches the owner's VRAM, while it decodes memory
    d0.vram[0x3000:0x3004] = b"bar0"
    arena, off = bus.resolve(bases[0] + 0x3000, 4)
    assert arena is d0.gpu.vram and arena.read(off, 4) == b"bar0"
    d0.config_write(4, 2, d0.config_read(4, 2) & ~0x2)                             # memory space off
    assert bus.resolve(bases[0] + 0x3000, 4) is None
    d0.config_write(4, 2, d0.config_read(4, 2) | 0x2)
    d0.config_write(0x10, 4, 0xFFFFFFFF)                                           # assigned BARs are read-only here
    assert d0.bar_bus_address(0) == bases[0]
    assert bus.resolve(host.HOST_BYTES + 4096, 8) is None                         # nothing there


class _ConfigOnly:
    """A function that can only be asked its config space (what the driver decodes without bar_bus_address)."""

    def __init__(self, dev):
        self.config_read = dev.config_read


def test_a_real_function_reports_its_bar_start_from_sysfs(tmp_path):
    from fake_sysfs import fake_function
    from amdq.iface.pci import SysfsFunction, list_functions
    fake_function(tmp_path / "devices")
    fn = SysfsFunction(list_functions(str(tmp_path / "devices"))[0])
    try:
        assert fn.bar_bus_address(0) == 0xE000_0000 and fn.bar_bus_address(2) == 0xE200_0000
        assert fn.bar_bus_address(1) == 0                                          # not assigned
        assert P.bar_bus_address(fn, 0) == 0xE000_0000
    finally:
        fn.close()


def test_closing_a_function_takes_its_window_off_the_bus(tmp_path):
    dev = SimPCIDevice("gfx1100", state=str(tmp_path), mode="sync")
    base = dev.bar_bus_address(0)
    assert host.host_bus().window(base) is not None
    dev.close()
    assert host.host_bus().window(base) is None


# -- peer mappings through the AM driver ----------------------------------------------------------------
@pytest.mark.parametrize("a0,a1,hive", PAIRS)
def test_peer_vram_is_mapped_at_the_same_va_and_device1_reads_and_writes_it(boot, a0, a1, hive):
    d0, i0 = boot(a0, hive)
    d1, i1 = boot(a1, hive)
    a = i0.alloc(3 * PAGE, "vram")
    a.cpu.mv[PAGE:PAGE + 8] = b"dev0data"
    m = i1.map_peer(i0, a)
    assert m.va == a.va and m.kind == "peer" and m.cpu is None
    leaf = i1.memory.vm.lookup(a.va)
    flags = i1.memory.vm.flags_of(leaf.entry)
    off = a.meta["vram_offset"]
    if hive:                                       # XGMI: the peer's physical address in the hive, not SYSTEM
        g0 = i0.driver.blocks["gmc"]
        assert m.meta["via"] == "xgmi" and leaf.pa == g0.vram_base + off
        assert not flags.system and flags.snooped
    else:                                          # PCIe: the peer's BAR0 bus address, SYSTEM without SNOOPED
        assert m.meta["via"] == "pcie" and leaf.pa == d0.bar_bus_address(0) + off
        assert flags.system and not flags.snooped
    gmc1 = d1.parts["gmc"]
    assert gmc1.read("GC", a.va + PAGE, 8) == b"dev0data"                   # device 1's GFXHUB, device 0's VRAM
    gmc1.write("GC", a.va + 2 * PAGE + 16, b"fromdev1")
    assert bytes(a.cpu.mv[2 * PAGE + 16:2 * PAGE + 24]) == b"fromdev1"
    assert gmc1.read("MM", a.va + PAGE, 8) == b"dev0data"                   # and its MMHUB
    assert fault_va(i1) is None and fault_va(i0) is None
    with pytest.raises(DeviceError, match="already"):
        i1.map_peer(i0, a)


@pytest.mark.parametrize("a0,a1,hive", PAIRS)
def test_unmapping_makes_device1_fault_on_device1(boot, a0, a1, hive):
    d0, i0 = boot(a0, hive)
    d1, i1 = boot(a1, hive)
    a = i0.alloc(PAGE, "vram")
    a.cpu.mv[:4] = b"live"
    m = i1.map_peer(i0, a)
    assert d1.parts["gmc"].read("GC", a.va, 4) == b"live"                  # cached in device 1's TLBs now
    i1.unmap_peer(m)
    assert d1.gpu.vm(0).walk(a.va) is None
    assert d1.parts["gmc"].read("GC", a.va, 4) == bytes(4)                 # the default page, as VM0 asks
    assert fault_va(i1) == a.va                                             # device 1's registers name the VA
    assert fault_va(i0) is None                                             # the owner saw nothing
    assert bytes(a.cpu.mv[:4]) == b"live"
    with pytest.raises(DeviceError, match="not a peer mapping"):
        i1.unmap_peer(m)


@pytest.mark.parametrize("a0,a1,hive", PAIRS)
def test_a_peer_buffer_never_mapped_faults_on_the_device_that_reaches_for_it(boot, a0, a1, hive):
    d0, i0 = boot(a0, hive)
    d1, i1 = boot(a1, hive)
    a = i0.alloc(PAGE, "vram")
    a.cpu.mv[:4] = b"mine"
    assert d0.parts["gmc"].read("GC", a.va, 4) == b"mine"
    assert d1.parts["gmc"].read("GC", a.va, 4) == bytes(4)
    assert fault_va(i1) == a.va and fault_va(i0) is None


def test_freeing_the_buffer_takes_the_peer_mappings_down_first(boot):
    d0, i0 = boot("gfx1100")
    d1, i1 = boot("gfx1100")
    a = i0.alloc(PAGE, "vram")
    m = i1.map_peer(i0, a)
    i0.free(a)
    assert d1.gpu.vm(0).walk(a.va) is None and a.va not in i1.memory.peers
    i1.unmap_peer(m)                                                        # already down: nothing to do
    with pytest.raises(DeviceError, match="not a live allocation"):
        i1.map_peer(i0, a)


def test_host_memory_of_a_peer_is_mapped_at_its_bus_address(boot):
    d0, i0 = boot("gfx1100")
    d1, i1 = boot("gfx1201")
    h = i0.alloc(PAGE, "gtt")
    h.cpu.mv[:8] = b"hostpage"
    m = i1.map_peer(i0, h)
    assert m.meta["via"] == "host" and i1.memory.vm.lookup(h.va).pa == h.meta["bus"]
    assert d1.parts["gmc"].read("GC", h.va, 8) == b"hostpage"


def test_pcie_reaches_only_vram_under_the_peer_bar():
    """A small BAR (or a buffer above it) has no bus address: the route refuses (a small-BAR boot is slow here)."""
    bar, size = 256 << 20, PAGE
    r = P.route(None, None, 0, bar - size, size, 0x100_0000_0000, bar)
    assert r.via == "pcie" and r.pa == 0x100_0000_0000 + bar - size and r.flags.system and not r.flags.snooped
    with pytest.raises(DeviceError, match="beyond the peer's"):
        P.route(None, None, 0, bar, size, 0x100_0000_0000, bar)
    with pytest.raises(DeviceError, match="no bus address"):
        P.route(None, None, 0, 0, size, None, bar)
    hive = P.XGMI(0, 2, 1 << 38), P.XGMI(1, 2, 1 << 38)
    r = P.route(hive[1], hive[0], 0, 0x5000, size, None, 0)               # XGMI needs no BAR
    assert r.via == "xgmi" and r.pa == 0x5000 and not r.flags.system


def test_a_refused_mapping_leaves_nothing_behind(boot):
    d0, i0 = boot("gfx1100")
    d1, i1 = boot("gfx1100")
    a = i0.alloc(PAGE, "vram")
    with pytest.raises(DeviceError, match="not nodes of one XGMI hive"):
        i1.map_peer(i0, a, via="xgmi")
    assert a.va not in i0.memory.exported and a.va not in i1.memory.peers
    assert i1.memory.vm.lookup(a.va) is None
    with pytest.raises(DeviceError, match="this device's own"):
        i0.map_peer(i0, a)


def test_xgmi_nodes_place_their_vram_in_the_hive(boot):
    d0, i0 = boot("gfx942", "hive")
    d1, i1 = boot("gfx942", "hive")
    g0, g1 = i0.driver.blocks["gmc"], i1.driver.blocks["gmc"]
    assert (g0.xgmi.node, g1.xgmi.node) == (0, 1) and g0.xgmi.nodes == 2
    assert g1.vram_base == g1.xgmi.segment and g0.vram_base == 0       # vram_base_offset += node id * segment
    own = i1.alloc(PAGE, "vram")                                       # node 1's own pages: at its hive address
    own.cpu.mv[:4] = b"own1"
    assert i1.memory.vm.lookup(own.va).pa == g1.vram_base + own.meta["vram_offset"]
    assert d1.parts["gmc"].read("GC", own.va, 4) == b"own1"
    a = i0.alloc(PAGE, "vram")                                         # forced over PCIe: the BAR route works too
    a.cpu.mv[:4] = b"pcie"
    m = i1.map_peer(i0, a, via="pcie")
    assert m.meta["via"] == "pcie" and d1.parts["gmc"].read("GC", a.va, 4) == b"pcie"
    d2, i2 = boot("gfx942")                                            # not in the hive: no XGMI route to it
    assert i2.driver.blocks["gmc"].xgmi is None
    b = i2.alloc(PAGE, "vram")
    with pytest.raises(DeviceError, match="not nodes of one XGMI hive"):
        i1.map_peer(i2, b, via="xgmi")
    assert i1.map_peer(i2, b).meta["via"] == "pcie"


def test_a_third_node_does_not_fit_a_two_node_hive(boot, tmp_path):
    boot("gfx942", "full")
    boot("gfx942", "full")
    with pytest.raises(DeviceError, match="has all its 2 nodes"):
        SimPCIDevice("gfx942", state=str(tmp_path / "third"), mode="sync", xgmi=f"full-{tmp_path.name}")
    with pytest.raises(DeviceError, match="no XGMI"):
        SimPCIDevice("gfx1100", state=str(tmp_path / "navi"), mode="sync", xgmi="any")


# -- the runtime: copies on device 1's SDMA queue, a kernel on device 1 ----------------------------------
@pytest.fixture
def devices(tmp_path, monkeypatch):
    opened = []

    def make(spec, hive=None):
        monkeypatch.setenv("AMDQ_SIM_STATE", str(tmp_path / f"rt{len(opened)}"))
        if hive:
            monkeypatch.setenv("AMDQ_SIM_XGMI", f"{hive}-{tmp_path.name}")
        else:
            monkeypatch.delenv("AMDQ_SIM_XGMI", raising=False)
        d = amdq.open_device(spec)
        opened.append(d)
        return d
    monkeypatch.delenv("AMD_DISABLE_SDMA", raising=False)
    yield make
    for d in reversed(opened):
        d.close()


@pytest.mark.parametrize("a0,a1,hive", PAIRS)
def test_device1_copies_from_and_to_a_buffer_of_device0(devices, a0, a1, hive):
    dev0, dev1 = devices(f"SIMPCI+AMD:{a0}", hive), devices(f"SIMPCI+AMD:{a1}", hive)
    n = 4096
    x = np.arange(n, dtype=np.float32)
    b0 = dev0.upload(x)
    dev0.synchronize()                                      # the owner's writes are done before a peer reads
    p = dev1.map_peer(b0)
    assert p.addr == b0.addr and p.dev is dev1
    dst = dev1.alloc(x.nbytes)
    dev1.copy(dst, p, x.nbytes, wait=True)                  # device 1's SDMA engine reads device 0's VRAM
    assert np.array_equal(dst.numpy(np.float32), x)
    src = dev1.upload(-x)
    dev1.copy(p, src, x.nbytes, wait=True)                  # and writes it
    assert np.array_equal(b0.numpy(np.float32), -x)
    assert np.array_equal(p.numpy(np.float32), -x)          # read back through device 1 (SDMA to its staging)
    # device 1's shader core reads the peer buffer too: y += 2 x
    k = dev1.load(amdq.compile(AXPY, dev1.arch))["axpy"]
    y = dev1.upload(np.ones(n, np.float32))
    k(y, p, 2.0, grid=(n // 64, 1, 1), block=(64, 1, 1), wait=True)
    assert np.array_equal(y.numpy(np.float32), 1 - 2 * x)
    dev1.unmap_peer(p)
    with pytest.raises(amdq.errors.InvalidArgument, match="freed"):
        p.addr


def test_an_sdma_copy_from_an_unmapped_peer_buffer_faults_on_device1(devices):
    dev0, dev1 = devices("SIMPCI+AMD:gfx1100"), devices("SIMPCI+AMD:gfx1100")
    b0 = dev0.upload(np.arange(1024, dtype=np.uint32))
    dev0.synchronize()
    p = dev1.map_peer(b0)
    dst = dev1.alloc(4096)
    dev1.copy(dst, p, 4096, wait=True)
    dev1.iface.unmap_peer(p.alloc)                          # the mapping goes under the Buffer's feet
    with pytest.raises(GPUFault) as e:
        dev1.copy(dst, p, 4096, wait=True)
    assert e.value.address == b0.addr and "SDMA" in str(e.value)
    assert np.array_equal(b0.numpy(np.uint32), np.arange(1024, dtype=np.uint32))   # the owner carries on
    assert fault_va(dev0.iface) is None


def test_map_peer_refuses_what_it_cannot_map(devices):
    dev0, dev1 = devices("SIMPCI+AMD:gfx1100"), devices("SIMPCI+AMD:gfx1201")
    b1 = dev1.alloc(4096)
    with pytest.raises(amdq.errors.InvalidArgument, match="this device already"):
        dev1.map_peer(b1)
    with pytest.raises(amdq.errors.InvalidArgument, match="map_peer returned"):
        dev1.unmap_peer(b1)
    b0 = dev0.alloc(4096)
    p = dev1.map_peer(b0)
    b0.free()
    dev0.synchronize()
    dev0.alloc(4096)                                        # the freed buffer's deferred free runs: mapping down
    assert dev1.iface.driver.blocks["gmc"].vm.lookup(p.alloc.va) is None


def test_a_node_that_comes_back_with_another_id_retargets_its_vm(tmp_path):
    """A partial boot of an XGMI node under another node id (the hive's GPUs came up in another order) moves
    VM context 0's root and default pages to the new VRAM base."""
    name = f"order-{tmp_path.name}"

    def up(d):
        dev = SimPCIDevice("gfx942", state=str(tmp_path / d), mode="sync", xgmi=name)
        return dev, PCI(dev, "gfx942", standin=True)
    first = [up("a"), up("b")]
    assert [d.node for d, _ in first] == [0, 1]
    for dev, iface in reversed(first):
        iface.close()
        dev.close()
    (db, ib), (da, ia) = up("b"), up("a")                  # b first now: node 0
    try:
        assert (db.node, ib.report.kind) == (0, "partial") and ib.driver.blocks["gmc"].vram_base == 0
        for dev, iface in ((db, ib), (da, ia)):
            a = iface.alloc(PAGE, "vram")
            a.cpu.mv[:4] = b"node"
            assert dev.parts["gmc"].read("GC", a.va, 4) == b"node" and fault_va(iface) is None
        m = ia.map_peer(ib, ib.alloc(PAGE, "vram"))
        assert m.meta["via"] == "xgmi"
    finally:
        for dev, iface in ((da, ia), (db, ib)):
            iface.close()
            dev.close()
