"""The AM driver's PSP block (amdq/am/psp.py) against the simulated PSP (amdq/sim/pci/psp.py).

A small self-contained device: the target's register layout, a RegisterFile holding the simulated PSP's
handlers, VRAM as a bytearray behind a frame-buffer aperture (MC address = FB base + offset; anything else
is a GPU fault), and an AMContext for the driver with the boot region allocated top-down by name. Runs
with the real firmware files where present (skipped with the reason otherwise) and with stand-ins.
"""
from __future__ import annotations

import struct
import time
import zlib
from dataclasses import replace

import pytest

from amdq.am import firmware as F
from amdq.am.ip import Region
from amdq.am.psp import PSP
from amdq.errors import DeviceError, FirmwareRefused, GPUFault, GPUTimeout, PSPError
from amdq.hw import am as A
from amdq.hw import psp as P
from amdq.hw.regmap import Layout, Registers
from amdq.hw.targets import get_target
from amdq.sim.inject import Injector
from amdq.sim.pci.psp import INJECT_KINDS, SIM_TOC_TMR_SIZE, SimPSP
from amdq.sim.regfile import RegisterFile

ARCHS = ("gfx1100", "gfx1201", "gfx942")
FB_BASE = 0x80_0000_0000            # the fixture's choice of frame-buffer aperture base
VRAM_SIZE = 96 << 20


class Dev:
    """The SimDevice side: what the simulated PSP may reach."""

    def __init__(self, arch: str, vram: bytearray):
        self.target = get_target(arch)
        self.vram = vram
        self.inject = Injector(None, kinds=INJECT_KINDS)
        self.raw = None

    def _off(self, addr: int, n: int) -> int:
        off = addr - FB_BASE
        if not (0 <= off and off + n <= len(self.vram)):
            raise GPUFault(f"MC address {addr:#x}+{n:#x} is outside the frame buffer", address=addr)
        return off

    def mc_read(self, addr: int, n: int) -> bytes:
        off = self._off(addr, n)
        return bytes(self.vram[off: off + n])

    def mc_write(self, addr: int, data: bytes) -> None:
        off = self._off(addr, len(data))
        self.vram[off: off + len(data)] = data

    def interrupt(self, client_id, src_id, src_data=()):
        pass

    def clock_ns(self) -> int:
        return time.monotonic_ns()


class VRAM:
    def __init__(self, buf: bytearray):
        self.buf, self.size = buf, len(buf)

    def read(self, off: int, n: int) -> bytes:
        return bytes(self.buf[off: off + n])

    def write(self, off: int, data: bytes) -> None:
        self.buf[off: off + len(data)] = data


class Boot:
    """Top-down boot region below 64 KiB of discovery table; a name keeps its placement across boots."""

    def __init__(self, size: int, places: dict):
        self.top, self.places = size - (64 << 10), places

    def reserve(self, name: str, size: int, align: int = 4096) -> Region:
        if name in self.places and self.places[name][1] == size:
            off = self.places[name][0]
        else:
            low = min([o for o, _ in self.places.values()] + [self.top])
            off = (low - size) // align * align
            self.places[name] = (off, size)
        return Region(name, off, size, FB_BASE + off)


class Ctx:
    def __init__(self, arch, regs, vram, places, fws):
        self.target = get_target(arch)
        self.regs, self.vram, self.boot, self.debug = regs, VRAM(vram), Boot(len(vram), places), 0
        self.discovery = None
        self.fws = fws
        self.logs: list[str] = []

    def firmware(self, file: str):
        return self.fws[file]

    def mc(self, off: int) -> int:
        return FB_BASE + off

    def log(self, level: int, msg: str) -> None:
        self.logs.append(msg)

    def wait(self, done, timeout_ms, what):
        end = time.monotonic() + timeout_ms / 1000
        while not done():
            if time.monotonic() > end:
                raise GPUTimeout(f"timed out after {timeout_ms:g} ms waiting for {what}")
            time.sleep(0.0005)


