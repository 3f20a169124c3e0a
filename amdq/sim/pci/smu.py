"""The simulated SMU: the MP1 power-management firmware (PMFW) behind its mailbox.

The driver writes the argument to MP1_SMN_C2PMSG_82 and the message id to C2PMSG_66; the firmware answers
in C2PMSG_90 with a response code of its message table (amdq.hw.smu, from the ppsmc headers) and leaves a
result in C2PMSG_82. It reads nothing else: no driver object, only its registers.

What this firmware models, per SMU family (13.0.0 for gfx1100, 13.0.6 for gfx942, 14.0.2/14.0.3 for
gfx1201): the version queries, feature enable/disable, the PPT power limit, the DPM clock tables with soft
and hard min/max per clock, and the resets. Responses as the firmware gives them: 0xFE for an id its
table does not have, 0xFD (bad prerequisite) for a DPM or power-limit message before the features are
enabled, 0xFF (failed) for a bad argument (unknown clock id, level index out of range, a power limit outside
the board's range, an unknown power source or reset type). A message of the table this model does not
implement is a simulator error naming it, never a made-up answer.

Mode1 reset: the firmware answers OK and resets the device when the driver has read the answer (the whole
chip, this firmware included: `dev.mode1_reset()`); after a reset the PMFW is not running until the PSP
loads it again (`start`), unless the board keeps it resident (`resident=True`), so a message sent in
between is never answered. Injection `smu_timeout[:msg=NAME]`: messages are taken and never answered.
ResetSDMA (13.0.6; `smu_v13_0_6_ppt.c` reset_sdma: the argument is the mask of SDMA instances): each engine of the
mask is reset (sim/pci/sdma.py `engine_reset`; nothing happens under the injection `reset_fails`), answered OK.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import DeviceError
from ...hw import smu as S
from .part import SimPart


@dataclass(frozen=True)
class Board:
    """What the PMFW knows of its board. Not hardware facts: the default power limit is the reference board's
    total board power (AMD product specifications); the limit range, the DPM levels and the firmware
    version are this simulator's choice, in the ranges those boards report."""
    power_default: int                        # W
    power_min: int
    power_max: int
    dpm: dict[str, tuple[int, ...]]           # PPCLK name -> DPM levels (MHz), ascending
    fine_grained: frozenset = frozenset({"GFXCLK"})
    fw_version: int = 0
    gfxclk: tuple[int, int] | None = None     # 13.0.6: GFXCLK range of the Get{Min,Max}GfxDpmFreq messages


BOARDS = {
    (13, 0, 0): Board(355, 210, 402, {"GFXCLK": (500, 2526), "SOCCLK": (500, 960, 1200), "UCLK": (96, 456, 772, 1249),
                                      "FCLK": (400, 1000, 1600, 1900)}, fw_version=0x004E4D00),
    (14, 0, 2): Board(304, 200, 340, {"GFXCLK": (500, 2970), "SOCCLK": (500, 960, 1200), "UCLK": (96, 456, 772, 1258),
                                      "FCLK": (400, 1000, 1600, 2200)}, fw_version=0x00684700),
    (13, 0, 6): Board(750, 400, 750, {"SOCCLK": (200, 800, 1000, 1143), "UCLK": (900, 1100, 1200, 1300),
                                      "FCLK": (1200, 1400, 1600, 2000)}, fine_grained=frozenset(),
                      fw_version=0x00556D00, gfxclk=(500, 2100)),
}

PPT_MESSAGES = {"SetPptLimit", "GetPptLimit"}
DPM_MESSAGES = {"SetSoftMinByFreq", "SetSoftMaxByFreq", "SetHardMinByFreq", "SetHardMaxByFreq", "GetMinDpmFreq",
                "GetMaxDpmFreq", "GetDpmFreqByIndex", "SetSoftMinGfxClk", "SetSoftMaxGfxClk", "GetMinGfxDpmFreq",
                "GetMaxGfxDpmFreq"}
NUM_LEVELS_INDEX = 0xFF            # GetDpmFreqByIndex: this index asks for the number of levels
FINE_GRAINED_BIT = 1 << 31         # ... whose answer carries the fine-grained flag in bit 31


class Reply(Exception):
    """A failure answer: the response code."""

    def __init__(self, code: int):
        self.code = code


@dataclass
class PMFW:
    running: bool = False
    fw_version: int = 0
    driver_if: int = 0
    features: bool = False
    power_limit: int = 0
    soft: dict[str, list[int]] = field(default_factory=dict)      # clock -> [min, max] (MHz)
    hard: dict[str, list[int]] = field(default_factory=dict)


