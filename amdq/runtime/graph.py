"""Graphs: launches recorded once (nothing runs while capturing) and replayed as one indirect buffer per
queue. Between replays, arguments can change: a replay then costs the patched kernel-argument bytes,
one IB packet with its completion signal, and one doorbell."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InvalidArgument
from .queue import Bound

if TYPE_CHECKING:
    from .device import Device
    from .program import Kernel, Plan

ARENA = 1 << 16


class Node:
    """One captured launch; `update(*args)` changes its arguments for the next replays."""

    def __init__(self, graph: "Graph", kernel: "Kernel", plan: "Plan", args: tuple, mv, off: int):
        self.graph, self.kernel, self.plan, self.args, self._mv, self._off = graph, kernel, plan, args, mv, off

    def update(self, *args: Any) -> None:
        if self.kernel.plan(args, self.plan.grid, self.plan.block, False) is not self.plan:
            raise InvalidArgument(f"kernel {self.kernel.name}: the new arguments change the launch shape "
                                  f"(dynamic LDS or scratch); capture the graph again")
        self.graph.dev.wait(self.graph.last)             # the previous replay may still read the old bytes
        self.kernel.pack_into(self.plan, args, self._mv, self._off)
        self.args = args

    def __repr__(self) -> str:
        return f"<Node {self.kernel.name} grid={self.plan.grid} block={self.plan.block}>"


class Graph:
    def __init__(self, dev: "Device"):
        self.dev, self.nodes = dev, []
        self.arenas: list = []
        self._head = ARENA
        self.bound: Bound | None = None
        self.last = 0
        self._dw: list[np.ndarray] = []

    def __enter__(self) -> "Graph":
        if self.dev.capturing is not None:
            raise RuntimeError("already capturing on this device")
        self.dev.capturing = self
        return self

    def __exit__(self, *exc) -> None:
        self.dev.capturing = None
        if exc[0] is None and self._dw:
            self.bound = Bound(self.dev.queue, np.concatenate(self._dw), {})
            q = self.dev.queue
            cmds = q.commands()
            cmds.release(q.timeline.addr, 0, interrupt=self.dev.iface.signal_event)
            self._tail = np.concatenate([self.bound.ib, np.array(cmds.dw, np.uint32)])
            self._vi = len(self.bound.ib) + 5

    def _space(self, n: int) -> tuple[int, object, int]:
        n = (n + 63) & ~63
        if self._head + n > ARENA:
            self.arenas.append(self.dev.allocator.alloc(max(ARENA, n), "gtt"))
            self._head = 0
        a = self.arenas[-1]
        off = self._head
        self._head += n
        return a.va + off, a.cpu.mv, off

    def add_launch(self, kernel: "Kernel", args: tuple, grid, block) -> Node:
        p = kernel.plan(args, grid, block, False)
        ka, mv, off = self._space(p.size)
        kernel.pack_into(p, args, mv, off)
        dw = p.dw[:p.work].copy()
        if p.ka_idx is not None:
            dw[p.ka_idx], dw[p.ka_idx + 1] = ka & 0xFFFFFFFF, ka >> 32
        if p.pkt_off is not None:
            import struct
            pa = ka + p.pkt_off
            pkt = bytearray(p.pkt)
            struct.pack_into("<Q", pkt, 40, ka)
            mv[off + p.pkt_off:off + p.pkt_off + 64] = pkt
            dw[p.pkt_idx], dw[p.pkt_idx + 1] = pa & 0xFFFFFFFF, pa >> 32
        self._dw.append(dw)
        node = Node(self, kernel, p, args, mv, off)
        self.nodes.append(node)
        return node

    def replay(self) -> int:
        """Submit the whole graph again; returns the timeline value that marks its completion."""
        if self.bound is None:
            raise RuntimeError("the graph is empty or still capturing")
        q = self.dev.queue
        value = q.timeline.next()
        t = self._tail
        t[self._vi], t[self._vi + 1] = value & 0xFFFFFFFF, value >> 32
        q.submit(t)
        self.last = value
        return value

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
        self.dev.wait(self.last)
        if self.bound is not None:
            self.bound.free()
        for a in self.arenas:
            self.dev.allocator.free(a)
        self.arenas, self.bound = [], None
