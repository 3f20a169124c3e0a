"""The simulated GPU: physical memory, MMU contexts, doorbells, engines, a clock and interrupts.

Engines (command processor queues, SDMA queues) consume their rings when a doorbell says there is
work, and advance cooperatively: each runs until it blocks (a wait on memory not yet satisfied) or
runs dry. In "sync" mode they run on the thread that writes the doorbell (and on threads that wait
for the GPU); in "async" mode a worker thread runs them, so a submission returns before the GPU is
done, as on hardware.

The GPU lock guards engine state and the page tables. Engines run in small slices under it (a slice
is sized to take about SLICE_S seconds), and a host thread that needs the lock (`host_access`) gets it
between two slices: a spinning kernel never keeps `alloc`, `load` or `close` waiting for long.
"""
from __future__ import annotations

import os
import threading
import time
from functools import partial
from typing import Any, Callable, Protocol

from contextlib import contextmanager

from ..errors import UnsupportedInstruction
from ..hw import faults as F
from ..hw.targets import Target, get_target
from .inject import Injector
from .iommu import HUGE, IOVA_BASE, DMAWindows
from .memory import Arena
from .mmu import MMU

GPU_CLOCK_HZ = 100_000_000
SLICE_S = 0.002                  # engine work per lock hold
HAND_OVER_S = SLICE_S            # the worker lets host threads have the interpreter lock at least this often


class Engine(Protocol):
    name: str

    def doorbell(self, value: int) -> None: ...
    def step(self, budget: int) -> int: ...          # work done (0: idle or blocked)
    @property
    def busy(self) -> bool: ...                       # has work it has not finished (maybe blocked)


class PhysicalSpace:
    """Where this GPU's physical addresses lead (the MMU's `space`): a SYSTEM address on the PCIe bus when the GPU
    sits on one (host RAM, peers' BARs: sim/host.py), else in its own system memory (SIMKFD); any other address in
    its VRAM, or when it is a node of an XGMI hive, in the VRAM of the hive's node it names (sim/xgmi.py)."""

    def __init__(self, gpu: "SimGPU"):
        self.gpu = gpu

    def system(self, addr: int, n: int) -> tuple[Arena, int] | None:
        bus = self.gpu.bus
        if bus is not None:
            return bus.resolve(addr, n)
        m = self.gpu.sysmem
        if 0 <= addr and addr + n <= m.size:
            return m, addr
        return self.gpu.dma.resolve(addr, n)           # a user's pages the kernel driver pinned (USERPTR)

    def local(self, addr: int, n: int) -> tuple[Arena, int] | None:
        hive = self.gpu.hive
        if hive is not None:
            return hive.resolve(addr, n)
        v = self.gpu.vram
        return (v, addr) if 0 <= addr and addr + n <= v.size else None


