"""The simulated GFX block of a simulated PCI function: the RLC and IMU autoload status, RLC start (GFX9),
MEC halt/reset, the CP scratch registers, and the MEC's compute queues (HQDs, sim/pci/mec.py).

Hardware behaviour modelled (sources: Linux amdgpu `gfx_v11_0.c` / `gfx_v12_0.c` (RLC_RLCS_BOOTLOAD_STATUS
polled after the PSP autoload, CP_MEC_RS64_CNTL halt/pipe reset), `imu_v11_0.c`, `gfx_v9_4_3.c` (RLC_CNTL
RLC_ENABLE_F32, CP_MEC_CNTL halt), `psp_gfx_if.h` (GFX_FW_TYPE_* of what the PSP loaded)):
- the RLC reports BOOTLOAD_COMPLETE only after the PSP loaded the RLC and IMU firmware and was asked to
  start the autoload (GFX_CMD_ID_AUTOLOAD_RLC); before that the register reads 0, as on a GPU whose RLC
  has no code;
- a microcontroller without firmware does not leave halt: RLC_ENABLE_F32 / MEC_HALT=0 read back as not
  taken until the PSP loaded its code;
- MEC pipe resets are counted; a halt or a pipe reset kills the queues there (sim/pci/mec.py);
- the HQD registers are banked per GRBM_GFX_CNTL slot, CP_HQD_ACTIVE starts a queue, CP_HQD_DEQUEUE_REQUEST
  stops it (sim/pci/mec.py);
- GRBM_SOFT_RESET (gfx_v11_0.c / gfx_v9_4_3.c soft_reset, sdma_v6_0.c / sdma_v7_0.c soft_reset): SOFT_RESET_CP or
  SOFT_RESET_CPC kills every queue of the XCC's MEC (their waves with them), puts the HQD registers back at 0 and
  the MEC in its reset state (halted, pipes inactive), and clears a `hang_cp` injection; SOFT_RESET_RLC stops the
  RLC (RLC_CNTL back at 0); SOFT_RESET_SDMA<n> (GFX11/12) resets SDMA engine n (sim/pci/sdma.py). The bits read
  back as written;
- RLC_SAFE_MODE with CMD=1: a running RLC acknowledges by clearing CMD (MESSAGE 1 enters, 0 leaves safe mode).
Injection `reset_fails` (until cleared): no reset takes, GRBM_SOFT_RESET bits do not latch (they read back 0) and
the SMU's ResetSDMA does nothing, as a GPU that needs a bigger reset than these.
"""
from __future__ import annotations

from ...hw import am
from .mec import SimMEC
from .part import SimPart

RLC_AUTOLOAD_NEEDS = {11: (am.GFX_FW_TYPE_RLC_G, am.GFX_FW_TYPE_IMU_I, am.GFX_FW_TYPE_IMU_D),
                      12: (am.GFX_FW_TYPE_RLC_G, am.GFX_FW_TYPE_IMU_I, am.GFX_FW_TYPE_IMU_D)}
INJECT_KINDS = {"reset_fails": "gfx"}
MEC_FW = {9: (am.GFX_FW_TYPE_CP_MEC, am.GFX_FW_TYPE_CP_MEC_ME1), 11: (am.GFX_FW_TYPE_RS64_MEC,),
          12: (am.GFX_FW_TYPE_RS64_MEC,)}


