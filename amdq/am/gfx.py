"""The GFX block of the AM driver, compute only: the RLC (started by the PSP's autoload on GFX11/12, by the
driver on GFX9) and the MEC (compute micro-engine) out of halt; on a partial boot a MEC reset.

Sources (facts, not code): Linux amdgpu `gfx_v11_0.c` / `gfx_v12_0.c` (wait for RLC_RLCS_BOOTLOAD_STATUS
BOOTLOAD_COMPLETE after the PSP autoload; RS64 MEC program counter start from the firmware's
ucode_start_addr, CP_MEC_RS64_CNTL halt / pipe reset / pipe active), `gfx_v9_4_3.c` (per XCC: RLC_CNTL
RLC_ENABLE_F32 to start the RLC, CP_MEC_CNTL ME1/ME2 halt and pipe resets), NOTES 2.6.
"""
from __future__ import annotations

from ..errors import AMBootError
from .ip import IPBlock

RLC_AUTOLOAD_MS = 1000


class GFX(IPBlock):
    """RLC and MEC; queues come later (part 2)."""
    name = "gfx"

    def init_sw(self) -> None:
        t = self.am.target
        self.gfx = t.gfx_version
        gc = "gc_{}_{}_{}".format(*t.ip["GC"])
        self.mec = self.am.firmware(f"{gc}_mec.bin")
        self.am.firmware(f"{gc}_rlc.bin")

    def _xccs(self):
        return [self.am.regs.xcc(i).GC for i in range(max(1, self.am.regs.num_xcc))]

    # -- full boot --------------------------------------------------------------------------------------
    def init_hw(self) -> None:
        if self.gfx == 9:
            for i, gc in enumerate(self._xccs()):
                gc.regRLC_CNTL.update(RLC_ENABLE_F32=1)
                if not gc.regRLC_CNTL.read_fields()["RLC_ENABLE_F32"]:
                    raise AMBootError(f"XCC {i}: the RLC did not start (GC.regRLC_CNTL.RLC_ENABLE_F32 reads 0): "
                                      f"the PSP has not loaded RLC_G")
        else:
            st = self.am.regs.GC.regRLC_RLCS_BOOTLOAD_STATUS
            self.am.wait(lambda: st.read_fields()["BOOTLOAD_COMPLETE"] == 1, RLC_AUTOLOAD_MS,
                         "the RLC autoload (GC.regRLC_RLCS_BOOTLOAD_STATUS.BOOTLOAD_COMPLETE) after the PSP loaded "
                         "the RLC and IMU firmware")
        self.mec_start()

    def mec_start(self) -> None:
        """Program counter from the MEC firmware (RS64), every pipe out of reset, the MEC out of halt."""
        for i, gc in enumerate(self._xccs()):
            if self.gfx == 9:
                gc.regCP_MEC_CNTL.write(0)
                halted = gc.regCP_MEC_CNTL.read_fields()
                if halted["MEC_ME1_HALT"] or halted["MEC_ME2_HALT"]:
                    raise AMBootError(f"XCC {i}: the MEC stayed halted (GC.regCP_MEC_CNTL): the PSP has not loaded "
                                      f"its firmware (CP_MEC)")
                continue
            start = self.mec.ucode_start_addr
            if start is not None:
                gc.regCP_MEC_RS64_PRGRM_CNTR_START.write(start >> 2 & 0xFFFFFFFF)
            gc.regCP_MEC_RS64_CNTL.write(MEC_PIPE0_ACTIVE=1, MEC_PIPE1_ACTIVE=1, MEC_PIPE2_ACTIVE=1,
                                         MEC_PIPE3_ACTIVE=1)
            if gc.regCP_MEC_RS64_CNTL.read_fields()["MEC_HALT"]:
                raise AMBootError("the MEC stayed halted (GC.regCP_MEC_RS64_CNTL.MEC_HALT reads 1): the RLC autoload "
                                  "did not bring up its firmware (RS64_MEC)")

    # -- partial boot -------------------------------------------------------------------------------------
    def resume_hw(self) -> None:
        """MEC reset: halt, every pipe in reset (the queues of the last session are gone), then start again."""
        for gc in self._xccs():
            if self.gfx == 9:
                gc.regCP_MEC_CNTL.write(MEC_ME1_HALT=1, MEC_ME2_HALT=1, MEC_ME1_PIPE0_RESET=1, MEC_ME1_PIPE1_RESET=1,
                                        MEC_ME1_PIPE2_RESET=1, MEC_ME1_PIPE3_RESET=1)
            else:
                gc.regCP_MEC_RS64_CNTL.write(MEC_HALT=1, MEC_PIPE0_RESET=1, MEC_PIPE1_RESET=1, MEC_PIPE2_RESET=1,
                                             MEC_PIPE3_RESET=1)
        self.mec_start()

    def fini_hw(self) -> None:
        for gc in self._xccs():
            if self.gfx == 9:
                gc.regCP_MEC_CNTL.write(MEC_ME1_HALT=1, MEC_ME2_HALT=1)
            else:
                gc.regCP_MEC_RS64_CNTL.write(MEC_HALT=1)