class Machine:
    """One 'process' on one device: register file + simulated PSP + driver context. `vram` and `places`
    outlive it (the GPU's memory and the boot region's layout), `state` is the PSP's state file."""

    def __init__(self, arch: str, fws: dict, vram: bytearray | None = None, places: dict | None = None,
                 state: dict | None = None):
        self.arch = arch
        self.vram = vram if vram is not None else bytearray(VRAM_SIZE)
        self.places = places if places is not None else {}
        self.dev = Dev(arch, self.vram)
        layout = Layout.for_target(self.dev.target)
        self.sim = SimPSP(self.dev)
        self.rf = RegisterFile(layout, self.sim)
        self.dev.raw = self.rf.raw
        self.sim.reset()
        if state is not None:
            self.sim.load(state)
        self.accesses: list = []
        self.regs = Registers(layout, self.rf, tracer=self.accesses.append)
        self.ctx = Ctx(arch, self.regs, self.vram, self.places, fws)
        self.psp = PSP(self.ctx)
        self.psp.bl_timeout_ms = self.psp.cmd_timeout_ms = 150

    def next_process(self, fws=None) -> "Machine":
        return Machine(self.arch, fws or self.ctx.fws, self.vram, self.places, self.sim.save())


def _real_available(arch: str) -> bool:
    try:
        F.firmware_for(arch, standin=False)
        return True
    except F.FirmwareMissing:
        return False


_FW_CACHE: dict = {}


def firmware(arch: str, kind: str) -> dict:
    if (arch, kind) not in _FW_CACHE:
        if kind == "real" and not _real_available(arch):
            pytest.skip(f"real firmware for {arch} not installed (scripts/fetch_firmware.sh)")
        _FW_CACHE[(arch, kind)] = F.firmware_for(arch, standin=(kind == "standin") or False)
    return dict(_FW_CACHE[(arch, kind)])


def psp_file(arch: str, what: str) -> str:
    mp0 = get_target(arch).ip["MP0"]
    return f"psp_{mp0[0]}_{mp0[1]}_{mp0[2]}_{what}.bin"


def corrupt(fw, part_name: str, at: int | None = None, data: bytes = b"XXXX", components: bool = False):
    """The same file with bytes of one part replaced and the common header's crc32 fixed up, so the file
    still parses: only what the PSP reads of the part is wrong. By default the image header's signature
    ("$PS1" at 0x10 of a signed image, the marker at 0 of a stand-in) is overwritten."""
    raw = bytearray(fw.raw)
    parts = list(fw.components) if components else list(fw.parts.values())
    p = next(p for p in parts if p.name == part_name)
    if at is None:
        at = 0 if p.data.startswith(P.STANDIN_MAGIC) else 0x10
    raw[p.offset + at: p.offset + at + len(data)] = data
    struct.pack_into("<I", raw, 28, zlib.crc32(bytes(raw[32:])))
    return F.parse_firmware(bytes(raw), fw.file)


KINDS = ("real", "standin")