class SimGFX(SimPart):
    """RLC/IMU autoload, RLC start, MEC halt and reset."""
    name = "gfx"

    def __init__(self, dev):
        super().__init__(dev)
        self.gfx = dev.target.gfx_version
        self.mec = SimMEC(self)
        self.reset()

    def reset(self) -> None:
        """Power-on (or a reset of the block): no code in the RLC and MEC, the autoload not done, no queue."""
        self.mec.reset()
        self.loaded: set[int] = set()
        self.autoloaded = False
        self.mec_resets = 0
        self.soft_resets: list[tuple[int, tuple[str, ...]]] = []     # (XCC, reset bits) of every soft reset taken
        self.safe_mode = False
        raw = getattr(self.dev, "raw", None)
        if raw is None:
            return                                      # power-on: the register file starts at reset values
        for i in range(max(1, raw.num_xcc)):
            gc = raw.xcc(i).GC
            for reg, value in (("regRLC_RLCS_BOOTLOAD_STATUS", 0), ("regRLC_CNTL", 0)):
                if reg in gc:
                    gc[reg].write(value)
            if self.gfx == 9:
                gc.regCP_MEC_CNTL.update(MEC_ME1_HALT=1, MEC_ME2_HALT=1)
            else:
                gc.regCP_MEC_RS64_CNTL.update(MEC_HALT=1)

    def save(self) -> dict:
        return {"loaded": sorted(self.loaded), "autoloaded": self.autoloaded}

    def load(self, state: dict) -> None:
        self.loaded = set(state.get("loaded", ()))
        self.autoloaded = bool(state.get("autoloaded", False))

    # -- what the PSP tells the GFX block (SimDevice.firmware_loaded / autoload_rlc) ----------------------
    def on_firmware(self, fw_type: int, image: bytes) -> None:
        self.loaded.add(fw_type)

    def on_autoload_rlc(self) -> bool:
        """The PSP starts the RLC autoload: complete only with the RLC and IMU code in place."""
        need = RLC_AUTOLOAD_NEEDS.get(self.gfx, ())
        if not need or not all(t in self.loaded for t in need):
            return False
        reg = self.dev.raw.GC.regRLC_RLCS_BOOTLOAD_STATUS
        fields = {"BOOTLOAD_COMPLETE": 1, "GFX_INIT_DONE": 1, "RLC_GPM_IRAM_LOADED": 1, "RLC_GPM_IRAM_DONE": 1}
        reg.write(**{k: v for k, v in fields.items() if k in reg.fields})
        self.autoloaded = True
        return True

    # -- the RLC's reference clock counter -----------------------------------------------------------------
    def on_write_regRLC_CAPTURE_GPU_CLOCK_COUNT(self, value: int) -> None:
        """A capture latches the 100 MHz GPU clock (the simulated GPU's timestamp counter) into LSB/MSB."""
        if value & 1:
            t = self.dev.gpu.clock()
            gc = self.dev.raw.GC
            gc.regRLC_GPU_CLOCK_COUNT_LSB.write(t & 0xFFFFFFFF)
            gc.regRLC_GPU_CLOCK_COUNT_MSB.write(t >> 32 & 0xFFFFFFFF)

    def _mec_ready(self) -> bool:
        return any(t in self.loaded for t in MEC_FW.get(self.gfx, ())) and (self.gfx == 9 or self.autoloaded)

    def pipe_runs(self, xcc: int, pipe: int) -> bool:
        """MEC 1 runs firmware and `pipe` is out of halt and reset on XCC `xcc` (a queue there can start)."""
        raise NotImplementedError

    # -- the MEC's queues (sim/pci/mec.py) --------------------------------------------------------------
    def on_write_regGRBM_GFX_CNTL(self, value: int, reg) -> None:
        self.mec.select(reg.inst, value, reg)

    def on_write_regCP_HQD_ACTIVE(self, value: int, reg) -> None:
        self.mec.on_active(reg.inst, value)

    def on_write_regCP_HQD_DEQUEUE_REQUEST(self, value: int, reg) -> None:
        self.mec.on_dequeue(reg.inst, value, reg)

    # the doorbell decode's inputs: what a doorbell write reaches is decided again after any of them changes
    def on_write_regCP_HQD_PQ_DOORBELL_CONTROL(self, value: int) -> None:
        self.mec.decode_changed()

    def on_write_regCP_MEC_DOORBELL_RANGE_LOWER(self, value: int) -> None:
        self.mec.decode_changed()

    def on_write_regCP_MEC_DOORBELL_RANGE_UPPER(self, value: int) -> None:
        self.mec.decode_changed()

    def on_write_regCP_PQ_STATUS(self, value: int) -> None:
        self.mec.decode_changed()

    # -- soft reset and RLC safe mode ---------------------------------------------------------------------
    def on_write_regGRBM_SOFT_RESET(self, value: int, reg) -> None:
        if "reset_fails" in self.dev.inject:
            reg.write(0)                                # the reset does not take: the bits do not latch
            return
        bits = tuple(k for k, v in reg.decode(value).items() if v)
        if not bits:
            return
        self.soft_resets.append((reg.inst, bits))
        xcc = reg.inst
        if "SOFT_RESET_CP" in bits or "SOFT_RESET_CPC" in bits:
            with self.dev.gpu.host_access():
                self.mec.reset_cp(xcc)
            gc = self.dev.raw.xcc(xcc).GC
            if self.gfx == 9:
                gc.regCP_MEC_CNTL.write(MEC_ME1_HALT=1, MEC_ME2_HALT=1)
            else:
                gc.regCP_MEC_RS64_CNTL.write(MEC_HALT=1)
            self.dev.gpu.clear("hang_cp")
        if "SOFT_RESET_RLC" in bits:
            self.dev.raw.xcc(xcc).GC.regRLC_CNTL.write(0)
        for n in range(2):
            if f"SOFT_RESET_SDMA{n}" in bits:
                self.dev.sdma.engine_reset(n)

    def on_write_regRLC_SAFE_MODE(self, value: int, reg) -> None:
        f = reg.decode(value)
        if f["CMD"] and self._rlc_runs(reg.inst):
            self.safe_mode = bool(f["MESSAGE"])
            reg.write(reg.fields["CMD"].put(value, 0))           # acknowledged

    def _rlc_runs(self, xcc: int) -> bool:
        if self.gfx == 9:
            return bool(self.dev.raw.xcc(xcc).GC.regRLC_CNTL.read_fields()["RLC_ENABLE_F32"])
        return self.autoloaded

    def _kill_stopped(self, reg, halt: str, reset: str) -> None:
        """After a write to the MEC control register: a halted MEC or a pipe in reset runs no queue."""
        f = reg.read_fields()
        if f[halt]:
            self.mec.kill(reg.inst)
        for p in range(4):
            if f.get(reset.format(p)):
                self.mec.kill(reg.inst, p)



