"""The SDMA block of the AM driver: the engines out of halt once the PSP loaded their firmware, the
UTCL1 set up; on a partial boot halted and started again. Ring buffers come later (part 2).

Sources (facts, not code): Linux amdgpu `sdma_v6_0.c` (SDMA{0,1}_F32_CNTL HALT=0 / TH1_RESET=0,
UTCL1_CNTL RESP_MODE=3 REDO_DELAY=9), `sdma_v7_0.c` (SDMA{0,1}_MCU_CNTL HALT), `sdma_v4_4_2.c` (per instance
SDMA_CNTL UTC_L1_ENABLE, the GFX ring disabled until it is set up), NOTES 2.7.
"""
from __future__ import annotations

from ..errors import AMBootError
from .ip import IPBlock


class SDMA(IPBlock):
    """The SDMA engines of the device (two on these targets)."""
    name = "sdma"

    def init_sw(self) -> None:
        self.major = self.am.target.ip["SDMA"][0]
        self.am.firmware("sdma_{}_{}_{}.bin".format(*self.am.target.ip["SDMA"]))

    def _halt(self, halt: int) -> None:
        regs = self.am.regs
        for n in (0, 1):
            if self.major == 6:
                regs.GC[f"regSDMA{n}_F32_CNTL"].update(HALT=halt, TH1_RESET=halt)
            elif self.major == 7:
                regs.GC[f"regSDMA{n}_MCU_CNTL"].update(HALT=halt)
            else:
                regs.block(f"SDMA{n}").regSDMA_GFX_RB_CNTL.update(RB_ENABLE=0)
                regs.block(f"SDMA{n}").regSDMA_CNTL.update(UTC_L1_ENABLE=1 - halt)
        if halt:
            return
        for n in (0, 1):
            if self.major in (6, 7):
                gc = regs.GC
                gc[f"regSDMA{n}_UTCL1_CNTL"].update(RESP_MODE=3, REDO_DELAY=9)
                reg = gc[f"regSDMA{n}_F32_CNTL" if self.major == 6 else f"regSDMA{n}_MCU_CNTL"]
                if reg.read_fields()["HALT"]:
                    raise AMBootError(f"SDMA{n} stayed halted ({reg.qualname}.HALT reads 1): the PSP has not loaded "
                                      f"its firmware")

    def init_hw(self) -> None:
        self._halt(0)

    def resume_hw(self) -> None:
        self._halt(1)
        self._halt(0)

    def fini_hw(self) -> None:
        self._halt(1)
