"""The simulated PSP (MP0): the bootloader before the secure OS runs, then the sOS's KM ring.

What it reads is what the hardware reads: its C2PMSG mailboxes, the 1 MiB bootloader buffer, the ring,
the command buffers and the firmware images by memory-controller address (`dev.mc_read`), and the header
each image starts with (the signed-image header of amdq.hw.psp, or the marker of amdq's stand-in images).
Payloads are opaque. It answers as PSP firmware does: bootloader status in C2PMSG_35, ring-control status
in C2PMSG_64, the response (status, session, TMR address, TMR size) in the command buffer and the fence
value at the fence address; GFX_CTRL_CMD_ID_MODE1_RST in C2PMSG_64 resets the chip (amdgpu's psp_gpu_reset,
the way when the PMFW cannot take Mode1Reset). Facts and their sources: amdq/hw/psp.py.

Simulator choices (not hardware facts) are named SIM_* below. Fault injection: `psp_refuse` (kind
registered through INJECT_KINDS) refuses the next firmware load -- bootloader component, IP firmware or
TA -- with `status` (default TEE_ERROR_SECURITY, as an image whose signature does not verify), optionally
only a given `fw_type`.
"""
from __future__ import annotations

import struct
from typing import Any

from ...errors import AmdqError
from ...hw import am
from ...hw import psp as P
from .part import SimPart

INJECT_KINDS = {"psp_refuse": "psp"}

# The TMR size the simulated sOS answers to LOAD_TOC. A real sOS computes it from the TOC's entries, whose
# format is not public; this is the simulator's choice (a multiple of PSP_TMR_ALIGNMENT).
SIM_TOC_TMR_SIZE = 0x1300000
SIM_SOS_SIGN_OF_LIFE = 0x1      # any non-zero value tells the driver the sOS runs (psp_v13_0_is_sos_alive)

_U32 = struct.Struct("<I")


class _Refuse(Exception):
    def __init__(self, status: int, why: str):
        super().__init__(why)
        self.status, self.why = status, why


def check_image(data: bytes, size: int, ids: frozenset[int] | set[int] | None, standin: tuple = (),
                unsigned_ok: bool = False) -> None:
    """Accept an image by its header as the sOS / bootloader does, or raise _Refuse with the status.

    `ids`: the header fw_id values the requested type may carry (None: any); `standin`: (file name piece, part)
    pairs an amdq stand-in image of that type names; `size`: the bytes the image may occupy."""
    if data.startswith(P.STANDIN_MAGIC):
        words = data[len(P.STANDIN_MAGIC):].split(b" ", 2)
        if len(words) < 3:
            raise _Refuse(P.TEE_ERROR_BAD_FORMAT, "stand-in marker without file and part")
        file, part = words[0].decode(errors="replace"), words[1].decode(errors="replace")
        if standin and not any(sfx in file and part == p for sfx, p in standin):
            raise _Refuse(P.TEE_ERROR_BAD_PARAMETERS, f"stand-in image of {file} {part} is not the type requested")
        return
    if len(data) < P.PS1_HEADER_SIZE:
        raise _Refuse(P.TEE_ERROR_BAD_FORMAT, f"{len(data)} bytes, shorter than the image header")
    h = P.amd_fw_header.unpack(data)
    if h["signature"] != P.PS1_SIGNATURE:
        if unsigned_ok:
            return
        raise _Refuse(P.TEE_ERROR_BAD_FORMAT, f"no image header (signature {h['signature']!r})")
    if h["sig_opt"] != 1:
        raise _Refuse(P.TEE_ERROR_SECURITY, "image not signed")
    sig = P.SIG_LEN.get(h["sig_id"])
    if sig is None:
        raise _Refuse(P.TEE_ERROR_BAD_FORMAT, f"unknown signature id {h['sig_id']}")
    need = P.PS1_HEADER_SIZE + h["fw_size_signed"] + sig
    if need > size:
        raise _Refuse(P.TEE_ERROR_BAD_FORMAT, f"image of {need:#x} bytes does not fit the {size:#x} given")
    if ids is not None and h["fw_id"] not in ids:
        raise _Refuse(P.TEE_ERROR_BAD_PARAMETERS, f"image id {h['fw_id']:#x} is not the type requested")