class SimGFX9(SimGFX):
    """GFX9 (GC 9.4.3): the driver starts the RLC (RLC_CNTL) and unhalts the MEC (CP_MEC_CNTL) itself."""

    def on_write_regRLC_CNTL(self, value: int, reg) -> None:
        if value & 1 and am.GFX_FW_TYPE_RLC_G not in self.loaded:
            reg.write(value & ~1)                       # no code: the RLC stays stopped

    def on_write_regCP_MEC_CNTL(self, value: int, reg) -> None:
        f = reg.decode(value)
        if any(v for k, v in f.items() if k.endswith("_RESET")):
            self.mec_resets += 1
        if (not f["MEC_ME1_HALT"] or not f["MEC_ME2_HALT"]) and not self._mec_ready():
            reg.update(MEC_ME1_HALT=1, MEC_ME2_HALT=1)
        self._kill_stopped(reg, "MEC_ME1_HALT", "MEC_ME1_PIPE{}_RESET")

    def pipe_runs(self, xcc: int, pipe: int) -> bool:
        f = self.dev.raw.xcc(xcc).GC.regCP_MEC_CNTL.read_fields()
        return self._mec_ready() and not f["MEC_ME1_HALT"] and not f.get(f"MEC_ME1_PIPE{pipe}_RESET")


class SimGFX11(SimGFX):
    """GFX11/GFX12: RLC and IMU autoloaded by the PSP; RS64 MEC."""

    def on_write_regCP_MEC_RS64_CNTL(self, value: int, reg) -> None:
        f = reg.decode(value)
        if any(f.get(f"MEC_PIPE{i}_RESET") for i in range(4)):
            self.mec_resets += 1
        if not f["MEC_HALT"] and not self._mec_ready():
            reg.update(MEC_HALT=1)
        self._kill_stopped(reg, "MEC_HALT", "MEC_PIPE{}_RESET")

    def pipe_runs(self, xcc: int, pipe: int) -> bool:
        f = self.dev.raw.xcc(xcc).GC.regCP_MEC_RS64_CNTL.read_fields()
        return (self._mec_ready() and not f["MEC_HALT"] and not f[f"MEC_PIPE{pipe}_RESET"]
                and bool(f[f"MEC_PIPE{pipe}_ACTIVE"]))


def for_target(dev) -> SimGFX:
    """The GFX part of the device's GC generation."""
    return (SimGFX9 if dev.target.gfx_version == 9 else SimGFX11)(dev)
