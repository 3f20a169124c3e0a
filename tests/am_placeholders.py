"""TEST-ONLY PLACEHOLDERS for the AM driver's PSP, SMU, GMC and IH blocks and the simulated PSP and SMU,
until their own modules (amdq/am/{psp,smu,gmc,ih}.py, amdq/sim/pci/{psp,smu}.py) land. NOT the blocks:
they do the least the boot of the other blocks needs, so the boot state machine, SOC, GFX and SDMA can be
tested now. `install()` puts them in place of missing modules only; a real module always wins.

* PSP: the bootloader steps for KDB/SYS_DRV/SOS (C2PMSG_35/36, sOS alive in C2PMSG_81), one KM ring
  (C2PMSG_64/69/70/71, write pointer C2PMSG_67) with SETUP_TMR, LOAD_IP_FW per loadable part, and
  AUTOLOAD_RLC on GFX11/12. No firmware checks, no TOC, no fences beyond the one value, no failures.
* SMU: the mailbox (C2PMSG_66/82/90) answering OK, and Mode1Reset resetting the device. No power limit,
  no clocks, no timeouts.
* GMC, IH: nothing at all (init_hw programs nothing).
"""
from __future__ import annotations

import struct

from amdq.am import driver
from amdq.am.ip import IPBlock
from amdq.am.soc import psp_reg
from amdq.hw import am as A
from amdq.sim.pci import device as simdev
from amdq.sim.pci.part import SimPart

TMR_BYTES = 4 << 20
LOADABLE = ("cp", "rlc", "imu", "sdma")
SMU_MODE1_RESET, SMU_TEST = 0x2F, 0x1