class SimPSP(SimPart):
    """The PSP of one simulated device. `SimPSP(dev)` gives the class whose register handlers carry the
    mailbox names of the device's MP0 generation (MP0_SMN_* on 13.x, MPASP_SMN_* on 14.x)."""
    name = "psp"
    prefix = ""

    def __new__(cls, dev: Any):
        if cls is SimPSP:
            major = tuple(dev.target.ip["MP0"])[0]
            cls = _CLASSES.get(major)
            if cls is None:
                raise AmdqError(f"no simulated PSP for MP0 {'.'.join(map(str, dev.target.ip['MP0']))}")
        return super().__new__(cls)

    def __init__(self, dev: Any):
        super().__init__(dev)
        self.version = P.version(tuple(dev.target.ip["MP0"]))
        self.faults: list[str] = []         # what the PSP could not do (unreachable addresses, bad pointers)
        self.commands: list[tuple[str, int]] = []   # (command, status) answered on the ring, in order
        self._clear()

    # --- state ------------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Power on / mode1 reset: the bootloader waits for its first component; no sOS, ring or TMR. (The
        device calls it once its register file exists, and on every mode1 reset.)"""
        self._clear()
        for n in (P.C2PMSG_BL_ADDR, P.C2PMSG_SOS_ALIVE, P.C2PMSG_CTRL, P.C2PMSG_GPCOM_WPTR,
                  P.C2PMSG_GPCOM_RPTR, P.C2PMSG_RING_LO, P.C2PMSG_RING_HI, P.C2PMSG_RING_SIZE):
            self._set(n, 0)
        self._set(P.C2PMSG_VMBX, P.BL_READY)
        self._set(P.C2PMSG_BL_CMD, P.BL_READY)

    def _clear(self) -> None:
        self.bootloaded: list[str] = []
        self.sos_alive = False
        self.sos_version = 0
        self.ring: dict | None = None
        self.tmr: dict | None = None
        self.tmr_next = 0
        self.fw: dict[int, dict] = {}       # fw_type -> what was loaded
        self.autoload = False
        self.sessions: dict[int, str] = {}
        self.next_session = 1

    def save(self) -> dict:
        """What a PSP keeps while the driver restarts (no mode1 reset): the running sOS and its TMR with the
        firmware loaded into it. The ring is the driver's and is gone."""
        return {"bootloaded": list(self.bootloaded), "sos_alive": self.sos_alive, "sos_version": self.sos_version,
                "tmr": dict(self.tmr) if self.tmr else None, "tmr_next": self.tmr_next,
                "fw": {str(k): dict(v) for k, v in self.fw.items()}, "autoload": self.autoload}

    def load(self, state: dict) -> None:
        self.reset()
        self.bootloaded = list(state.get("bootloaded", []))
        self.sos_alive = bool(state.get("sos_alive"))
        self.sos_version = int(state.get("sos_version", 0))
        self.tmr = dict(state["tmr"]) if state.get("tmr") else None
        self.tmr_next = int(state.get("tmr_next", 0))
        self.fw = {int(k): dict(v) for k, v in state.get("fw", {}).items()}
        self.autoload = bool(state.get("autoload"))
        if self.sos_alive:
            self._sos_running()

    def loaded(self, fw_type: int) -> bool:
        """Whether firmware of this GFX_FW_TYPE sits in the TMR (the RLC/IMU autoload asks)."""
        return fw_type in self.fw

    @property
    def loaded_types(self) -> list[int]:
        return list(self.fw)

    # --- registers --------------------------------------------------------------------------------------
    def _r(self, n: int):
        return self.dev.raw.MP0[self.prefix + str(n)]

    def _set(self, n: int, v: int) -> None:
        self._r(n).write(v & 0xFFFFFFFF)

    def _get(self, n: int) -> int:
        return self._r(n).read()

    def _sos_running(self) -> None:
        self._set(P.C2PMSG_SOS_ALIVE, SIM_SOS_SIGN_OF_LIFE)
        if self.version.sos_version_reg:
            self._set(P.C2PMSG_SOS_VERSION, self.sos_version)
        self._set(P.C2PMSG_CTRL, P.CTRL_RESPONSE)        # ready for ring creation (MBOX_TOS_READY_FLAG)

    def _mc(self, addr: int, n: int, what: str) -> bytes:
        try:
            return bytes(self.dev.mc_read(addr, n))
        except AmdqError as e:
            self.faults.append(f"{what}: {e}")
            raise _Refuse(P.TEE_ERROR_BAD_PARAMETERS, f"{what} at {addr:#x}+{n:#x} is not reachable ({e})") from None

    def _refusal(self, fw_type: int | None) -> int | None:
        """The armed psp_refuse injection's status if it applies to this load (it is used up)."""
        inj = getattr(self.dev, "inject", None)
        if inj is None or "psp_refuse" not in inj:
            return None
        p = inj.armed["psp_refuse"]
        want = p.get("fw_type")
        if want is not None and want != fw_type:
            return None
        inj.take("psp_refuse")
        return int(p.get("status", P.TEE_ERROR_SECURITY))

    # --- bootloader: C2PMSG_35 / 36 ----------------------------------------------------------------------
    def bootloader_command(self, value: int) -> None:
        if value & P.BL_READY:             # the ready flag is the bootloader's to set
            return
        try:
            self._bootload(value)
            self._set(P.C2PMSG_BL_CMD, P.BL_READY)
        except _Refuse as r:
            self.faults.append(f"bootloader {P.BL_NAMES.get(value, hex(value))}: {r.why}")
            self._set(P.C2PMSG_BL_CMD, P.BL_READY | P.short_status(r.status, 8))

    def _bootload(self, cmd: int) -> None:
        if self.sos_alive:
            raise _Refuse(P.TEE_ERROR_BAD_STATE, "the sOS runs; the bootloader takes no more components")
        name = P.BL_COMMANDS.get(cmd)
        if name is None:
            raise _Refuse(P.TEE_ERROR_NOT_SUPPORTED, f"unknown bootloader command {cmd:#x}")
        if name in self.bootloaded:
            raise _Refuse(P.TEE_ERROR_BAD_STATE, f"{name} is loaded already")
        if name == "sos" and "sys_drv" not in self.bootloaded:
            raise _Refuse(P.TEE_ERROR_BAD_STATE, "the sOS needs the system driver first")
        addr = self._get(P.C2PMSG_BL_ADDR) << P.BL_ADDR_SHIFT
        head = self._mc(addr, P.PS1_HEADER_SIZE, f"bootloader buffer ({name})")
        status = self._refusal(None)
        if status is not None:
            raise _Refuse(status, f"{name} refused (injected)")
        check_image(head, P.BL_BUFFER_SIZE, {P.BL_FW_IDS[name]}, (("_sos.bin", name),),
                    unsigned_ok=name in P.UNSIGNED_OK)
        self.bootloaded.append(name)
        if name == "sos":
            h = P.amd_fw_header.unpack(head)
            self.sos_version = h["version"] if h["signature"] == P.PS1_SIGNATURE else 0
            self.sos_alive = True
            self._sos_running()

    def amdgpu_initialised(self) -> None:
        """A GPU amdgpu booted: its sOS runs (with amdgpu's ring and TMR, unknown to this driver)."""
        self.bootloaded = list(P.BL_FW_IDS)
        self.sos_alive = True
        self._sos_running()

    # --- ring control: C2PMSG_64 ------------------------------------------------------------------------
    def ring_control(self, value: int) -> None:
        if not self.sos_alive or value & P.CTRL_RESPONSE:
            return                         # nobody answers before the sOS runs
        cmd = value & am.GFX_CMD_ID_MASK
        status = P.TEE_SUCCESS
        if cmd == am.PSP_RING_TYPE__KM << 16:               # GFX_CTRL_CMD_ID_INIT_GPCOM_RING
            addr = self._get(P.C2PMSG_RING_LO) | self._get(P.C2PMSG_RING_HI) << 32
            size = self._get(P.C2PMSG_RING_SIZE)
            try:
                if size == 0 or size % P.FRAME_SIZE:
                    raise _Refuse(P.TEE_ERROR_BAD_PARAMETERS, f"ring size {size:#x} is not a multiple of a frame")
                self._mc(addr, size, "KM ring")
                self.ring = {"addr": addr, "size": size}
                self._set(P.C2PMSG_GPCOM_WPTR, 0)      # a new ring starts empty: both pointers at 0
                self._set(P.C2PMSG_GPCOM_RPTR, 0)
            except _Refuse as r:
                self.faults.append(f"ring create: {r.why}")
                self.ring, status = None, r.status
        elif cmd == am.GFX_CTRL_CMD_ID_DESTROY_RINGS:
            self.ring = None
        elif cmd == am.GFX_CTRL_CMD_ID_MODE1_RST:      # the sOS resets the chip (itself included): no answer
            self.dev.mode1_reset()
            return
        elif cmd == am.GFX_CTRL_CMD_ID_INIT_RBI_RING:
            status = P.TEE_ERROR_NOT_SUPPORTED
        else:
            status = P.PSP_ERR_UNKNOWN_COMMAND
        self._set(P.C2PMSG_CTRL, P.CTRL_RESPONSE | P.short_status(status, 16))

    # --- the KM ring: C2PMSG_67 -------------------------------------------------------------------------
    def ring_doorbell(self, wptr: int) -> None:
        if self.ring is None:
            self.faults.append(f"write pointer {wptr:#x} with no ring")
            return
        ring_dw, frame_dw = self.ring["size"] // 4, P.FRAME_SIZE // 4
        if wptr % frame_dw or wptr >= ring_dw:
            self.faults.append(f"write pointer {wptr:#x} is not a frame boundary inside the {ring_dw:#x}-dword ring")
            return
        rptr = self._get(P.C2PMSG_GPCOM_RPTR)
        while rptr != wptr:
            self._frame(self.ring["addr"] + rptr * 4)
            rptr = (rptr + frame_dw) % ring_dw
            self._set(P.C2PMSG_GPCOM_RPTR, rptr)

    def _frame(self, addr: int) -> None:
        try:
            f = am.psp_gfx_rb_frame.unpack(self._mc(addr, P.FRAME_SIZE, "ring frame"))
        except _Refuse:
            return
        cmd_addr = f["cmd_buf_addr_lo"] | f["cmd_buf_addr_hi"] << 32
        fence = f["fence_addr_lo"] | f["fence_addr_hi"] << 32
        try:
            cmd = self._mc(cmd_addr, am.psp_gfx_cmd_resp.size, "command buffer")
        except _Refuse:
            return                         # nowhere to answer: the driver's fence wait runs out
        cmd_id = _U32.unpack_from(cmd, 8)[0]
        name = P.CMD_NAMES.get(cmd_id, f"{cmd_id:#x}")
        resp = {"status": P.TEE_SUCCESS}
        try:
            self._mc(fence, 4, "fence")
            resp.update(self._execute(cmd_id, cmd[am.psp_gfx_cmd_resp.offsetof("cmd"):]))
        except _Refuse as r:
            self.faults.append(f"{name}: {r.why}")
            resp = {"status": r.status}
        self.commands.append((name, resp["status"]))
        out = bytearray(am.psp_gfx_resp.size)
        am.psp_gfx_resp.pack_into(out, 0, **resp)
        try:
            self.dev.mc_write(cmd_addr + P.RESP_OFFSET, bytes(out))
            self.dev.mc_write(fence, _U32.pack(f["fence_value"]))
        except AmdqError as e:
            self.faults.append(f"{name}: answer not written ({e})")

    # --- GFX commands -----------------------------------------------------------------------------------
    def _execute(self, cmd_id: int, body: bytes) -> dict:
        if cmd_id == am.GFX_CMD_ID_LOAD_TOC:
            c = am.psp_gfx_cmd_load_toc.unpack(body)
            addr = c["toc_phy_addr_lo"] | c["toc_phy_addr_hi"] << 32
            data = self._mc(addr, c["toc_size"], "TOC")
            check_image(data, c["toc_size"], P.FW_IDS[am.GFX_FW_TYPE_TOC], P.STANDIN_PARTS[am.GFX_FW_TYPE_TOC])
            return {"tmr_size": SIM_TOC_TMR_SIZE}
        if cmd_id == am.GFX_CMD_ID_SETUP_TMR:
            return self._setup_tmr(am.psp_gfx_cmd_setup_tmr.unpack(body))
        if cmd_id == am.GFX_CMD_ID_DESTROY_TMR:
            if self.tmr is None:
                raise _Refuse(P.TEE_ERROR_BAD_STATE, "no TMR to destroy")
            self.tmr, self.fw, self.tmr_next, self.autoload = None, {}, 0, False
            return {}
        if cmd_id == am.GFX_CMD_ID_LOAD_IP_FW:
            return self._load_ip_fw(am.psp_gfx_cmd_load_ip_fw.unpack(body))
        if cmd_id == am.GFX_CMD_ID_AUTOLOAD_RLC:
            if am.GFX_FW_TYPE_RLC_G not in self.fw:
                raise _Refuse(P.TEE_ERROR_BAD_STATE, "RLC autoload before the RLC_G firmware")
            if not self._tell("autoload_rlc"):
                raise _Refuse(P.TEE_ERROR_BAD_STATE, "the RLC could not start (its firmware parts are missing)")
            self.autoload = True
            return {}
        if cmd_id in (am.GFX_CMD_ID_LOAD_TA, am.GFX_CMD_ID_LOAD_ASD):
            return self._load_ta(am.psp_gfx_cmd_load_ta.unpack(body), cmd_id)
        if cmd_id == am.GFX_CMD_ID_UNLOAD_TA:
            sid = am.psp_gfx_cmd_unload_ta.unpack(body)["session_id"]
            if self.sessions.pop(sid, None) is None:
                raise _Refuse(P.TEE_ERROR_ITEM_NOT_FOUND, f"no TA session {sid}")
            return {}
        raise _Refuse(P.PSP_ERR_UNKNOWN_COMMAND, f"command {cmd_id:#x} is not one this sOS knows")

    def _tell(self, hook: str, *args):
        """Tell the device a firmware event (SimDevice.firmware_loaded / autoload_rlc); a bare test fixture
        without the hook hears nothing (and an autoload succeeds)."""
        f = getattr(self.dev, hook, None)
        return True if f is None else f(*args)

    def _setup_tmr(self, c: dict) -> dict:
        addr = c["buf_phy_addr_lo"] | c["buf_phy_addr_hi"] << 32
        size = c["buf_size"]
        if size == 0:
            if not self.version.boot_time_tmr:
                raise _Refuse(P.TEE_ERROR_BAD_PARAMETERS, "SETUP_TMR of 0 bytes; this PSP has no boot-time TMR")
            tmr = {"mc": 0, "size": 0, "boot_time": True}
        else:
            if addr % 0x1000 or size % 0x1000:
                raise _Refuse(P.TEE_ERROR_BAD_PARAMETERS, f"TMR {addr:#x}+{size:#x} is not 4 KiB aligned")
            self._mc(addr, 1, "TMR start")
            self._mc(addr + size - 1, 1, "TMR end")
            tmr = {"mc": addr, "size": size, "boot_time": False,
                   "system_pa": c["system_phy_addr_lo"] | c["system_phy_addr_hi"] << 32}
        if self.tmr is not None and (self.tmr["mc"], self.tmr["size"]) != (tmr["mc"], tmr["size"]):
            raise _Refuse(P.TEE_ERROR_BAD_STATE, f"a TMR is set up at {self.tmr['mc']:#x}+{self.tmr['size']:#x}")
        if self.tmr is None:
            self.tmr = tmr
        return {}

    def _load_ip_fw(self, c: dict) -> dict:
        t, size = c["fw_type"], c["fw_size"]
        addr = c["fw_phy_addr_lo"] | c["fw_phy_addr_hi"] << 32
        if t not in P.FW_IDS and t not in P.STANDIN_PARTS:
            raise _Refuse(P.TEE_ERROR_NOT_SUPPORTED, f"firmware type {t:#x} is not one this sOS loads")
        if self.tmr is None and t != am.GFX_FW_TYPE_SMU:
            raise _Refuse(P.TEE_ERROR_BAD_STATE, f"{P.FW_TYPE_NAMES.get(t, t)} before SETUP_TMR")
        status = self._refusal(t)
        if status is not None:
            raise _Refuse(status, f"{P.FW_TYPE_NAMES.get(t, t)} refused (injected)")
        data = self._mc(addr, max(size, 1), P.FW_TYPE_NAMES.get(t, hex(t)))
        check_image(data[:max(P.PS1_HEADER_SIZE, len(P.STANDIN_MAGIC) + 96)], size, P.FW_IDS.get(t),
                    P.STANDIN_PARTS.get(t, ()))
        off = self.tmr_next
        self.tmr_next += -(-size // 0x1000) * 0x1000
        self.fw[t] = {"size": size, "tmr_offset": off}
        self._tell("firmware_loaded", t, data)           # the block whose code it is hears of it
        base = self.tmr["mc"] if self.tmr else 0
        return {"fw_addr_lo": (base + off) & 0xFFFFFFFF, "fw_addr_hi": (base + off) >> 32}

    def _load_ta(self, c: dict, cmd_id: int) -> dict:
        addr = c["app_phy_addr_lo"] | c["app_phy_addr_hi"] << 32
        n = c["app_len"]
        if self.tmr is None:
            raise _Refuse(P.TEE_ERROR_BAD_STATE, "TA before SETUP_TMR")
        status = self._refusal(None)
        if status is not None:
            raise _Refuse(status, "TA refused (injected)")
        data = self._mc(addr, max(n, 1), "TA")
        check_image(data[:P.PS1_HEADER_SIZE], n, None)
        if c["cmd_buf_len"]:
            self._mc(c["cmd_buf_phy_addr_lo"] | c["cmd_buf_phy_addr_hi"] << 32, c["cmd_buf_len"], "TA shared buffer")
        sid = self.next_session
        self.next_session += 1
        self.sessions[sid] = P.CMD_NAMES[cmd_id]
        return {"session_id": sid}


def _handlers(prefix: str) -> type:
    """The SimPSP subclass whose handlers are named after one generation's mailbox registers."""
    ns = {"prefix": prefix,
          f"on_write_{prefix}{P.C2PMSG_BL_CMD}": lambda self, v: self.bootloader_command(v),
          f"on_write_{prefix}{P.C2PMSG_CTRL}": lambda self, v: self.ring_control(v),
          f"on_write_{prefix}{P.C2PMSG_GPCOM_WPTR}": lambda self, v: self.ring_doorbell(v)}
    return type(f"SimPSP_{prefix[3:].split('_')[0]}", (SimPSP,), ns)


_CLASSES = {major: _handlers(prefix) for major, prefix in P.REG_PREFIX.items()}


def for_target(dev: Any) -> SimPSP:
    """The simulated PSP of a device (the class of its generation's mailbox registers)."""
    return SimPSP(dev)