# ---------------------------------------------------------------------------------------------------------
def test_standin_marker_is_the_generators():
    assert P.STANDIN_MAGIC == F.STANDIN_MAGIC


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("arch", ARCHS)
def test_full_bringup(arch, kind):
    m = Machine(arch, firmware(arch, kind))
    m.psp.init_sw()
    m.psp.init_hw()
    sim, psp, v = m.sim, m.psp, P.version(get_target(arch).ip["MP0"])
    # bootloader: the SOS bundle's components in psp_hw_start order, then the sOS runs
    expect = [n for n, _ in P.BL_ORDER if n in psp.components and n in v.loaders]
    assert sim.bootloaded == expect and expect[-1] == "sos" and "sys_drv" in expect
    assert sim.sos_alive and psp.sos_alive and not sim.faults, sim.faults
    # each component went through the 1 MiB-aligned buffer: MC >> 20 in C2PMSG_36
    assert psp.fw_pri.mc % P.BL_BUFFER_SIZE == 0
    bl_addr = [a.value for a in m.accesses if a.op == "W" and a.reg is not None
               and a.reg.name == P.reg(psp.mp0, P.C2PMSG_BL_ADDR)]
    assert bl_addr == [psp.fw_pri.mc >> 20] * len(expect)
    # ring at the MC address the driver gave
    assert sim.ring == {"addr": psp.ring.mc, "size": P.KM_RING_SIZE}
    names = [c for c, st in sim.commands]
    assert all(st == P.TEE_SUCCESS for _, st in sim.commands)
    # TMR: the driver's on 13.0.0 (size from LOAD_TOC), the boot firmware's on 14.0.3 / 13.0.6
    if arch == "gfx1100":
        assert names[0] == "LOAD_TOC" and psp.tmr_size == SIM_TOC_TMR_SIZE
        assert sim.tmr["mc"] == psp.tmr.mc and sim.tmr["size"] == psp.tmr.size == SIM_TOC_TMR_SIZE
        assert psp.tmr.mc % P.PSP_TMR_ALIGNMENT == 0 and sim.tmr["system_pa"] == psp.tmr.offset
    else:
        assert "LOAD_TOC" not in names and psp.tmr is None and psp.tmr_size == 0 and sim.tmr["boot_time"]
    # firmware, typed as amdgpu types it, in AMDGPU_UCODE_ID order
    loaded = [ld.fw_type for ld in psp.loaded]
    assert set(loaded) | ({A.GFX_FW_TYPE_REG_LIST} if psp.rl is not None else set()) == set(sim.loaded_types)
    assert all(sim.loaded(t) for t in loaded)
    assert [ld.ucode_id for ld in psp.loaded if ld.fw_type != A.GFX_FW_TYPE_SMU] == sorted(
        ld.ucode_id for ld in psp.loaded if ld.fw_type != A.GFX_FW_TYPE_SMU)
    assert A.GFX_FW_TYPE_RLC_G in loaded
    if arch == "gfx942":
        assert {A.GFX_FW_TYPE_CP_MEC, A.GFX_FW_TYPE_CP_MEC_ME1, A.GFX_FW_TYPE_SDMA0} <= set(loaded)
        assert A.GFX_FW_TYPE_SMU not in loaded and not sim.autoload and "AUTOLOAD_RLC" not in names
    else:
        assert {A.GFX_FW_TYPE_RS64_MEC, A.GFX_FW_TYPE_RS64_MEC_P3_STACK, A.GFX_FW_TYPE_RS64_PFP,
                A.GFX_FW_TYPE_RS64_ME, A.GFX_FW_TYPE_IMU_I, A.GFX_FW_TYPE_IMU_D, A.GFX_FW_TYPE_SDMA_UCODE_TH0,
                A.GFX_FW_TYPE_SMU} <= set(loaded)
        before = names[:names.index("AUTOLOAD_RLC")]      # AUTOLOAD_RLC right after RLC_G
        assert sim.autoload and before.count("LOAD_IP_FW") == loaded.index(A.GFX_FW_TYPE_RLC_G) + 1
        assert before[-1] == "LOAD_IP_FW"
        smu_at = names.index("LOAD_IP_FW") if loaded[0] == A.GFX_FW_TYPE_SMU else None
        if arch == "gfx1100":     # PMFW before SETUP_TMR (C-state management centralised to PMFW)
            assert loaded[0] == A.GFX_FW_TYPE_SMU and smu_at < names.index("SETUP_TMR")
        else:                     # the first IP firmware after SETUP_TMR
            assert loaded[0] == A.GFX_FW_TYPE_SMU and smu_at > names.index("SETUP_TMR")
    if psp.rl is not None:
        assert A.GFX_FW_TYPE_REG_LIST in sim.fw and names[-1] == "LOAD_IP_FW"
    # the response status and fence arrived by MC address: the last fence value is in the fence buffer
    assert struct.unpack("<I", m.ctx.vram.read(psp.fence.offset, 4))[0] == psp.fence_value == len(names)
    # fini: the ring goes, sOS and TMR stay for the next process
    psp.fini_hw()
    assert sim.ring is None and sim.sos_alive and sim.tmr is not None


@pytest.mark.parametrize("arch", ARCHS)
def test_partial_bringup_after_state_file(arch):
    m = Machine(arch, firmware(arch, "standin"))
    m.psp.init_sw()
    m.psp.init_hw()
    m.psp.fini_hw()
    fw_before = dict(m.sim.fw)
    m2 = m.next_process()
    assert m2.sim.sos_alive and m2.sim.ring is None
    m2.psp.init_sw()
    m2.ctx.tmr_size = m.psp.tmr_size                  # what SCRATCH_REG5 kept
    m2.psp.resume_hw()
    # the sOS keeps the TMR and every firmware in it: one read (is the sOS alive), no command, no write
    assert [a.op for a in m2.accesses] == ["R"], m2.accesses
    assert not m2.sim.commands and not m2.sim.faults and m2.sim.fw == fw_before
    if m2.psp.tmr is not None:                        # reserved again at the place the full boot chose
        assert m2.psp.tmr == m.psp.tmr and m2.sim.tmr["mc"] == m.psp.tmr.mc
    m2.psp.fini_hw()                                  # no ring of this session: nothing to destroy
    assert len(m2.accesses) == 1


