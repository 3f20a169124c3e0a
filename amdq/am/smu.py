"""The SMU block: messages to the power-management firmware (PMFW) over the MP1 mailbox.

The protocol (Linux smu_cmn.c `smu_cmn_send_smc_msg_with_param`): wait until the response register
C2PMSG_90 is non-zero (the previous message is done), clear it, write the argument to C2PMSG_82 and the
message id to C2PMSG_66, poll C2PMSG_90 again; the firmware's result is then in C2PMSG_82. Message ids,
response codes and clock ids come from the SMU family's table (amdq.hw.smu): 13.0.0 (gfx1100), 13.0.6
(gfx942), 14.0.2/14.0.3 (gfx1201). A failure answer is an SMUError naming the message, its argument and the
response; a message never answered is an AMTimeout naming it. The first message of a session does not wait
for the answer to the previous one (smu_cmn.c, SMU_FW_INIT: "ignore initial smu response register value"):
the mailbox may hold a message a previous session sent and never saw answered (a PMFW that hung then, a
process killed mid-message), and waiting for that answer would keep the GPU from ever being reset.

A compute boot (init_hw): the firmware version and driver-interface check (GetSmuVersion,
GetDriverIfVersion; a different interface version is reported, as amdgpu does, and the driver goes on),
EnableAllSmuFeatures, the power limit from AM_POWER_LIMIT (watts; the firmware's default otherwise), and
the clock levels: GFXCLK and UCLK at their highest DPM level unless told otherwise. Mode1 reset is
Mode1Reset (13.0.0, 14.0.x) or GfxDriverReset(mode 1) (13.0.6).
"""
from __future__ import annotations

import os

from ..errors import AMTimeout, DeviceError, DeviceLost, SMUError
from ..hw import smu as S
from .ip import AMContext, IPBlock

DEFAULT_TIMEOUT_MS = 2000.0          # amdgpu: usec_timeout * 20 polls of 1 us
NUM_LEVELS_INDEX = 0xFF              # GetDpmFreqByIndex with this index answers the number of levels
FINE_GRAINED_BIT = 1 << 31
PROBE_MS = 200.0                     # is the PMFW there: GetSmuVersion answers in well under a millisecond
POWER_SOURCE_AC = 0                  # SMU_POWER_SOURCE_AC (GetPptLimit argument bits 23:16)


