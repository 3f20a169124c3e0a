"""Fault injection into the simulated GPU, from code (`gpu.inject(kind, **params)`) and from the
environment (`AMDQ_SIM_INJECT="kind[:key=value...],..."`), so an unmodified program can rehearse a failure.

Kinds:
- `hang_cp` / `hang_sdma`: the command processor's (or SDMA engine's) queues that exist, and the next one
  created if none does, stop consuming their rings, as a hung engine does, until the queue is reset or
  `gpu.clear(kind)`. `after=N`: after N more packets.
- `kill_wave`: the waves of the next dispatch are killed when it starts (the queue reports it).
- `dirty_scratch` (simulated PCI function, at power-on): SCRATCH_REG5-7 hold values no driver left there
  (`reg5=`, `reg6=`, `reg7=` choose them; default: garbage), on a GPU nothing has booted.
- `amdgpu_initialised` (simulated PCI function, at power-on): the GPU is as amdgpu leaves it when the
  module is unloaded: the PSP's sOS runs, the RLC autoload is done, the MEC runs, VRAM holds its data.
- `gfx_reset` (simulated PCI function, at power-on): the GFX block was reset behind the driver's back (a
  GFX-only reset by another agent): the RLC and MEC lost their code, the MEC stays halted until the PSP
  loads it again; the scratch registers, the sOS and the TMR are as they were.
- `reset_fails` (simulated PCI function, sim/pci/gfx.py): no engine reset takes (GRBM_SOFT_RESET bits do not latch,
  the SMU's ResetSDMA does nothing), so a driver's recovery finds the engine not back.
- `smu_timeout`: the simulated SMU (sim/pci/smu.py) takes messages but never answers them, as a hung PMFW
  does; `msg=NAME`: only that message (e.g. `smu_timeout:msg=SetPptLimit`).
- `psp_refuse` (simulated PCI function, sim/pci/psp.py): the PSP refuses the next firmware load (`status=`,
  `fw_type=`).
- `usb_unplug` (simulated USB bridge, sim/usb/bridge.py): the cable is pulled; every USB call from then on raises
  usb1.USBErrorNoDevice (LIBUSB_ERROR_NO_DEVICE), submitted transfers end LIBUSB_TRANSFER_NO_DEVICE.
  `after_bytes=N`: the transfer that would carry the link past N more bytes fails; `after_transfers=N`: after N
  more transfers; neither: at once (e.g. `AMDQ_SIM_INJECT="usb_unplug:after_bytes=2000000"`). The GPU behind
  keeps its power: the next SIMUSB open of that arch in the process plugs the cable back in (sim/usb `plug`) and
  finds the GPU as the lost session left it (so the AM driver boots it fully); the injection is spent then.
- `usb_stall` (simulated USB bridge): an endpoint stalls (usb1.USBErrorPipe): a bulk endpoint (`endpoint=`, default
  0x81) stays halted until clearHalt, endpoint 0 fails one request; `after_transfers=N` delays it.
- `usb_error` (simulated USB bridge): one transfer fails, not carried out: `error=io` (default, LIBUSB_ERROR_IO)
  or `error=timeout` (LIBUSB_ERROR_TIMEOUT, after the transfer's timeout); `endpoint=`, `request=` (bRequest)
  choose which, `after_transfers=N` delays it.
- `pcie_link_fail` (simulated USB bridge): F3 powers the PCIe side on but link training stays in Configuration
  (LTSSM 0x4C), so nothing behind the bridge answers, until `clear` and the next F3.
"""
from __future__ import annotations

import os

from ..errors import InvalidArgument

# Every kind of every simulated block ({kind: the engine or block it acts on}), known before any block's module is
# imported, so AMDQ_SIM_INJECT takes any of them in an unmodified program on any simulated device (a kind whose
# block the device does not have is armed and acts on nothing: the variable is the process's, not one device's).
# The blocks keep their own INJECT_KINDS beside their code; tests/test_usb_failures.py checks they are all here.
KINDS = {"hang_cp": "cp", "hang_sdma": "sdma", "kill_wave": "cp", "dirty_scratch": "boot",
         "amdgpu_initialised": "boot", "gfx_reset": "boot", "smu_timeout": "smu",
         "reset_fails": "gfx", "psp_refuse": "psp",                                          # sim/pci/gfx.py, psp.py
         "usb_unplug": "usb", "usb_stall": "usb", "usb_error": "usb", "pcie_link_fail": "usb"}   # sim/usb/bridge.py


def add_kinds(kinds: dict[str, str]) -> None:
    """More injection kinds ({kind: the engine or block it acts on}), for simulated blocks that define their
    own (the simulated PSP, SMU ...): known before the environment is parsed."""
    KINDS.update(kinds)


def parse(text: str) -> list[tuple[str, dict]]:
    """`"kind[:key=value...],..."` -> [(kind, params)]; values are ints where they look like ints."""
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        kind, *kvs = item.split(":")
        params = {}
        for kv in kvs:
            k, sep, v = kv.partition("=")
            if not sep:
                raise InvalidArgument(f"AMDQ_SIM_INJECT: {item!r}: parameters are key=value")
            try:
                params[k.strip()] = int(v, 0)
            except ValueError:
                params[k.strip()] = v.strip()
        out.append((kind.strip(), params))
    return out


class Injector:
    """The armed injections of one simulated GPU."""

    def __init__(self, gpu, kinds: dict[str, str] | None = None):
        self.gpu = gpu
        self.kinds = KINDS if kinds is None else dict(KINDS, **kinds)
        self.armed: dict[str, dict] = {}
        for kind, params in parse(os.environ.get("AMDQ_SIM_INJECT", "")):
            self(kind, **params)                    # an unknown kind is an error, not a silent no-op

    def __call__(self, kind: str, **params) -> None:
        if kind not in self.kinds:
            raise InvalidArgument(f"unknown fault injection {kind!r}: known kinds are {', '.join(sorted(self.kinds))}")
        self.armed[kind] = dict(params, _hit=False)
        if kind.startswith("hang_"):
            target = self.kinds[kind]
            for eng in list(self.gpu.engines.values()):
                if getattr(eng, "kind", None) == target:
                    self._arm_hang(eng, params)

    def _arm_hang(self, eng, params: dict) -> None:
        eng.hang_at = eng.retired + int(params.get("after", 0))
        self.armed[next(k for k, t in self.kinds.items() if t == eng.kind and k.startswith("hang_"))]["_hit"] = True

    def __contains__(self, kind: str) -> bool:
        return kind in self.armed

    def clear(self, kind: str | None = None) -> None:
        """Disarm `kind` (every kind if None); engines it hung run again."""
        for k in [kind] if kind else list(self.armed):
            self.armed.pop(k, None)
            if k.startswith("hang_"):
                for eng in list(self.gpu.engines.values()):
                    if getattr(eng, "kind", None) == self.kinds.get(k):
                        eng.hang_at = None
                        eng.hung = False

    def attached(self, eng) -> None:
        """A new engine: an armed hang nobody took yet takes it."""
        for k, p in self.armed.items():
            if k.startswith("hang_") and self.kinds[k] == getattr(eng, "kind", None) and not p["_hit"]:
                self._arm_hang(eng, p)

    def take(self, kind: str) -> dict | None:
        """One-shot injections (kill_wave): the params, once."""
        return self.armed.pop(kind, None)