class SimSMU(SimPart):
    name = "smu"

    def __init__(self, dev, board: Board | None = None, resident: bool | None = None):
        super().__init__(dev)
        self.table = S.table(dev.target.ip["MP1"])
        self.board = board or BOARDS[self.table.version]
        # None: the board's way. MI300 (gfx9.4) runs the PMFW the boot firmware loads from the IFWI (the driver's
        # smu_13_0_6 file carries none for the PSP to load); the Radeon boards wait for the PSP to load it.
        self.resident = dev.target.gfx_version == 9 if resident is None else resident
        self.fw = PMFW()
        self.pending_reset = False
        self.log: list[tuple[str, int, int]] = []        # (message, argument, response) as answered

    # -- power-on, firmware load -----------------------------------------------------------------------
    def _mb(self):
        return self.dev.raw.MP1

    def reset(self) -> None:
        mb = self._mb()
        for r in (S.MSG_REG, S.ARG_REG, S.RESP_REG):
            mb[r].write(0)
        self.fw = PMFW()
        self.pending_reset = False
        if self.resident:
            self.start()

    def start(self, fw_version: int | None = None, driver_if: int | None = None) -> None:
        """The PMFW starts (the PSP loaded it, or the board keeps it resident): its tables are at their
        defaults and it signals ready by a non-zero response register."""
        b = self.board
        self.fw = PMFW(True, fw_version if fw_version is not None else b.fw_version,
                       driver_if if driver_if is not None else self.table.driver_if, False, b.power_default,
                       {c: [lv[0], lv[-1]] for c, lv in self._clocks().items()},
                       {c: [lv[0], lv[-1]] for c, lv in self._clocks().items()})
        self._mb()[S.RESP_REG].write(self.table.result["OK"])

    def amdgpu_initialised(self) -> None:
        """A GPU amdgpu booted: the PMFW runs."""
        if not self.fw.running:
            self.start()

    def on_firmware(self, fw_type: int, image: bytes) -> None:
        """The PSP loaded firmware (SimDevice.firmware_loaded): the PMFW starts once it is its own."""
        from ...hw import am
        if fw_type == am.GFX_FW_TYPE_SMU:
            self.start()

    def save(self) -> dict:
        f = self.fw
        return {"running": f.running, "fw_version": f.fw_version, "driver_if": f.driver_if, "features": f.features,
                "power_limit": f.power_limit, "soft": f.soft, "hard": f.hard,
                "mailbox": [self._mb()[r].read() for r in (S.MSG_REG, S.ARG_REG, S.RESP_REG)]}

    def load(self, state: dict) -> None:
        self.fw = PMFW(state["running"], state["fw_version"], state["driver_if"], state["features"],
                       state["power_limit"], {k: list(v) for k, v in state["soft"].items()},
                       {k: list(v) for k, v in state["hard"].items()})
        for r, v in zip((S.MSG_REG, S.ARG_REG, S.RESP_REG), state["mailbox"]):
            self._mb()[r].write(v)

    # -- the mailbox -----------------------------------------------------------------------------------
    def on_write_regMP1_SMN_C2PMSG_66(self, value: int) -> None:
        if not self.fw.running:
            return                                   # nobody listens: the response register stays as it is
        inj = self.dev.inject.armed.get("smu_timeout") if self.dev.inject is not None else None
        name = self.table.msg_name(value & 0xFFFF)
        if inj is not None and inj.get("msg", name) == name:
            inj["_hit"] = True
            return
        mb = self._mb()
        arg = mb[S.ARG_REG].read()
        try:
            if (value & 0xFFFF) not in self.table.msg.values() or value >> 16:
                raise Reply(self.table.result["UnknownCmd"])
            out = self._execute(name, arg)
            code = self.table.result["OK"]
        except Reply as r:
            code, out = r.code, None
        if out is not None:
            mb[S.ARG_REG].write(out & 0xFFFFFFFF)
        mb[S.RESP_REG].write(code)
        self.log.append((name, arg, code))

    def on_read_regMP1_SMN_C2PMSG_90(self) -> int | None:
        if self.pending_reset:                       # the driver has the OK: now the chip resets
            self.pending_reset = False
            code = self._mb()[S.RESP_REG].read()
            self.dev.mode1_reset()
            return code
        return None

    # -- the firmware ----------------------------------------------------------------------------------
    def _clocks(self) -> dict[str, tuple[int, ...]]:
        return {c: lv for c, lv in self.board.dpm.items() if c in self.table.clk} | (
            {"GFXCLK": self.board.gfxclk} if self.board.gfxclk else {})

    def _failed(self) -> Reply:
        return Reply(self.table.result["Failed"])

    def _clock(self, arg: int) -> tuple[str, tuple[int, ...]]:
        cid = (arg >> 16) & 0xFFFF
        for name, v in self.table.clk.items():
            if v == cid and name in self.board.dpm:
                return name, self.board.dpm[name]
        raise self._failed()                         # a clock this firmware has no DPM table for

    def _execute(self, name: str, arg: int) -> int | None:
        f, t, b = self.fw, self.table, self.board
        if name in PPT_MESSAGES | DPM_MESSAGES and not f.features:
            raise Reply(t.result["CmdRejectedPrereq"])
        if name == "GetSmuVersion":
            return f.fw_version
        if name == "GetDriverIfVersion":
            return f.driver_if
        if name == "EnableAllSmuFeatures":
            f.features = True
            return None
        if name == "DisableAllSmuFeatures":
            f.features = False
            return None
        if name in ("GetRunningSmuFeaturesLow", "GetEnabledSmuFeaturesLow"):
            return 0xFFFFFFFF if f.features else 0
        if name in ("GetRunningSmuFeaturesHigh", "GetEnabledSmuFeaturesHigh"):
            return 0xFFFFFFFF if f.features else 0
        if name == "SetPptLimit":
            if not b.power_min <= arg <= b.power_max:         # the argument is the limit in watts
                raise self._failed()
            f.power_limit = arg
            return None
        if name == "GetPptLimit":
            if t.version != (13, 0, 6) and (arg >> 16) not in (0, 1):        # power source AC 0 / DC 1
                raise self._failed()
            return f.power_limit
        if name in ("SetSoftMinGfxClk", "SetSoftMaxGfxClk"):
            lo, hi = b.gfxclk or (0, 0)
            if not b.gfxclk or not lo <= arg <= hi:
                raise self._failed()
            f.soft["GFXCLK"][name == "SetSoftMaxGfxClk"] = arg
            return None
        if name in ("GetMinGfxDpmFreq", "GetMaxGfxDpmFreq"):
            if not b.gfxclk:
                raise self._failed()
            return b.gfxclk[name == "GetMaxGfxDpmFreq"]
        if name in ("SetSoftMinByFreq", "SetSoftMaxByFreq", "SetHardMinByFreq", "SetHardMaxByFreq"):
            clk, levels = self._clock(arg)
            mhz = arg & 0xFFFF
            is_max = name.endswith("MaxByFreq")
            # 0 as a minimum and 0xFFFF as a maximum ask for no limit; other requests are held to the table
            mhz = levels[-1] if is_max and mhz == 0xFFFF else levels[0] if not is_max and mhz == 0 else mhz
            if not levels[0] <= mhz <= levels[-1]:
                raise self._failed()
            (f.soft if "Soft" in name else f.hard)[clk][is_max] = mhz
            return None
        if name in ("GetMinDpmFreq", "GetMaxDpmFreq"):
            _, levels = self._clock(arg)
            return levels[-1] if name == "GetMaxDpmFreq" else levels[0]
        if name == "GetDpmFreqByIndex":
            clk, levels = self._clock(arg)
            idx = arg & 0xFFFF
            if idx == NUM_LEVELS_INDEX:
                return len(levels) | (FINE_GRAINED_BIT if clk in b.fine_grained else 0)
            if idx >= len(levels):
                raise self._failed()
            return levels[idx]
        if name == "Mode1Reset":
            self.pending_reset = True
            return None
        if name == "ResetSDMA":                      # 13.0.6: the argument is the mask of SDMA instances to reset
            sdma = getattr(self.dev, "sdma", None)
            for n in range(32):
                if arg >> n & 1 and sdma is not None:
                    sdma.engine_reset(n)
            return None
        if name == "GfxDriverReset":                 # 13.0.6: the argument says which reset
            if arg != t.reset_type.get("DRIVER_MODE_1_RESET"):
                if arg in t.reset_type.values():
                    raise DeviceError(f"simulated SMU {'.'.join(map(str, t.version))}: GfxDriverReset type {arg} "
                                      "(only the mode1 reset is modelled)")
                raise self._failed()
            self.pending_reset = True
            return None
        raise DeviceError(f"simulated SMU {'.'.join(map(str, t.version))}: message {name} "
                          f"({t.msg[name]:#x}) is not modelled")

    # -- what the firmware holds (for a device report) -------------------------------------------------
    def clock_range(self, clk: str, hard: bool = False) -> tuple[int, int]:
        lo, hi = (self.fw.hard if hard else self.fw.soft)[clk]
        return lo, hi