class SimGPU:
    def __init__(self, arch: str = "gfx1100", vram_bytes: int | None = None, sysmem_bytes: int = 64 << 30,
                 mode: str | None = None, sysmem: Arena | None = None, bus=None):
        self.target: Target = get_target(arch)
        self.vram = Arena("VRAM", vram_bytes or self.target.vram_bytes)
        self.bus = bus                                # the PCIe bus (sim/host.py Bus) of a simulated PCI function
        self.sysmem = bus.ram if bus is not None else sysmem if sysmem is not None else \
            Arena("system memory", sysmem_bytes)
        self.hive = None                              # the XGMI hive (sim/xgmi.py) of a node of one
        self.dma = DMAWindows(max(IOVA_BASE, -(-self.sysmem.size // HUGE) * HUGE))   # pinned user pages beyond system memory (SIMKFD)
        self.space = PhysicalSpace(self)
        self.vms: dict[int, MMU] = {}
        self.cores: dict[int, object] = {}
        self.engines: dict[int, Engine] = {}          # doorbell index -> engine
        self.gates: dict[int, Callable[[], bool]] = {}   # doorbell index -> does the engine see it now
        self._kept: set[int] = set()                     # doorbells whose gate keeps its decision (see attach)
        self._open: dict[int, Engine] = {}               # doorbell index -> its engine, while known to see it
        self.irq_handlers: list[Callable[[str, int, int, dict], None]] = []
        self.mode = mode or os.environ.get("AMDQ_SIM_MODE", "async")
        self._defer = False                           # doorbells only record (see `defer`)
        self.lock = threading.RLock()
        self._want = 0                                # host threads waiting for the lock
        self._budget = 256                            # work units per slice, adapted to SLICE_S
        self._kick = threading.Event()
        self._handed = time.perf_counter()            # when the worker last let host threads have the interpreter
        self._stop = False
        self._t0 = time.perf_counter_ns()
        self.inject = Injector(self)                  # fault injection: inject("hang_cp"), inject.clear(...)
        from .shader.isa import for_isa               # the shader front end is built now, not in a first dispatch
        try:                                          # that a short wait timeout would take for a hang
            for_isa(self.target.isa)
        except UnsupportedInstruction:
            pass
        from .shader.core import jit_hook             # and the JIT's modules imported (tens of ms without bytecode
        jit_hook()                                    # caches: they were part of the first dispatch's GPU time)
        from .shader.wave import POOL                 # and register memory faulted in ahead, in the background
        POOL.prefault()
        self._worker = None
        if self.mode == "async":
            self._worker = threading.Thread(target=self._run_worker, name="amdq-sim-gpu", daemon=True)
            self._worker.start()

    @property
    def defer(self) -> bool:
        """While set, doorbells only record their write pointers and no engine runs (the worker sleeps, a sync-mode
        wait does not pump): the host's own work is timed alone. Cleared, the worker starts on what was rung."""
        return self._defer

    @defer.setter
    def defer(self, on: bool) -> None:
        self._defer = bool(on)
        if not on:
            self._kick.set()

    # -- time ----------------------------------------------------------------------------------
    def clock(self) -> int:
        """The GPU clock counter (100 MHz)."""
        return (time.perf_counter_ns() - self._t0) // (1_000_000_000 // GPU_CLOCK_HZ)

    # -- memory contexts ----------------------------------------------------------------------
    def vm(self, vmid: int) -> MMU:
        if vmid not in self.vms:
            self.vms[vmid] = MMU(self.vram, self.sysmem, self.target.gfx_version, vmid=vmid, space=self.space)
        return self.vms[vmid]

    def core(self, vmid: int):
        """The compute units as seen from one VM context (they translate through its page tables)."""
        if vmid not in self.cores:
            from .shader.core import ShaderCore
            self.cores[vmid] = ShaderCore(self.vm(vmid))
        return self.cores[vmid]

    # -- engines and doorbells ----------------------------------------------------------------
    @contextmanager
    def host_access(self):
        """The GPU lock for a host-side change (page tables, queues): taken between two engine slices."""
        self._want += 1
        try:
            with self.lock:
                yield
        finally:
            self._want -= 1

    def attach(self, doorbell: int, engine: Engine, gate: Callable[[], bool] | None = None, kept: bool = False) -> None:
        """Put `engine` behind a doorbell; `gate` (when given) says whether a doorbell write reaches it now (the
        doorbell decode of its hardware: enabled, inside the engine's doorbell range). A `kept` gate's decision
        holds until its owner calls `gates_changed()`, so an open one is not asked again at every doorbell."""
        with self.host_access():
            self.engines[doorbell] = engine
            self._open.pop(doorbell, None)
            if gate is None:
                self.gates.pop(doorbell, None)
            else:
                self.gates[doorbell] = gate
            (self._kept.add if gate is None or kept else self._kept.discard)(doorbell)
            self.inject.attached(engine)

    def detach(self, doorbell: int) -> None:
        """Destroy the queue behind a doorbell: its running waves are killed."""
        with self.host_access():
            eng = self.engines.pop(doorbell, None)
            self.gates.pop(doorbell, None)
            self._open.pop(doorbell, None)
            self._kept.discard(doorbell)
            if eng is not None and hasattr(eng, "kill"):
                eng.kill()

    def clear(self, kind: str | None = None) -> None:
        """Disarm a fault injection (all if None)."""
        with self.host_access():
            self.inject.clear(kind)

    def gates_changed(self) -> None:
        """A kept gate may decide otherwise now: every gate is asked again at its next doorbell."""
        self._open.clear()

    def ringer(self, doorbell: int, latch: Callable[[int], None] | None = None,
               enable: tuple[Any, int, int] | None = None,
               keep: tuple[list, int] | None = None) -> Callable[[int], None]:
        """`ring(doorbell, value)` as a function of the value, for an aperture that binds a queue's doorbell once:
        an engine known to see it is rung without the lookup and gate of `ring`. `latch(value)` first keeps the
        value in the aperture's register (as it reads back); `keep` = (values, index) does the same as
        `values[index] = value`, without a call; `enable` = (registers, index, mask): the write reaches the GPU
        only while registers[index] & mask (a PCI function's memory decoding). (The doorbell is on every launch's
        path: an aperture without an enable bit gets a function without its test.)"""
        opened, ring, kick = self._open, self.ring, self._kick
        sync = self.mode != "async"                     # (fixed when the GPU is made)
        if enable is None and latch is None:        # (the simulated KFD's doorbell page)
            values, at = keep if keep is not None else ([0], 0)

            def bell(value: int) -> None:
                values[at] = value
                eng = opened.get(doorbell)
                if eng is None:
                    ring(doorbell, value)           # a doorbell not yet known open: the full decode
                    return
                eng.doorbell(value)
                if self._defer:
                    return
                if sync:
                    self.pump(1 << 12)
                elif not kick.is_set():
                    kick.set()
            return bell
        regs, at, mask = enable if enable is not None else ((1,), 0, 1)
        if keep is not None:
            latch = partial(keep[0].__setitem__, keep[1])

        def bell(value: int) -> None:
            if latch is not None:
                latch(value)
            if not regs[at] & mask:
                return
            eng = opened.get(doorbell)
            if eng is None:
                ring(doorbell, value)               # a doorbell not yet known open: the full decode
                return
            eng.doorbell(value)
            if self._defer:
                return
            if sync:
                self.pump(1 << 12)
            elif not kick.is_set():
                kick.set()
        return bell

    def ring(self, doorbell: int, value: int) -> None:
        """A doorbell write from the host."""
        eng = self._open.get(doorbell)
        if eng is None:
            eng = self.engines.get(doorbell)
            gate = self.gates.get(doorbell)
            if eng is None or (gate is not None and not gate()):
                return                                # hardware ignores a doorbell nobody owns (or sees)
            if doorbell in self._kept:
                self._open[doorbell] = eng
        eng.doorbell(value)
        if self._defer:
            return
        if self.mode == "async":
            if not self._kick.is_set():               # (the worker has not seen the last kick yet: no second one)
                self._kick.set()
        else:
            self.pump(1 << 12)

    def pump(self, budget: int = 1 << 14, share_gil: bool = False) -> bool:
        """Advance every engine until all are idle or blocked (or the budget is spent), one slice at a time
        under the lock, giving way to host threads between slices; True if any moved."""
        moved = False
        while budget > 0 and not self._stop and not self._defer:
            if self._want:
                time.sleep(0.0001)                   # let the host thread that waits for the lock take it
                continue
            with self.lock:
                t0 = time.thread_time()
                share = min(budget, self._budget)
                work = self._slice(share)
                dt = time.thread_time() - t0
            # the budget follows the CPU time a slice of it took (this thread's: a loaded host's waits for a core are
            # not work): halved above SLICE_S, doubled below half of it. (Wall time and a band of a quarter left it at
            # 1-2 steps wherever a slice's own overhead -- 8 XCC packet processors on CDNA, a busy machine -- was
            # above that: most of the time went to the overhead.) Budgets stay powers of two.
            if dt > SLICE_S and self._budget > 1:
                self._budget //= 2
            elif dt < SLICE_S / 2 and work >= share and self._budget < 1 << 14:
                self._budget *= 2
            if not work:
                break
            moved = True
            budget -= work
            if share_gil:
                # numpy drops and retakes the interpreter lock inside many calls, and CPython forces a hand-over
                # only when no switch happened for an interval: a host thread waiting for the lock could starve
                # for seconds. A real sleep between slices hands it over, once per slice's worth of time (a host
                # call waits for one slice at most, as for the GPU lock); after every slice, the sleeps and the waits
                # for the lock after them took a third of a busy GPU's time on a loaded machine (short launches run
                # several slices).
                now = time.perf_counter()
                if now - self._handed >= HAND_OVER_S:
                    time.sleep(0)
                    self._handed = time.perf_counter()
        return moved

    def _slice(self, share: int) -> int:
        """Every engine steps once with `share` of work (the GPU lock held); the work done."""
        work = 0
        for eng in list(self.engines.values()):
            try:
                work += eng.step(share)
            except Exception as e:                  # a simulator bug must not stop the GPU silently
                self._internal_error(eng, e)
        return work

    def assist(self) -> bool:
        """Asynchronous mode: a host thread about to sleep until the GPU signals runs one slice itself when no other
        thread is in one (what the worker would run once woken: a short copy or launch then costs no thread
        hand-over each way; the caller checks its events and deadline between slices); True if work was done."""
        if self._stop or self._defer or not self.lock.acquire(blocking=False):
            return False
        try:
            return self._slice(self._budget) > 0
        finally:
            self.lock.release()

    @property
    def busy(self) -> bool:
        return any(e.busy for e in list(self.engines.values()))

    def _internal_error(self, eng, e: Exception) -> None:
        """Stop an engine that raised, print the traceback, and fault its queue so waiters see an error."""
        import sys
        import traceback
        print(f"amdq simulated GPU: internal error in {getattr(eng, 'name', eng)}:", file=sys.stderr)
        traceback.print_exception(e, file=sys.stderr)
        if hasattr(eng, "stop"):
            eng.stop(F.record_of(e))
        else:
            reason = f"simulator internal error: {type(e).__name__}: {e}"
            self.engines.pop(next((d for d, x in self.engines.items() if x is eng), -1), None)
            self.interrupt("CP_BAD_OPCODE", 0, 0, reason=reason)

    def _run_worker(self) -> None:
        while not self._stop:
            moved = self.pump(share_gil=True)
            if not moved:
                self._kick.wait(0.0005 if self.busy and not self._defer else 0.05)
                self._kick.clear()
                self._handed = time.perf_counter()        # (the wait let every other thread run)

    def wait_idle(self, timeout: float = 30.0) -> bool:
        end = time.monotonic() + timeout
        while self.busy and time.monotonic() < end:
            if self.mode != "async":
                if not self.pump():
                    time.sleep(0)
            else:
                time.sleep(0.0002)
        return not self.busy

    def close(self) -> None:
        """Power off: engines stop (waves killed), the worker thread ends."""
        self._stop = True
        self._kick.set()
        with self.host_access():
            for eng in list(self.engines.values()):
                if hasattr(eng, "kill"):
                    eng.kill()
            self.engines.clear()
            self.gates.clear()
            self._open.clear()

    # -- interrupts ---------------------------------------------------------------------------
    def interrupt(self, source: str, ctxid: int, vmid: int = 0, **info) -> None:
        for h in list(self.irq_handlers):
            h(source, ctxid, vmid, info)