# --- driver side -------------------------------------------------------------------------------------------
class PlaceholderPSP(IPBlock):
    """TEST-ONLY placeholder PSP block (see the module doc)."""
    name = "psp"

    def init_sw(self) -> None:
        am = self.am
        b = am.boot
        self.fw_buf = b.reserve("psp_fw_buf", 1 << 20, 1 << 20)
        self.ring = b.reserve("psp_ring", 0x10000, 0x1000)
        self.cmd = b.reserve("psp_cmd", 0x1000)
        self.fence = b.reserve("psp_fence", 0x1000)
        self.tmr = b.reserve("tmr", TMR_BYTES, 1 << 20)
        self.stage = b.reserve("psp_fw_stage", 8 << 20, 0x1000)
        self.sos = next(f for f in am.drv.firmware.values() if f.kind == "psp_sos")
        self.parts = [p for f in am.drv.firmware.values() if f.kind in LOADABLE
                      for p in f.parts.values() if p.fw_type is not None and p.size]
        self.wptr = 0
        self.fence_value = 0

    def _bl(self, cmd: int, data: bytes) -> None:
        r35 = psp_reg(self.am.regs, 35)
        self.am.wait(lambda: r35.read() & (1 << 31), 1000, "the PSP bootloader (C2PMSG_35 bit 31)")
        self.am.vram.write(self.fw_buf.offset, data)
        psp_reg(self.am.regs, 36).write(self.fw_buf.mc >> 20)
        r35.write(cmd)
        self.am.wait(lambda: r35.read() & (1 << 31), 1000, f"the PSP bootloader command {cmd:#x} (C2PMSG_35)")

    def _ring_create(self) -> None:
        regs = self.am.regs
        r64 = psp_reg(regs, 64)
        self.am.wait(lambda: r64.read() & (1 << 31), 1000, "the PSP ring interface (C2PMSG_64 bit 31)")
        psp_reg(regs, 69).write(self.ring.mc & 0xFFFFFFFF)
        psp_reg(regs, 70).write(self.ring.mc >> 32)
        psp_reg(regs, 71).write(self.ring.size)
        r64.write(A.PSP_RING_TYPE__KM << 16)
        self.am.wait(lambda: r64.read() & (1 << 31), 1000, "the PSP ring creation (C2PMSG_64 bit 31)")
        self.wptr = 0

    def _cmd(self, cmd_id: int, **fields) -> dict:
        buf = bytearray(A.psp_gfx_cmd_resp.size)
        A.psp_gfx_cmd_resp.pack_into(buf, 0, buf_size=len(buf), buf_version=1, cmd_id=cmd_id, cmd=fields)
        self.am.vram.write(self.cmd.offset, bytes(buf))
        self.fence_value += 1
        frame = bytearray(A.psp_gfx_rb_frame.size)
        A.psp_gfx_rb_frame.pack_into(frame, 0, cmd_buf_addr_lo=self.cmd.mc & 0xFFFFFFFF, cmd_buf_addr_hi=self.cmd.mc >> 32,
                                     cmd_buf_size=len(buf), fence_addr_lo=self.fence.mc & 0xFFFFFFFF,
                                     fence_addr_hi=self.fence.mc >> 32, fence_value=self.fence_value)
        off = (self.wptr * 4) % self.ring.size
        self.am.vram.write(self.ring.offset + off, bytes(frame))
        self.wptr += len(frame) // 4
        psp_reg(self.am.regs, 67).write(self.wptr)
        self.am.wait(lambda: struct.unpack("<I", self.am.vram.read(self.fence.offset, 4))[0] == self.fence_value,
                     1000, f"PSP command {cmd_id:#x}")
        resp = A.psp_gfx_resp.unpack(self.am.vram.read(self.cmd.offset + 864, A.psp_gfx_resp.size))
        if resp["status"]:
            from amdq.errors import AMBootError
            raise AMBootError(f"placeholder PSP: command {cmd_id:#x} failed with status {resp['status']:#x}")
        return resp

    def _tmr(self) -> None:
        self._cmd(A.GFX_CMD_ID_SETUP_TMR, cmd_setup_tmr=dict(buf_phy_addr_lo=self.tmr.mc & 0xFFFFFFFF,
                                                             buf_phy_addr_hi=self.tmr.mc >> 32, buf_size=self.tmr.size))
        self.am.tmr_size = self.tmr.size

    def init_hw(self) -> None:
        for c in self.sos.components:
            if c.name in ("kdb", "sys_drv", "sos"):
                self._bl({"kdb": A.PSP_BL__LOAD_KEY_DATABASE, "sys_drv": A.PSP_BL__LOAD_SYSDRV,
                          "sos": A.PSP_BL__LOAD_SOSDRV}[c.name], c.data)
        r81 = psp_reg(self.am.regs, 81)
        self.am.wait(lambda: r81.read() != 0, 1000, "the sOS (C2PMSG_81)")
        self._ring_create()
        self._tmr()
        for p in self.parts:
            self.am.vram.write(self.stage.offset, p.data)
            self._cmd(A.GFX_CMD_ID_LOAD_IP_FW, cmd_load_ip_fw=dict(fw_phy_addr_lo=self.stage.mc & 0xFFFFFFFF,
                                                                   fw_phy_addr_hi=self.stage.mc >> 32, fw_size=p.size,
                                                                   fw_type=p.fw_type))
        if self.am.target.gfx_version >= 11:
            self._cmd(A.GFX_CMD_ID_AUTOLOAD_RLC)

    def resume_hw(self) -> None:
        self._ring_create()
        self._tmr()

    def fini_hw(self) -> None:
        r64 = psp_reg(self.am.regs, 64)
        r64.write(A.GFX_CTRL_CMD_ID_DESTROY_RINGS)
        self.am.wait(lambda: r64.read() & (1 << 31), 1000, "the PSP ring destruction (C2PMSG_64)")


class PlaceholderSMU(IPBlock):
    """TEST-ONLY placeholder SMU block (see the module doc)."""
    name = "smu"

    def _send(self, msg: int, arg: int = 0, wait: bool = True) -> None:
        mp1 = self.am.regs.MP1
        mp1.regMP1_SMN_C2PMSG_90.write(0)
        mp1.regMP1_SMN_C2PMSG_82.write(arg)
        mp1.regMP1_SMN_C2PMSG_66.write(msg)
        if wait:
            self.am.wait(lambda: mp1.regMP1_SMN_C2PMSG_90.read() != 0, 1000, f"SMU message {msg:#x} (C2PMSG_90)")

    def init_hw(self) -> None:
        self._send(SMU_TEST)

    def mode1_reset(self) -> None:
        self._send(SMU_MODE1_RESET, wait=False)


class PlaceholderGMC(IPBlock):
    """TEST-ONLY placeholder: programs nothing."""
    name = "gmc"


class PlaceholderIH(IPBlock):
    """TEST-ONLY placeholder: programs nothing."""
    name = "ih"


# --- simulator side ----------------------------------------------------------------------------------------
def _mp0_names(dev) -> str:
    return "MPASP_SMN_C2PMSG_" if "regMPASP_SMN_C2PMSG_64" in dev.layout.tables["MP0"] else "MP0_SMN_C2PMSG_"


