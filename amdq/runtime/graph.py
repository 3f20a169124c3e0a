"""Graphs: launches and copies recorded once (nothing runs while capturing) and replayed from one
indirect buffer per queue. A replay writes, per queue, the IB packets of its segments with the
cross-queue waits and signals between them, and rings one doorbell; arguments can change between
replays (`node.update`, `graph.replace`), which patches the kernel-argument bytes in place."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InvalidArgument
from .pm4_queue import pm4_plan
from .signal import Timeline

if TYPE_CHECKING:
    from .device import Device
    from .pm4_queue import Plan
    from .program import Kernel

ARENA = 1 << 16


class Node:
    """One captured launch; `update(*args)` changes its arguments for the next replays."""

    def __init__(self, graph: "Graph", kernel: "Kernel", plan: "Plan", args: tuple, cpu, off: int):
        self.graph, self.kernel, self.plan, self.args, self._off = graph, kernel, plan, args, off
        self._cpu, self._mv = cpu, cpu.mv
        self.grew: tuple[int, float, float] | None = None   # (bytes, alloc s, sync s) of scratch grown for it

    def update(self, *args: Any) -> None:
        if pm4_plan(self.graph.dev.queue, self.kernel, args, self.plan.grid, self.plan.block, False,
                    self.plan.shared_mem) is not self.plan:
            raise InvalidArgument(f"kernel {self.kernel.name}: the new arguments change the launch shape "
                                  f"(dynamic LDS or scratch); capture the graph again")
        self.graph.wait()                                   # the last replay may still read the old bytes
        self.kernel.pack_into(self.plan, args, self._mv, self._off)
        self._cpu.wrote(self._off, self.plan.size)          # (the coherence hint: over USB only this is sent)
        self.args = args

    def __repr__(self) -> str:
        return f"<Node {self.kernel.name} grid={self.plan.grid} block={self.plan.block}>"


class Graph:
    def __init__(self, dev: "Device"):
        self.dev, self.nodes = dev, []
        self.arenas: list = []
        self._head = ARENA
        self._dw: dict[str, list[int]] = {"compute": [], "copy": []}
        self.segments: list[tuple[str, int, int]] = []     # (queue kind, first dword, dword count)
        self.ibs: dict[str, object] = {}
        self.last: dict[object, int] = {}                  # queue -> timeline value of the last replay
        self.copies = 0
        self._programs: list = []                          # the programs of the nodes (freed ones refuse a replay)
        self._tail: tuple[bytes, int, int] | None = None

    # -- capturing ------------------------------------------------------------------------------
    def __enter__(self) -> "Graph":
        if self.dev.capturing is not None:
            raise RuntimeError("already capturing on this device")
        self.dev.capturing = self
        return self

    def __exit__(self, *exc) -> None:
        self.dev.capturing = None
        if exc[0] is None:
            for kind, dws in self._dw.items():
                if dws:
                    a = self.dev.allocator.alloc(len(dws) * 4, "gtt", uncached=True)
                    a.cpu.mv[:len(dws) * 4] = np.asarray(dws, np.uint32).tobytes()
                    a.cpu.wrote(0, len(dws) * 4)
                    self.ibs[kind] = a
            self._programs = list({id(n.kernel.prg): n.kernel.prg for n in self.nodes}.values())
            self._tail = self._one_tail()

    def _one_tail(self) -> tuple[bytes, int, int] | None:
        """A graph of one compute segment on a PM4 queue replays as one template: its INDIRECT_BUFFER and the
        completion signal (template bytes, dwords, byte offset of the value), written with one doorbell."""
        q = self.dev.queue
        if len(self.segments) != 1 or self.segments[0][0] != "compute" or not hasattr(q, "put"):
            return None
        _, first, n = self.segments[0]
        c = q.commands()
        c.dw += c.t.encode("INDIRECT_BUFFER", shader_type=1, IB_BASE=self.ibs["compute"].va + 4 * first, IB_SIZE=n,
                           VALID=1)
        c.release(q.timeline.addr, 0, interrupt=self.dev.iface.signal_event, name="value")
        return np.asarray(c.dw, np.uint32).tobytes(), len(c.dw), 4 * c.patches["value"]

    def _append(self, kind: str, dws: list[int]) -> None:
        if self.segments and self.segments[-1][0] == kind:
            k, first, n = self.segments[-1]
            self.segments[-1] = (k, first, n + len(dws))
        else:
            self.segments.append((kind, len(self._dw[kind]), len(dws)))
        self._dw[kind] += [int(x) for x in dws]

    def _space(self, n: int) -> tuple[int, object, int]:
        """Room for n bytes of kernel arguments: (GPU address, the arena's CPU view, offset in it)."""
        n = (n + 63) & ~63
        if self._head + n > ARENA:
            self.arenas.append(self.dev.allocator.alloc(max(ARENA, n), "gtt"))
            self._head = 0
        a = self.arenas[-1]
        off = self._head
        self._head += n
        return a.va + off, a.cpu, off

    def add_launch(self, kernel: "Kernel", args: tuple, grid, block, shared_mem: int = 0) -> Node:
        p = pm4_plan(self.dev.queue, kernel, args, grid, block, False, shared_mem)   # PM4 in an IB (AQL: vendor packets)
        ka, cpu, off = self._space(p.size)
        dw = p.dwords_at(ka, cpu.mv, off, kernel, args)[:p.work]
        cpu.wrote(off, p.size)
        self._append("compute", dw.tolist())
        node = Node(self, kernel, p, args, cpu, off)
        self.nodes.append(node)
        return node

    def add_copy(self, dst: int, src: int, nbytes: int) -> None:
        q = self.dev.copyq
        if q is None:
            raise RuntimeError("copies can be captured only on the SDMA copy queue (it is disabled or absent)")
        self._append("copy", [d for p in q.copy(dst, src, nbytes) for d in p])
        self.copies += 1

    # -- replaying ------------------------------------------------------------------------------
    def _queue(self, kind: str):
        return self.dev.queue if kind == "compute" else self.dev.copyq

    def replay(self) -> int:
        """Submit the whole graph again; returns the compute queue's timeline value for its end (or the copy
        queue's for a graph of copies only)."""
        if not self.segments or self.dev.capturing is self:
            raise RuntimeError("the graph is empty or still capturing")
        if any(p.freed for p in self._programs):
            freed = sorted({n.kernel.name for n in self.nodes if n.kernel.prg.freed})
            raise InvalidArgument(f"the graph launches kernels of freed programs ({', '.join(freed)}); capture it again")
        dev = self.dev
        with dev.lock:
            if dev.closed:
                dev._check()
            tail = self._tail
            if tail is not None:
                q = dev.queue
                value = self.last[q] = q.put(*tail)
                return value
            return self._replay()

    def _replay(self) -> int:
        used = {kind for kind, _, _ in self.segments}
        queues = {k: self._queue(k) for k in used}
        for q in queues.values():                         # order after work submitted outside the graph
            self.dev._before_signal(q.timeline)
        out: dict[str, list] = {k: [] for k in used}       # per queue: ring content of this replay
        last_signal: dict[str, int] = {}
        prev = None
        for kind, first, n in self.segments:
            q = queues[kind]
            if prev is not None and prev != kind:             # wait for the other queue's segment before
                self._emit_wait(kind, out[kind], queues[prev].timeline, last_signal[prev])
            self._emit_ib(kind, out[kind], self.ibs[kind].va + 4 * first, n)
            value = q.timeline.advance()                      # the graph orders itself
            self._emit_signal(kind, out[kind], q.timeline, value)
            last_signal[kind] = value
            prev = kind
        for kind, parts in out.items():
            q = queues[kind]
            if kind == "compute":
                q.submit(np.asarray(parts, np.uint32))
            else:
                q.submit(parts)
            self.last[q] = last_signal[kind]
        return last_signal.get("compute", last_signal.get("copy", 0))

    def _emit_ib(self, kind: str, out: list, addr: int, n: int) -> None:
        if kind == "compute":
            out += self.dev.queue.commands().t.encode("INDIRECT_BUFFER", shader_type=1, IB_BASE=addr, IB_SIZE=n,
                                                        VALID=1)
        else:
            out += self.dev.copyq.indirect(addr, n)

    def _emit_signal(self, kind: str, out: list, t: Timeline, value: int) -> None:
        if kind == "compute":
            c = self.dev.queue.commands()
            c.release(t.addr, value, interrupt=self.dev.iface.signal_event)
            out += c.dw
        else:
            out += self.dev.copyq.signal(t.addr, value)

    def _emit_wait(self, kind: str, out: list, t: Timeline, value: int) -> None:
        if kind == "compute":
            c = self.dev.queue.commands()
            c.wait(t.addr + 4, value >> 32)
            c.wait(t.addr, value & 0xFFFFFFFF)
            out += c.dw
        else:
            out += self.dev.copyq.wait_packets(t.addr, value)

    def wait(self) -> None:
        for q, v in self.last.items():
            self.dev.wait(v, queue=q)

    def replace(self, old: Any, new: Any) -> int:
        """Swap one argument value (e.g. a Buffer) for another in every node that uses it; returns how many."""
        n = 0
        for node in self.nodes:
            if any(a is old for a in node.args):
                node.update(*(new if a is old else a for a in node.args))
                n += 1
        return n

    def update(self, node: Node, *args: Any) -> None:
        node.update(*args)

    def free(self) -> None:
        self.wait()
        for a in list(self.ibs.values()) + self.arenas:
            self.dev.allocator.free(a)
        self.arenas, self.ibs = [], {}
        self._tail = None                                   # its IB is gone: no replay of it