def test_partial_needs_a_running_sos_and_the_tmr_size():
    m = Machine("gfx1100", firmware("gfx1100", "standin"))
    m.psp.init_sw()
    with pytest.raises(DeviceError, match="sOS is not running"):
        m.psp.resume_hw()
    m.psp.init_hw()
    m.psp.fini_hw()
    m2 = m.next_process()
    m2.psp.init_sw()
    m2.ctx.tmr_size = 0                               # SCRATCH_REG5 lost: the TMR's place is not known
    with pytest.raises(DeviceError, match="SCRATCH_REG5 holds no TMR size"):
        m2.psp.resume_hw()


def test_mode1_reset_clears_the_psp():
    m = Machine("gfx1201", firmware("gfx1201", "standin"))
    m.psp.init_sw()
    m.psp.init_hw()
    m.sim.reset()
    assert not m.sim.sos_alive and not m.sim.loaded_types and m.sim.tmr is None and not m.psp.sos_alive
    assert m.regs.MP0[P.reg(m.psp.mp0, P.C2PMSG_BL_CMD)].read() == P.BL_READY
    m.psp.init_hw()                                   # and a full boot works again
    assert m.sim.sos_alive and m.sim.autoload


# --- refusals -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("arch", ARCHS)
def test_corrupt_sos_component_refused_by_bootloader(arch, kind):
    fws = firmware(arch, kind)
    sos = psp_file(arch, "sos")
    fws[sos] = corrupt(fws[sos], "sys_drv", components=True)
    m = Machine(arch, fws)
    m.psp.init_sw()
    with pytest.raises(FirmwareRefused, match=rf"{sos}.*LOAD_SYSDRV \(sys_drv.*TEE_ERROR_BAD_FORMAT") as e:
        m.psp.init_hw()
    assert e.value.status == P.short_status(P.TEE_ERROR_BAD_FORMAT, 8)
    assert not m.sim.sos_alive and "sys_drv" not in m.sim.bootloaded


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("arch", ARCHS)
def test_corrupt_ip_firmware_refused(arch, kind):
    fws = firmware(arch, kind)
    rlc = next(f for f in fws if f.endswith("_rlc.bin"))
    fws[rlc] = corrupt(fws[rlc], "rlc_g")
    m = Machine(arch, fws)
    m.psp.init_sw()
    with pytest.raises(FirmwareRefused, match=rf"{rlc} part rlc_g: the PSP refused LOAD_IP_FW RLC_G with status "
                                              r"0xffff0005 TEE_ERROR_BAD_FORMAT") as e:
        m.psp.init_hw()
    assert e.value.status == P.TEE_ERROR_BAD_FORMAT and not m.sim.loaded(A.GFX_FW_TYPE_RLC_G)
    assert ("LOAD_IP_FW", P.TEE_ERROR_BAD_FORMAT) in m.sim.commands


@pytest.mark.parametrize("kind", KINDS)
def test_wrong_type_refused(kind):
    """An intact image of another kind (the GPM restore list where RLC_G is claimed) is refused."""
    arch = "gfx1100"
    fws = firmware(arch, kind)
    rlc = "gc_11_0_0_rlc.bin"
    gpm = fws[rlc].parts["restore_list_gpm"].data[:P.PS1_HEADER_SIZE]
    fws[rlc] = corrupt(fws[rlc], "rlc_g", at=0, data=gpm)
    m = Machine(arch, fws)
    m.psp.init_sw()
    with pytest.raises(FirmwareRefused, match=r"rlc_g.*TEE_ERROR_BAD_PARAMETERS"):
        m.psp.init_hw()


