"""The contract between a simulated IP block and the simulated PCI function it is part of.

A `SimPart` holds a block's hardware state and its side effects as register handlers named after the
registers (`on_write_regMP0_SMN_C2PMSG_64`, see sim/regfile.py). It reads only what hardware reads: its
registers (through `dev.raw`, the side-effect-free view) and memory by memory-controller address
(`dev.mc_read` / `dev.mc_write`: VRAM through the FB aperture; other addresses are a fault the block
reports as its hardware would). Mode1 reset calls `reset()` on every part; what survives the process
(the state file) is `save()` / `load()`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ...hw.regmap import Registers
    from ...hw.targets import Target


class SimDevice(Protocol):
    target: "Target"
    raw: "Registers"                    # the register file without side effects (handlers update others through it)
    vram: memoryview                    # the whole VRAM, bytes
    inject: Any                         # the fault injector: parts ask it (e.g. inject.active("smu_timeout"))

    def mc_read(self, addr: int, n: int) -> bytes: ...
    def mc_write(self, addr: int, data: bytes) -> None: ...
    def interrupt(self, client_id: int, src_id: int, src_data: tuple[int, ...] = (), **fields: int) -> None:
        """Post an interrupt vector to the IH ring (as the simulated IH writes it); fields: ring_id, vmid, vmid_src,
        pasid, node_id."""
        ...

    def clock_ns(self) -> int: ...

    def firmware_loaded(self, fw_type: int, image: bytes) -> None:
        """The PSP accepted firmware of GFX_FW_TYPE `fw_type` (LOAD_IP_FW): the parts whose code it is
        (an `on_firmware(fw_type, image)` method) hear of it; the RLC, MEC and SDMA leave halt only then."""
        ...

    def autoload_rlc(self) -> bool:
        """The PSP starts the RLC autoload (GFX_CMD_ID_AUTOLOAD_RLC): RLC_RLCS_BOOTLOAD_STATUS reports
        completion if the RLC and IMU firmware were loaded; False (the command fails) otherwise."""
        ...

    def mode1_reset(self) -> None:
        """A mode1 reset (the SMU's or the PSP's): VRAM cleared (the discovery binary placed again), registers at reset values,
        every part's reset(); the state file follows."""
        ...


def place(reg, field: str) -> tuple[int, int, int]:
    """(dword address, shift, mask) of a field of a bound register: looked up once by a part that reads the field
    on every access (the raw dword from `dev.regfile.peek`, then `(v >> shift) & mask`)."""
    f = reg.fields[field]
    return reg.addr, f.lo, (1 << (f.hi - f.lo + 1)) - 1


class SimPart:
    """One simulated hardware block."""
    name = ""

    def __init__(self, dev: SimDevice):
        self.dev = dev

    def reset(self) -> None:
        """Mode1 reset: back to the power-on state (registers this block owns included)."""

    def save(self) -> dict:
        """State that survives the process (JSON-serialisable)."""
        return {}

    def load(self, state: dict) -> None:
        """Restore `save()`'s state in a new process (after the register file's values are restored: the
        device keeps every register across processes, as a GPU does)."""

    # Optional hooks: `on_firmware(fw_type, image)` (see SimDevice.firmware_loaded), `amdgpu_initialised()`
    # (the `amdgpu_initialised` injection: leave the block as amdgpu does, e.g. the sOS running), `post(...)`
    # on the IH part (SimDevice.interrupt delivers there). A module sim/pci/<block>.py defines one SimPart
    # subclass or a `for_target(dev)` (device.PART_MODULES); kinds of injection: amdq.sim.inject.add_kinds.