class PlaceholderSimPSP(SimPart):
    """TEST-ONLY placeholder simulated PSP (see the module doc)."""
    name = "psp"

    def __init__(self, dev):
        super().__init__(dev)
        self.p = "reg" + _mp0_names(dev)
        self.reset()

    def r(self, n: int):
        return self.dev.raw.MP0[f"{self.p}{n}"]

    def reset(self) -> None:
        self.ring = None
        self.rptr = 0
        if hasattr(self.dev, "regfile"):
            self.dev.regfile.poke(self.r(35).addr, 1 << 31)
            self.dev.regfile.poke(self.r(64).addr, 1 << 31)

    def save(self) -> dict:
        return {"ring": self.ring, "rptr": self.rptr}

    def load(self, state: dict) -> None:
        self.ring = state.get("ring")
        self.rptr = state.get("rptr", 0)

    def bl(self, value: int) -> None:
        if value == A.PSP_BL__LOAD_SOSDRV:
            self.r(81).write(0x3A0001)
        self.r(35).write(1 << 31)

    def ctrl(self, value: int) -> None:
        if value == A.GFX_CTRL_CMD_ID_DESTROY_RINGS:
            self.ring = None
        elif value >> 16 == A.PSP_RING_TYPE__KM:
            self.ring = ((self.r(70).read() << 32) | self.r(69).read(), self.r(71).read())
            self.rptr = 0
        self.r(64).write(1 << 31)

    def wptr(self, value: int) -> None:
        if self.ring is None:
            return
        base, size = self.ring
        while self.rptr != value:
            fr = A.psp_gfx_rb_frame.unpack(self.dev.mc_read(base + (self.rptr * 4) % size, 64))
            cmd_addr = (fr["cmd_buf_addr_hi"] << 32) | fr["cmd_buf_addr_lo"]
            cmd = A.psp_gfx_cmd_resp.unpack(self.dev.mc_read(cmd_addr, A.psp_gfx_cmd_resp.size))
            status = 0
            if cmd["cmd_id"] == A.GFX_CMD_ID_LOAD_IP_FW:
                f = cmd["cmd"]["cmd_load_ip_fw"]
                img = self.dev.mc_read((f["fw_phy_addr_hi"] << 32) | f["fw_phy_addr_lo"], f["fw_size"])
                self.dev.firmware_loaded(f["fw_type"], img)
            elif cmd["cmd_id"] == A.GFX_CMD_ID_AUTOLOAD_RLC:
                status = 0 if self.dev.autoload_rlc() else 0xFFFF0007
            self.dev.mc_write(cmd_addr + 864, struct.pack("<I", status))
            self.dev.mc_write((fr["fence_addr_hi"] << 32) | fr["fence_addr_lo"], struct.pack("<I", fr["fence_value"]))
            self.rptr += 16


class PlaceholderSimSMU(SimPart):
    """TEST-ONLY placeholder simulated SMU (see the module doc)."""
    name = "smu"

    def on_write_regMP1_SMN_C2PMSG_66(self, value: int) -> None:
        if value == SMU_MODE1_RESET:
            self.dev.mode1_reset()
            return
        self.dev.raw.MP1.regMP1_SMN_C2PMSG_90.write(1)


def _sim_psp(dev):
    p = _mp0_names(dev)
    ns = {f"on_write_reg{p}35": lambda self, v: self.bl(v), f"on_write_reg{p}64": lambda self, v: self.ctrl(v),
          f"on_write_reg{p}67": lambda self, v: self.wptr(v)}
    return type("PlaceholderSimPSP_" + p.split("_")[0], (PlaceholderSimPSP,), ns)(dev)


def install() -> list[str]:
    """Put the placeholders in place of the missing modules; returns the names placed."""
    placed = []
    for name, cls in (("psp", PlaceholderPSP), ("smu", PlaceholderSMU), ("gmc", PlaceholderGMC), ("ih", PlaceholderIH)):
        if driver.block_class(name) is None:
            driver.register_block(name, cls)
            placed.append(f"am.{name}")
    for name, factory in (("psp", _sim_psp), ("smu", PlaceholderSimSMU)):
        if simdev._part_class(name) is None:
            simdev.register_part(name, factory)
            placed.append(f"sim.{name}")
    return placed