@pytest.mark.parametrize("kind", KINDS)
def test_corrupt_ta_refused(kind):
    arch = "gfx1100"
    fws = firmware(arch, kind)
    ta = psp_file(arch, "ta")
    good = Machine(arch, dict(fws))
    good.psp.tas = ("ras",)
    good.psp.init_sw()
    good.psp.init_hw()
    assert good.psp.sessions["ras"] >= 1 and good.sim.sessions
    fws[ta] = corrupt(fws[ta], "ras", components=True)
    m = Machine(arch, fws)
    m.psp.tas = ("ras",)
    m.psp.init_sw()
    with pytest.raises(FirmwareRefused, match=rf"{ta} part ras: the PSP refused LOAD_TA with status "
                                              r"0xffff0005 TEE_ERROR_BAD_FORMAT"):
        m.psp.init_hw()


def test_corrupt_toc_refused():
    arch = "gfx1100"
    fws = firmware(arch, "standin" if not _real_available(arch) else "real")
    sos = psp_file(arch, "sos")
    fws[sos] = corrupt(fws[sos], "toc", components=True)
    m = Machine(arch, fws)
    m.psp.init_sw()
    with pytest.raises(FirmwareRefused, match=rf"{sos} part toc: PSP command LOAD_TOC .*TEE_ERROR_BAD_FORMAT"):
        m.psp.init_hw()


def test_injected_refusal_names_file_and_status():
    m = Machine("gfx1201", firmware("gfx1201", "standin"))
    m.dev.inject("psp_refuse", fw_type=A.GFX_FW_TYPE_RS64_MEC)
    m.psp.init_sw()
    with pytest.raises(FirmwareRefused, match=r"gc_12_0_1_mec.bin part ucode: .*RS64_MEC .*TEE_ERROR_SECURITY"):
        m.psp.init_hw()
    assert "psp_refuse" not in m.dev.inject            # one shot: the next boot loads it
    m.sim.reset()
    m.psp.init_hw()
    assert m.sim.loaded(A.GFX_FW_TYPE_RS64_MEC)


def test_bootloader_position_rules():
    """The sOS before the system driver is refused; a component twice is refused; the bootloader reports
    in C2PMSG_35 bits 7:0 and stays ready."""
    m = Machine("gfx942", firmware("gfx942", "standin"))
    m.psp.init_sw()
    sos = m.psp.components["sos"]
    m.ctx.vram.write(m.psp.fw_pri.offset, sos.data)
    r35, r36 = (m.regs.MP0[P.reg(m.psp.mp0, n)] for n in (P.C2PMSG_BL_CMD, P.C2PMSG_BL_ADDR))
    r36.write(m.psp.fw_pri.mc >> 20)
    r35.write(A.PSP_BL__LOAD_SOSDRV)
    assert r35.read() == P.BL_READY | P.short_status(P.TEE_ERROR_BAD_STATE, 8) and not m.sim.sos_alive
    m.ctx.vram.write(m.psp.fw_pri.offset, m.psp.components["sys_drv"].data)
    r35.write(A.PSP_BL__LOAD_SYSDRV)
    assert r35.read() == P.BL_READY
    r35.write(A.PSP_BL__LOAD_SYSDRV)
    assert r35.read() & P.BL_ERROR_MASK == P.short_status(P.TEE_ERROR_BAD_STATE, 8)
    r36.write((VRAM_SIZE * 4 + FB_BASE) >> 20)          # a buffer outside the frame buffer
    r35.write(A.PSP_BL__LOAD_KEY_DATABASE)
    assert r35.read() & P.BL_ERROR_MASK == P.short_status(P.TEE_ERROR_BAD_PARAMETERS, 8)
    assert any("not reachable" in f for f in m.sim.faults)


# --- the ring -------------------------------------------------------------------------------------------
def _after_bootloader(arch="gfx1100"):
    m = Machine(arch, firmware(arch, "standin"))
    m.psp.init_sw()
    m.psp.bootload()
    return m


def test_ring_refuses_a_bad_ring_address():
    m = _after_bootloader()
    m.psp.ring = replace(m.psp.ring, mc=FB_BASE + VRAM_SIZE + (1 << 20))
    with pytest.raises(PSPError, match=r"refused the KM ring at 0x8006100000.*low 16 bits of "
                                       r"TEE_ERROR_BAD_PARAMETERS") as e:
        m.psp.ring_create()
    assert e.value.status == 0x6 and m.sim.ring is None


