"""PSP (MP0): the bootloader steps, the KM ring, the TMR and firmware loading through GFX commands.

The sequence is the one Linux amdgpu runs for MP0 13.0.0 (gfx1100), 14.0.3 (gfx1201) and 13.0.6 (gfx942)
(psp_v13_0.c, psp_v14_0.c, amdgpu_psp.c psp_load_fw / psp_hw_start; facts in amdq/hw/psp.py):

1. bootloader, each step skipped once the sOS is alive (C2PMSG_81 != 0): on 13.0.6 wait for the mailbox
   (C2PMSG_33); per SOS component in psp_hw_start order (KDB, SPL, SYS_DRV, SOC_DRV, INTF_DRV, DBG_DRV,
   RAS_DRV, IPKEYMGR_DRV on 14.x, SOS): wait for C2PMSG_35 bit 31, copy the component into the 1 MiB
   buffer, MC address >> 20 to C2PMSG_36, the command to C2PMSG_35, wait again; after SOS wait for the sign
   of life in C2PMSG_81 and read the sOS version from C2PMSG_58;
2. the KM ring: wait for C2PMSG_64 bit 31, ring address to C2PMSG_69/70, size to 71, `KM << 16` to 64,
   wait for bit 31 with status bits 15:0 clear; commands are 64-byte frames, the write pointer (dwords) in
   C2PMSG_67, completion a fence value written by the PSP, the status in the command buffer's response;
3. the TMR: LOAD_TOC answers its size where the SOS bundle has a TOC and the TMR is the driver's (13.0.0);
   14.0.3 and 13.0.6 use the TMR the boot firmware reserved (SETUP_TMR with size 0, as amdgpu does with
   boot_time_tmr); the driver's TMR is a 1 MiB-aligned piece of the boot region; `tmr_size` is what the
   driver core keeps in SCRATCH_REG5;
4. SMU firmware before SETUP_TMR where PMFW manages DF C-states (13.0.0), first of the IP firmware where
   RLC autoload runs without that (14.0.3), not at all where the file has no PMFW (13.0.6);
5. the IP firmware in AMDGPU_UCODE_ID order with its GFX_FW_TYPE (SDMA, RS64 PFP/ME/MEC and their stacks
   or F32 MEC + jump table, IMU, RLC restore lists / IRAM / DRAM / P / V / G), then AUTOLOAD_RLC after
   RLC_G where RLC autoload is supported; the register list (RL) last.

Skipped because a compute-only boot does not need them: MES (queues are bound to MEC directly), the TAs
(ASD, RAS, XGMI, HDCP, DTM: pass `tas=("ras",)` etc. to load them), PFP/ME stacks of a second gfx pipe.
`resume_hw` is the partial boot of a GPU this driver left initialised: the sOS still runs with the TMR and
the firmware in it, so no bootloader step and no command: the driver reserves the TMR again at its place
(the size from SCRATCH_REG5) and the GFX block restarts the MEC from the code the TMR holds. `fini_hw`
destroys the ring and leaves sOS and TMR running.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import AmdqError, DeviceError, FirmwareRefused, PSPError
from ..hw import am as A
from ..hw import psp as P
from .firmware import target_firmware
from .ip import IPBlock, Region

_U32 = struct.Struct("<I")
PAGE = 0x1000


@dataclass(frozen=True)
class Load:
    """One LOAD_IP_FW: the AMDGPU_UCODE_ID that orders it, its GFX_FW_TYPE, where its bytes come from."""
    ucode_id: int
    fw_type: int
    file: str
    part: str
    data: bytes

    @property
    def type_name(self) -> str:
        return P.FW_TYPE_NAMES.get(self.fw_type, f"{self.fw_type:#x}")



# RS64 CP parts: file engine -> ((part, ucode id, fw type), ...); MEC stacks per pipe (4 pipes per MEC on
# gfx11/gfx12, gfx_v11_0.c / gfx_v12_0.c), PFP/ME stacks of pipe 0 only (one gfx pipe is used).
_RS64 = {
    "pfp": (("ucode", A.AMDGPU_UCODE_ID_CP_RS64_PFP, A.GFX_FW_TYPE_RS64_PFP),
            ("data", A.AMDGPU_UCODE_ID_CP_RS64_PFP_P0_STACK, A.GFX_FW_TYPE_RS64_PFP_P0_STACK)),
    "me": (("ucode", A.AMDGPU_UCODE_ID_CP_RS64_ME, A.GFX_FW_TYPE_RS64_ME),
           ("data", A.AMDGPU_UCODE_ID_CP_RS64_ME_P0_STACK, A.GFX_FW_TYPE_RS64_ME_P0_STACK)),
    "mec": (("ucode", A.AMDGPU_UCODE_ID_CP_RS64_MEC, A.GFX_FW_TYPE_RS64_MEC),
            ("data", A.AMDGPU_UCODE_ID_CP_RS64_MEC_P0_STACK, A.GFX_FW_TYPE_RS64_MEC_P0_STACK),
            ("data", A.AMDGPU_UCODE_ID_CP_RS64_MEC_P1_STACK, A.GFX_FW_TYPE_RS64_MEC_P1_STACK),
            ("data", A.AMDGPU_UCODE_ID_CP_RS64_MEC_P2_STACK, A.GFX_FW_TYPE_RS64_MEC_P2_STACK),
            ("data", A.AMDGPU_UCODE_ID_CP_RS64_MEC_P3_STACK, A.GFX_FW_TYPE_RS64_MEC_P3_STACK)),
}
_F32_MEC = (("ucode", A.AMDGPU_UCODE_ID_CP_MEC1), ("jt", A.AMDGPU_UCODE_ID_CP_MEC1_JT))
_RLC = {"restore_list_cntl": A.AMDGPU_UCODE_ID_RLC_RESTORE_LIST_CNTL,
        "restore_list_gpm": A.AMDGPU_UCODE_ID_RLC_RESTORE_LIST_GPM_MEM,
        "restore_list_srm": A.AMDGPU_UCODE_ID_RLC_RESTORE_LIST_SRM_MEM,
        "iram": A.AMDGPU_UCODE_ID_RLC_IRAM, "dram": A.AMDGPU_UCODE_ID_RLC_DRAM, "rlcp": A.AMDGPU_UCODE_ID_RLC_P,
        "rlcv": A.AMDGPU_UCODE_ID_RLC_V, "rlc_g": A.AMDGPU_UCODE_ID_RLC_G,
        "global_tap_delays": A.AMDGPU_UCODE_ID_GLOBAL_TAP_DELAYS, "se0_tap_delays": A.AMDGPU_UCODE_ID_SE0_TAP_DELAYS,
        "se1_tap_delays": A.AMDGPU_UCODE_ID_SE1_TAP_DELAYS, "se2_tap_delays": A.AMDGPU_UCODE_ID_SE2_TAP_DELAYS,
        "se3_tap_delays": A.AMDGPU_UCODE_ID_SE3_TAP_DELAYS}
_IMU = {"iram": A.AMDGPU_UCODE_ID_IMU_I, "dram": A.AMDGPU_UCODE_ID_IMU_D}
_SDMA = {"th0": A.AMDGPU_UCODE_ID_SDMA_UCODE_TH0, "th1": A.AMDGPU_UCODE_ID_SDMA_UCODE_TH1}
_TA_SHARED = {"ras": A.PSP_RAS_SHARED_MEM_SIZE, "xgmi": A.PSP_XGMI_SHARED_MEM_SIZE, "hdcp": A.PSP_HDCP_SHARED_MEM_SIZE,
              "dtm": A.PSP_DTM_SHARED_MEM_SIZE, "asd": A.PSP_ASD_SHARED_MEM_SIZE}


class PSP(IPBlock):
    name = "psp"
    bl_timeout_ms = 1000.0        # psp_wait_for: usec_timeout polls, retried (10 times; 3000 on 13.0.6)
    cmd_timeout_ms = 2000.0       # psp_cmd_submit_buf: psp_timeout polls of 10-100 us

    def __init__(self, am, tas: tuple[str, ...] = ()):
        super().__init__(am)
        self.tas = tuple(tas)
        self.mp0 = tuple(am.target.ip["MP0"])
        self.v = P.version(self.mp0)
        self.fence_value = 0
        self.tmr: Region | None = None
        self.tmr_size = 0
        self.sos_version = 0
        self.loaded: list[Load] = []
        self.sessions: dict[str, int] = {}
        self.ring_up = False

    # --- software state ---------------------------------------------------------------------------------
    def init_sw(self) -> None:
        files = {s.kind + ("_" + s.file.split("_")[-1].split(".")[0] if s.kind == "cp" else ""): s.file
                 for s in target_firmware(self.am.target.arch) if s.required}
        self.sos_file = files["psp_sos"]
        self.ta_file = files["psp_ta"]
        self.sos = self.am.firmware(self.sos_file)
        self.components = {c.name: c for c in self.sos.components}
        self.toc = self.components.get("toc")
        self.rl = self.components.get("rl")
        self.ta = self.am.firmware(self.ta_file) if self.tas else None
        plan: list[Load] = []
        for key, file in files.items():
            fw = None if key in ("psp_sos", "psp_ta") else self.am.firmware(file)
            if fw is None:
                continue
            if fw.kind == "cp" and getattr(fw, "rs64", False):
                for part, uid, t in _RS64[key[3:]]:
                    plan.append(Load(uid, t, file, part, fw.parts[part].data))
            elif fw.kind == "cp" and key == "cp_mec":
                for part, uid in _F32_MEC:
                    if part in fw.parts and not (part == "jt" and self.v.autoload):   # no MEC JT with autoload
                        plan.append(Load(uid, fw.parts[part].fw_type, file, part, fw.parts[part].data))
            elif fw.kind == "rlc":
                plan += [Load(_RLC[p.name], p.fw_type, file, p.name, p.data) for p in fw.parts.values()
                         if p.name in _RLC and p.size]
            elif fw.kind == "imu":
                plan += [Load(_IMU[p.name], p.fw_type, file, p.name, p.data) for p in fw.parts.values()]
            elif fw.kind == "sdma":
                for p in fw.parts.values():
                    uid = _SDMA.get(p.name) if fw.header_version[0] == 2 else (
                        A.AMDGPU_UCODE_ID_SDMA_RS64 if fw.header_version[0] == 3 else A.AMDGPU_UCODE_ID_SDMA0)
                    plan.append(Load(uid, p.fw_type, file, p.name, p.data))
            elif fw.kind == "smu" and fw.parts["ucode"].size:
                p = fw.parts["ucode"]
                self.smu = Load(A.AMDGPU_UCODE_ID_SMC, p.fw_type, file, "ucode", p.data)
        self.smu = getattr(self, "smu", None)
        self.plan = sorted(plan, key=lambda ld: ld.ucode_id)
        boot = self.am.boot
        self.fw_pri = boot.reserve("psp_fw_pri", P.BL_BUFFER_SIZE, P.BL_BUFFER_SIZE)
        self.fence = boot.reserve("psp_fence", P.FENCE_BUF_SIZE, PAGE)
        self.cmd = boot.reserve("psp_cmd", P.CMD_BUF_SIZE, PAGE)
        self.ring = boot.reserve("psp_km_ring", P.KM_RING_SIZE, PAGE)
        # amdgpu_ucode_init_bo: every ucode at a page-aligned offset of one firmware buffer.
        loads = self.plan + ([self.smu] if self.smu else [])
        self.fw_offsets: dict[tuple[int, str], int] = {}
        off = 0
        for ld in loads:
            self.fw_offsets[(ld.ucode_id, ld.file)] = off
            off += -(-len(ld.data) // PAGE) * PAGE
        self.fw_buf = boot.reserve("psp_fw_buf", max(off, PAGE), PAGE)
        if self.ta is not None:
            self.ta_shared = {n: boot.reserve(f"psp_ta_{n}", max(_TA_SHARED.get(n, PAGE), PAGE), PAGE)
                              for n in self.tas}

    # --- registers --------------------------------------------------------------------------------------
    def _reg(self, n: int):
        return self.am.regs.MP0[P.reg(self.mp0, n)]

    def _wait_reg(self, n: int, value: int, mask: int, what: str, timeout_ms: float | None = None) -> int:
        r = self._reg(n)
        seen = [0]

        def done() -> bool:
            seen[0] = r.read()
            return seen[0] & mask == value
        self.am.wait(done, timeout_ms or self.bl_timeout_ms, what)
        return seen[0]

    def _sos_version(self) -> int:
        return self._reg(P.C2PMSG_SOS_VERSION).read() if self.v.sos_version_reg else 0

    @property
    def sos_alive(self) -> bool:
        return self._reg(P.C2PMSG_SOS_ALIVE).read() != 0

    # --- 1. bootloader ----------------------------------------------------------------------------------
    def _wait_bootloader(self, what: str) -> None:
        v = self._wait_reg(P.C2PMSG_BL_CMD, P.BL_READY, P.BL_READY, f"PSP bootloader ready (C2PMSG_35 bit 31) {what}",
                           self.bl_timeout_ms * (3 if self.v.vmbx else 1))
        err = v & P.BL_ERROR_MASK
        if err:
            raise FirmwareRefused(f"firmware {self.sos_file}: the PSP bootloader refused {what} "
                                  f"(C2PMSG_35 error {P.short_status_name(err, 8)})", status=err)

    def bootload(self) -> None:
        if self.sos_alive:
            self.sos_version = self._sos_version()
            self.am.log(2, f"psp: sOS alive (version {self.sos_version:#x}), bootloader steps skipped")
            return
        if self.v.vmbx:
            self._wait_reg(P.C2PMSG_VMBX, P.BL_READY, 0xFFFFFFFF, "PSP bootloader mailbox (C2PMSG_33 bit 31)",
                           self.bl_timeout_ms * 3)
        for name, cmd in P.BL_ORDER:
            comp = self.components.get(name)
            if comp is None or not comp.size or name not in self.v.loaders:
                continue
            what = f"{P.BL_NAMES[cmd]} ({name}, {comp.size} bytes)"
            self._wait_bootloader(f"before {what}")
            self.am.vram.write(self.fw_pri.offset, bytes(P.BL_BUFFER_SIZE))
            self.am.vram.write(self.fw_pri.offset, comp.data)
            before = self._reg(P.C2PMSG_SOS_ALIVE).read()
            self._reg(P.C2PMSG_BL_ADDR).write((self.fw_pri.mc >> P.BL_ADDR_SHIFT) & 0xFFFFFFFF)
            self._reg(P.C2PMSG_BL_CMD).write(cmd)
            if name == "sos":
                r81, r35 = self._reg(P.C2PMSG_SOS_ALIVE), self._reg(P.C2PMSG_BL_CMD)
                # the sign of life changes, or the bootloader answers with an error (then named below)
                self.am.wait(lambda: r81.read() != before or r35.read() & (P.BL_READY | P.BL_ERROR_MASK) > P.BL_READY,
                             self.bl_timeout_ms, f"PSP sOS sign of life (C2PMSG_81) after {what}")
                if r81.read() == before:
                    self._wait_bootloader(what)
                self.sos_version = self._sos_version()
            else:
                self._wait_bootloader(what)
            self.am.log(2, f"psp: bootloader took {what}")

    # --- 2. the KM ring ---------------------------------------------------------------------------------
    def ring_create(self) -> None:
        self._wait_reg(P.C2PMSG_CTRL, P.CTRL_RESPONSE, P.CTRL_RESPONSE,
                       "PSP sOS ready for ring creation (C2PMSG_64 bit 31)")
        self.am.vram.write(self.ring.offset, bytes(self.ring.size))
        self.am.vram.write(self.fence.offset, bytes(P.FENCE_BUF_SIZE))
        self._reg(P.C2PMSG_RING_LO).write(self.ring.mc & 0xFFFFFFFF)
        self._reg(P.C2PMSG_RING_HI).write(self.ring.mc >> 32)
        self._reg(P.C2PMSG_RING_SIZE).write(self.ring.size)
        self._reg(P.C2PMSG_CTRL).write(A.PSP_RING_TYPE__KM << 16)
        v = self._wait_reg(P.C2PMSG_CTRL, P.CTRL_RESPONSE, P.CTRL_RESPONSE, "PSP KM ring creation (C2PMSG_64)")
        if v & P.CTRL_STATUS_MASK:
            raise PSPError(f"PSP refused the KM ring at {self.ring.mc:#x} ({self.ring.size:#x} bytes): status "
                           f"{P.short_status_name(v & P.CTRL_STATUS_MASK, 16)}", status=v & P.CTRL_STATUS_MASK)
        self.ring_up = True
        self.fence_value = 0

    def ring_destroy(self) -> None:
        self._reg(P.C2PMSG_CTRL).write(A.GFX_CTRL_CMD_ID_DESTROY_RINGS)
        self._wait_reg(P.C2PMSG_CTRL, P.CTRL_RESPONSE, P.CTRL_RESPONSE, "PSP ring destroy (C2PMSG_64 bit 31)")
        self.ring_up = False

    def submit(self, cmd_id: int, what: str = "", **fields) -> dict:
        """One GFX command through the KM ring; the response (psp_gfx_resp) once the fence arrives."""
        name = P.CMD_NAMES.get(cmd_id, f"{cmd_id:#x}")
        label = f"PSP command {name}" + (f" ({what})" if what else "")
        buf = bytearray(P.CMD_BUF_SIZE)
        A.psp_gfx_cmd_resp.pack_into(buf, 0, cmd_id=cmd_id)
        sub = _CMD_STRUCTS.get(cmd_id)
        if fields:
            if sub is None:
                raise PSPError(f"{label}: amdq has no command layout for fields {', '.join(fields)}")
            sub.pack_into(buf, A.psp_gfx_cmd_resp.offsetof("cmd"), **fields)
        self.am.vram.write(self.cmd.offset, bytes(buf))
        self.fence_value = (self.fence_value + 1) & 0xFFFFFFFF
        ring_dw, frame_dw = self.ring.size // 4, P.FRAME_SIZE // 4
        wptr = self._reg(P.C2PMSG_GPCOM_WPTR).read()
        index = 0 if wptr % ring_dw == 0 else wptr
        if index % frame_dw or index >= ring_dw:
            raise PSPError(f"{label}: the KM ring write pointer {wptr:#x} is not a frame inside the ring")
        frame = A.psp_gfx_rb_frame.pack(cmd_buf_addr_lo=self.cmd.mc & 0xFFFFFFFF, cmd_buf_addr_hi=self.cmd.mc >> 32,
                                        fence_addr_lo=self.fence.mc & 0xFFFFFFFF, fence_addr_hi=self.fence.mc >> 32,
                                        fence_value=self.fence_value)
        self.am.vram.write(self.ring.offset + index * 4, frame)
        self._reg(P.C2PMSG_GPCOM_WPTR).write((index + frame_dw) % ring_dw)
        value = self.fence_value
        try:
            self.am.wait(lambda: _U32.unpack(self.am.vram.read(self.fence.offset, 4))[0] == value,
                         self.cmd_timeout_ms, f"{label}: fence {value}")
        except AmdqError as e:
            st = _U32.unpack(self.am.vram.read(self.cmd.offset + P.RESP_OFFSET, 4))[0]
            if st and e.args:
                e.args = (f"{e.args[0]} (response status {P.status_name(st)})",) + e.args[1:]
            raise
        resp = A.psp_gfx_resp.unpack(self.am.vram.read(self.cmd.offset + P.RESP_OFFSET, A.psp_gfx_resp.size))
        self.am.log(3, f"psp: {label}: status {P.status_name(resp['status'])}")
        return resp

    def _command(self, cmd_id: int, what: str = "", **fields) -> dict:
        resp = self.submit(cmd_id, what, **fields)
        if resp["status"]:
            raise PSPError(f"PSP command {P.CMD_NAMES.get(cmd_id, cmd_id)}" + (f" ({what})" if what else "")
                           + f" failed with status {P.status_name(resp['status'])}", status=resp["status"])
        return resp

    # --- 3. TMR -----------------------------------------------------------------------------------------
    def tmr_init(self) -> None:
        size = P.PSP_TMR_SIZE
        if self.toc is not None and self.toc.size and not (self.v.boot_time_tmr and self.v.autoload):
            self.am.vram.write(self.fw_pri.offset, bytes(P.BL_BUFFER_SIZE))
            self.am.vram.write(self.fw_pri.offset, self.toc.data)
            try:
                size = self._command(A.GFX_CMD_ID_LOAD_TOC, f"{self.sos_file} toc",
                                     toc_phy_addr_lo=self.fw_pri.mc & 0xFFFFFFFF, toc_phy_addr_hi=self.fw_pri.mc >> 32,
                                     toc_size=self.toc.size)["tmr_size"]
            except PSPError as e:
                raise FirmwareRefused(f"firmware {self.sos_file} part toc: {e}", status=e.status) from e
        if self.v.boot_time_tmr:
            self.tmr, self.tmr_size = None, 0
        else:
            if size % P.PSP_TMR_ALIGNMENT:
                raise PSPError(f"PSP TMR size {size:#x} is not a multiple of {P.PSP_TMR_ALIGNMENT:#x}")
            self.tmr = self.am.boot.reserve("psp_tmr", size, P.PSP_TMR_ALIGNMENT)
            self.tmr_size = size

    def tmr_load(self) -> None:
        mc, size, pa = (self.tmr.mc, self.tmr.size, self.tmr.offset) if self.tmr else (0, 0, 0)
        # virt_phy_addr: the driver passes the VRAM physical address too (the VRAM offset: no XGMI offset).
        self._command(A.GFX_CMD_ID_SETUP_TMR, f"{size:#x} bytes at {mc:#x}", buf_phy_addr_lo=mc & 0xFFFFFFFF,
                      buf_phy_addr_hi=mc >> 32, buf_size=size, tmr_flags=2,
                      system_phy_addr_lo=pa & 0xFFFFFFFF, system_phy_addr_hi=pa >> 32)
        self.am.log(1, f"psp: TMR {'reserved by the boot firmware' if not self.tmr else f'{size:#x} bytes at {mc:#x}'}")

    # --- 4/5. firmware ----------------------------------------------------------------------------------
    def load_ip_fw(self, ld: Load) -> dict:
        off = self.fw_buf.offset + self.fw_offsets[(ld.ucode_id, ld.file)]
        mc = self.fw_buf.mc + self.fw_offsets[(ld.ucode_id, ld.file)]
        self.am.vram.write(off, ld.data)
        what = f"{ld.type_name} from {ld.file} {ld.part}, {len(ld.data)} bytes"
        resp = self.submit(A.GFX_CMD_ID_LOAD_IP_FW, what, fw_phy_addr_lo=mc & 0xFFFFFFFF, fw_phy_addr_hi=mc >> 32,
                           fw_size=len(ld.data), fw_type=ld.fw_type)
        if resp["status"]:
            raise FirmwareRefused(f"firmware {ld.file} part {ld.part}: the PSP refused LOAD_IP_FW {ld.type_name} "
                                  f"with status {P.status_name(resp['status'])}", status=resp["status"])
        self.loaded.append(ld)
        return resp

    def load_rl(self) -> None:
        if self.rl is None or not self.rl.size:
            return
        self.am.vram.write(self.fw_pri.offset, bytes(P.BL_BUFFER_SIZE))
        self.am.vram.write(self.fw_pri.offset, self.rl.data)
        resp = self.submit(A.GFX_CMD_ID_LOAD_IP_FW, f"REG_LIST from {self.sos_file} rl",
                           fw_phy_addr_lo=self.fw_pri.mc & 0xFFFFFFFF, fw_phy_addr_hi=self.fw_pri.mc >> 32,
                           fw_size=self.rl.size, fw_type=A.GFX_FW_TYPE_REG_LIST)
        if resp["status"]:
            raise FirmwareRefused(f"firmware {self.sos_file} part rl: the PSP refused LOAD_IP_FW REG_LIST with "
                                  f"status {P.status_name(resp['status'])}", status=resp["status"])

    def load_ta(self, name: str) -> int:
        part = next((c for c in self.ta.components if c.name == name), None)
        if part is None:
            raise FirmwareRefused(f"firmware {self.ta_file} has no {name} TA "
                                  f"(it has {', '.join(c.name for c in self.ta.components)})")
        shared = self.ta_shared[name]
        self.am.vram.write(self.fw_pri.offset, bytes(P.BL_BUFFER_SIZE))
        self.am.vram.write(self.fw_pri.offset, part.data)
        cmd = A.GFX_CMD_ID_LOAD_ASD if name == "asd" else A.GFX_CMD_ID_LOAD_TA
        resp = self.submit(cmd, f"{name} from {self.ta_file}", app_phy_addr_lo=self.fw_pri.mc & 0xFFFFFFFF,
                           app_phy_addr_hi=self.fw_pri.mc >> 32, app_len=part.size,
                           cmd_buf_phy_addr_lo=shared.mc & 0xFFFFFFFF if _TA_SHARED.get(name) else 0,
                           cmd_buf_phy_addr_hi=shared.mc >> 32 if _TA_SHARED.get(name) else 0,
                           cmd_buf_len=_TA_SHARED.get(name, 0))
        if resp["status"]:
            raise FirmwareRefused(f"firmware {self.ta_file} part {name}: the PSP refused {P.CMD_NAMES[cmd]} with "
                                  f"status {P.status_name(resp['status'])}", status=resp["status"])
        self.sessions[name] = resp["session_id"]
        return resp["session_id"]

    def load_firmware(self) -> None:
        if self.smu and self.v.autoload and not self.v.pmfw_centralized:
            self.load_ip_fw(self.smu)
        for ld in self.plan:
            self.load_ip_fw(ld)
            if self.v.autoload and ld.ucode_id == A.AMDGPU_UCODE_ID_RLC_G:
                self._command(A.GFX_CMD_ID_AUTOLOAD_RLC, "all GFX firmware loaded")

    # --- lifecycle --------------------------------------------------------------------------------------
    def init_hw(self) -> None:
        """The full PSP bring-up: bootloader, ring, TMR, every firmware, the register list, the TAs asked for."""
        self.loaded = []
        self.bootload()
        self.ring_create()
        self.tmr_init()
        if self.smu and self.v.pmfw_centralized:
            self.load_ip_fw(self.smu)
        self.tmr_load()
        self.load_firmware()
        self.load_rl()
        for name in self.tas:
            self.load_ta(name)
        self.am.tmr_size = self.tmr_size                # SCRATCH_REG5 keeps it for the next partial boot

    def resume_hw(self) -> None:
        """The partial boot: the sOS still runs, with the TMR and every firmware of the full boot in it (the TMR
        is protected memory the PSP keeps while the chip is not reset). TMR re-init is the driver's side: the
        region is reserved again at its place with the size the full boot kept (SCRATCH_REG5), so nothing else
        is placed over it. No PSP command: the GFX block's MEC reset restarts the MEC from the code in the TMR."""
        self.loaded = []
        if not self.sos_alive:
            raise DeviceError("partial PSP boot: the sOS is not running (C2PMSG_81 is 0); a full boot is needed")
        if not self.v.boot_time_tmr:
            size = self.am.tmr_size or 0
            if not size or size % P.PSP_TMR_ALIGNMENT:
                raise DeviceError(f"partial PSP boot: SCRATCH_REG5 holds no TMR size ({size:#x}); a full boot is needed")
            self.tmr = self.am.boot.reserve("psp_tmr", size, P.PSP_TMR_ALIGNMENT)
            self.tmr_size = size
        self.am.log(2, "psp: sOS alive, TMR kept: no PSP command in a partial boot")

    def fini_hw(self) -> None:
        if self.ring_up:
            self.ring_destroy()

    # --- mode1 reset without the SMU ----------------------------------------------------------------------
    def mode1_reset(self) -> None:
        """Mode1 reset asked of the sOS (GFX_CTRL_CMD_ID_MODE1_RST in C2PMSG_64): the way when the PMFW cannot
        take the message (amdgpu_device_mode1_reset falls back to psp_gpu_reset). The sOS must be ready for a
        control command (C2PMSG_64 bit 31, status clear); the driver core then waits for the GPU to be back."""
        ctrl = self._reg(P.C2PMSG_CTRL)
        v = self._wait_reg(P.C2PMSG_CTRL, P.CTRL_RESPONSE, P.CTRL_RESPONSE | P.CTRL_STATUS_MASK,
                           "the PSP ready for a mode1 reset (C2PMSG_64 bit 31, status 0)")
        ctrl.write(A.GFX_CTRL_CMD_ID_MODE1_RST)
        self.ring_up = False
        self.am.log(1, f"psp: mode1 reset (C2PMSG_64 was {v:#x})")


_CMD_STRUCTS = {A.GFX_CMD_ID_LOAD_TOC: A.psp_gfx_cmd_load_toc, A.GFX_CMD_ID_SETUP_TMR: A.psp_gfx_cmd_setup_tmr,
                A.GFX_CMD_ID_LOAD_IP_FW: A.psp_gfx_cmd_load_ip_fw, A.GFX_CMD_ID_LOAD_TA: A.psp_gfx_cmd_load_ta,
                A.GFX_CMD_ID_LOAD_ASD: A.psp_gfx_cmd_load_ta, A.GFX_CMD_ID_UNLOAD_TA: A.psp_gfx_cmd_unload_ta,
                A.GFX_CMD_ID_DESTROY_TMR: None, A.GFX_CMD_ID_AUTOLOAD_RLC: None}