class SMU(IPBlock):
    name = "smu"

    def __init__(self, am: AMContext, clocks: dict[str, int] | None = None):
        super().__init__(am)
        self.table = S.table(am.target.ip["MP1"])
        self.timeout_ms = float(os.environ.get("AMDQ_WAIT_TIMEOUT_MS") or DEFAULT_TIMEOUT_MS)
        self.clocks = dict(clocks) if clocks is not None else {"GFXCLK": -1, "UCLK": -1}   # level (-1: highest)
        self.fw_version = 0
        self.driver_if = 0
        self.levels: dict[str, list[int]] = {}
        self.held: dict[str, int] = {}       # clock -> MHz this session set (set_clock_level)
        self.fresh = True                    # no message sent in this session yet (amdgpu's SMU_FW_INIT)

    # -- the mailbox -------------------------------------------------------------------------------------
    @property
    def _mb(self):
        return self.am.regs.MP1

    def _poll(self, what: str) -> int:
        """Poll the response register until the firmware answers; the answer (read once, as the last poll)."""
        seen = [S.RESP_NONE]

        def answered() -> bool:
            v = seen[0] = self._mb[S.RESP_REG].read()
            if v == S.RESP_OFF_BUS:
                raise DeviceLost(f"SMU: {S.RESP_REG} reads {v:#x}: the GPU is off the bus")
            return v != S.RESP_NONE
        self.am.wait(answered, self.timeout_ms, what)
        return seen[0]

    def send(self, name: str, arg: int = 0) -> int:
        """Send message `name` with `arg`; the firmware's result (C2PMSG_82)."""
        t = self.table
        if name not in t.msg:
            raise DeviceError(f"SMU {'.'.join(map(str, t.version))} has no message {name}")
        if not 0 <= arg <= 0xFFFFFFFF:
            raise DeviceError(f"SMU message {name}: argument {arg:#x} is not a 32-bit value")
        mb = self._mb
        if self.fresh:                       # read once, not waited for: only a GPU off the bus stops it
            self.fresh = False
            if mb[S.RESP_REG].read() == S.RESP_OFF_BUS:
                raise DeviceLost(f"SMU: {S.RESP_REG} reads {S.RESP_OFF_BUS:#x}: the GPU is off the bus")
        else:
            self._poll(f"SMU message {name}: {S.RESP_REG} answer to the previous message")
        mb[S.RESP_REG].write(0)
        mb[S.ARG_REG].write(arg)
        mb[S.MSG_REG].write(t.msg[name])
        code = self._poll(f"SMU message {name} ({t.msg[name]:#x}, argument {arg:#x}): {S.RESP_REG}")
        if code != t.result["OK"]:
            raise SMUError(f"SMU message {name} ({t.msg[name]:#x}) with argument {arg:#x} failed: response "
                           f"{code:#x} ({t.result_name(code)})", message=name, argument=arg, response=code)
        out = mb[S.ARG_REG].read()
        self.am.log(3, f"smu: {name}({arg:#x}) -> {out:#x}")
        return out

    # -- lifecycle ---------------------------------------------------------------------------------------
    def init_hw(self) -> None:
        self.check_version()
        self.send("EnableAllSmuFeatures")
        limit = os.environ.get("AM_POWER_LIMIT", "").strip()
        if limit:
            try:
                watts = int(limit, 0)
            except ValueError:
                raise DeviceError(f"AM_POWER_LIMIT={limit!r} is not a power limit in watts") from None
            self.set_power_limit(watts)
        for clk, level in self.clocks.items():
            self.set_clock_level(clk, level)

    def check_version(self) -> None:
        self.fw_version = self.send("GetSmuVersion")
        self.driver_if = self.send("GetDriverIfVersion")
        v = self.fw_version
        self.am.log(1, f"smu: firmware {v >> 16 & 0xFF}.{v >> 8 & 0xFF}.{v & 0xFF} ({v:#010x}), driver interface "
                       f"{self.driver_if:#x}")
        if self.driver_if != self.table.driver_if:
            self.am.log(1, f"smu: driver interface {self.driver_if:#x} of the firmware is not the "
                           f"{self.table.driver_if:#x} this driver speaks; going on, as amdgpu does")

    def unresponsive(self, timeout_ms: float | None = None) -> str | None:
        """Why the PMFW cannot take a message (it does not answer GetSmuVersion within `timeout_ms`, or answers
        it with a failure), or None when it answers."""
        saved, self.timeout_ms = self.timeout_ms, min(self.timeout_ms, timeout_ms or PROBE_MS)
        try:
            self.fw_version = self.send("GetSmuVersion")
            return None
        except (AMTimeout, SMUError) as e:
            return str(e)
        finally:
            self.timeout_ms = saved

    def mode1_reset(self) -> None:
        """Ask the PMFW for a mode1 reset (the whole chip; the firmware itself is reloaded by the next boot)."""
        if "Mode1Reset" in self.table.msg:
            self.send("Mode1Reset")
        else:
            self.send("GfxDriverReset", self.table.reset_type["DRIVER_MODE_1_RESET"])
        self.am.log(1, "smu: mode1 reset")

    # -- power limit -------------------------------------------------------------------------------------
    def power_limit(self) -> int:
        """The PPT limit the firmware applies (watts)."""
        return self.send("GetPptLimit", 0 if self.table.version == (13, 0, 6) else POWER_SOURCE_AC << 16)

    def set_power_limit(self, watts: int) -> None:
        if not 0 < watts <= 0xFFFF:
            raise DeviceError(f"power limit {watts} W is not a limit the SMU takes (1..65535 W)")
        self.send("SetPptLimit", watts)
        self.am.log(1, f"smu: power limit {watts} W")

    # -- clocks ------------------------------------------------------------------------------------------
    def _gfx_direct(self, clk: str) -> bool:
        return clk == "GFXCLK" and "GFXCLK" not in self.table.clk      # 13.0.6: the GfxClk messages

    def dpm_levels(self, clk: str) -> list[int]:
        """The DPM levels (MHz) of clock `clk` (a PPCLK name), lowest first; for a fine-grained clock the
        two ends of its range."""
        if self._gfx_direct(clk):
            levels = [self.send("GetMinGfxDpmFreq"), self.send("GetMaxGfxDpmFreq")]
        else:
            cid = self._clk_id(clk)
            n = self.send("GetDpmFreqByIndex", cid << 16 | NUM_LEVELS_INDEX) & ~FINE_GRAINED_BIT
            levels = [self.send("GetDpmFreqByIndex", cid << 16 | i) & ~FINE_GRAINED_BIT for i in range(n)]
        self.levels[clk] = levels
        return levels

    def _clk_id(self, clk: str) -> int:
        if clk not in self.table.clk:
            raise DeviceError(f"SMU {'.'.join(map(str, self.table.version))} has no clock {clk}; it has "
                              f"{', '.join(self.table.clk)}")
        return self.table.clk[clk]

    def set_clock_range(self, clk: str, lo: int, hi: int) -> None:
        """Soft minimum and maximum of a clock (MHz)."""
        if not 0 < lo <= hi <= 0xFFFF:
            raise DeviceError(f"clock range {lo}..{hi} MHz of {clk} is not a range the SMU takes")
        if self._gfx_direct(clk):
            self.send("SetSoftMaxGfxClk", hi)
            self.send("SetSoftMinGfxClk", lo)
        else:
            cid = self._clk_id(clk)
            self.send("SetSoftMaxByFreq", cid << 16 | hi)
            self.send("SetSoftMinByFreq", cid << 16 | lo)

    def set_clock_level(self, clk: str, level: int = -1) -> int:
        """Hold `clk` at one DPM level (-1: the highest); its frequency (MHz)."""
        levels = self.dpm_levels(clk)
        try:
            mhz = levels[level]
        except IndexError:
            raise DeviceError(f"{clk} has {len(levels)} DPM levels ({', '.join(map(str, levels))} MHz); "
                              f"there is no level {level}") from None
        self.set_clock_range(clk, mhz, mhz)
        self.held[clk] = mhz
        self.am.log(2, f"smu: {clk} at {mhz} MHz")
        return mhz

    # -- what the device reports -------------------------------------------------------------------------
    def clock_report(self) -> dict:
        """The clocks this driver holds ({PPCLK name: MHz}), their DPM levels and the power limit (W), asked of
        the PMFW through the mailbox: the levels (GetDpmFreqByIndex, Get{Min,Max}GfxDpmFreq on 13.0.6), the
        power limit it applies (GetPptLimit). The frequency held is the one set_clock_level set in this
        session; a partial boot leaves the SMU as the full boot set it, and the PMFW has no message that reads a
        soft limit back, so there it is the level of this driver's policy among the levels the firmware lists
        (what the full boot set: the policy is this driver's, not the environment's)."""
        clocks, levels = {}, {}
        for clk, level in self.clocks.items():
            lv = self.levels.get(clk) or self.dpm_levels(clk)
            levels[clk] = list(lv)
            clocks[clk] = self.held.get(clk, lv[level])
        return {"clocks": clocks, "clock_levels": levels, "power_limit_w": self.power_limit()}