def test_ring_refuses_a_ring_size_that_is_not_frames():
    m = _after_bootloader()
    m.psp.ring = replace(m.psp.ring, size=P.KM_RING_SIZE - 8)
    with pytest.raises(PSPError, match="TEE_ERROR_BAD_PARAMETERS"):
        m.psp.ring_create()


def test_bad_fence_address_times_out_naming_the_command():
    """The PSP cannot write a fence it cannot reach: it answers BAD_PARAMETERS in the command buffer and
    the driver's wait runs out, naming the command and that status."""
    m = _after_bootloader()
    m.psp.ring_create()
    m.psp.fence = replace(m.psp.fence, mc=FB_BASE - 0x1000)
    with pytest.raises(GPUTimeout, match=r"PSP command LOAD_TOC .*fence 1.*response status 0xffff0006 "
                                         r"TEE_ERROR_BAD_PARAMETERS"):
        m.psp.tmr_init()
    assert any("fence" in f for f in m.sim.faults)


def test_command_without_ring_times_out_naming_the_command():
    m = _after_bootloader("gfx1201")
    m.psp.ring_create()
    m.psp.ring_destroy()
    with pytest.raises(GPUTimeout, match=r"PSP command SETUP_TMR \(0x0 bytes at 0x0\): fence 1"):
        m.psp.tmr_load()
    assert any("no ring" in f for f in m.sim.faults)


def test_ring_wraps():
    """More commands than the 4 KiB ring has frames: the write pointer wraps, every fence arrives."""
    m = _after_bootloader("gfx1201")
    m.psp.ring_create()
    m.psp.tmr_init()
    m.psp.tmr_load()
    frames = P.KM_RING_SIZE // P.FRAME_SIZE
    for _ in range(frames + 3):
        m.psp.submit(A.GFX_CMD_ID_SETUP_TMR, buf_size=0)
    assert m.psp.fence_value == frames + 4 and len(m.sim.commands) == frames + 4
    assert m.regs.MP0[P.reg(m.psp.mp0, P.C2PMSG_GPCOM_WPTR)].read() == 4 * P.FRAME_SIZE // 4


def test_unknown_command_status():
    m = _after_bootloader()
    m.psp.ring_create()
    with pytest.raises(PSPError, match="PSP_ERR_UNKNOWN_COMMAND"):
        m.psp._command(0x1F)


def test_ip_fw_before_tmr_refused():
    m = _after_bootloader()
    m.psp.ring_create()
    with pytest.raises(FirmwareRefused, match="TEE_ERROR_BAD_STATE"):
        m.psp.load_ip_fw(next(ld for ld in m.psp.plan if ld.fw_type == A.GFX_FW_TYPE_RLC_G))


def test_zero_tmr_refused_without_boot_time_tmr():
    m = _after_bootloader("gfx1100")
    m.psp.ring_create()
    m.psp.tmr = None
    with pytest.raises(PSPError, match="SETUP_TMR .*TEE_ERROR_BAD_PARAMETERS"):
        m.psp.tmr_load()


def test_sim_handler_names_follow_the_generation():
    for arch, prefix in (("gfx1100", "regMP0_SMN_C2PMSG_"), ("gfx1201", "regMPASP_SMN_C2PMSG_"),
                         ("gfx942", "regMP0_SMN_C2PMSG_")):
        m = Machine(arch, {})
        names = m.rf.handlers()["write"]
        assert {f"{type(m.sim).__name__}.on_write_{prefix}{n}" for n in (35, 64, 67)} <= set(names)


def test_corrupt_sos_itself_refused_without_waiting_out_the_sign_of_life():
    fws = firmware("gfx1100", "standin")
    sos = psp_file("gfx1100", "sos")
    fws[sos] = corrupt(fws[sos], "sos", components=True)
    m = Machine("gfx1100", fws)
    m.psp.init_sw()
    m.psp.bl_timeout_ms = 5000
    t0 = time.monotonic()
    with pytest.raises(FirmwareRefused, match=rf"{sos}.*LOAD_SOSDRV \(sos,.*TEE_ERROR_BAD_FORMAT"):
        m.psp.init_hw()
    assert time.monotonic() - t0 < 2.5 and m.sim.bootloaded[-1] != "sos"
