"""Code memory of a program on one device, shared by every `Program` handle of that code object.

Ownership: a `LoadedCode` counts its owners. The program cache (`amdq.codeobj.cache.programs`) is one
owner while it holds the entry; every `Program` handle returned by `Device.load` is another, until
`Program.free()` or until the handle is garbage collected. The memory goes back to the device's
allocator when the last owner lets go, and only after the GPU finished all work submitted until then
(the device's deferred-free list), so neither an eviction nor another handle's `free()` can pull code
from under a program still in use. Closing the device frees it at once (its queues are gone by then).
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..codeobj.image import ProgramImage

if TYPE_CHECKING:
    from ..iface.base import Allocation
    from .device import Device


class LoadedCode:
    """One upload of a ProgramImage into executable device memory, with an owner count (starting at 1)."""

    def __init__(self, dev: "Device", img: ProgramImage):
        self.dev, self.img = dev, img
        self.alloc: Allocation | None = dev.allocator.alloc(img.size, "vram", executable=True)
        self.base = self.alloc.va
        try:
            self.alloc.cpu.mv[:img.size] = bytes(img.at(self.base))
            self.alloc.cpu.wrote(0, img.size)
        except BaseException:
            dev.allocator.free(self.alloc)
            raise
        self.refs = 1
        self._lock = threading.Lock()
        dev._codes.add(self)

    @property
    def freed(self) -> bool:
        return self.alloc is None

    def acquire(self) -> bool:
        """One more owner; False if the memory is already on its way back (the caller must load again)."""
        with self._lock:
            if self.refs == 0:
                return False
            self.refs += 1
            return True

    def release(self) -> None:
        """One owner fewer; the last one hands the memory to the device's deferred-free list. Safe to call
        from a garbage-collector finalizer: it only appends to that list."""
        with self._lock:
            self.refs -= 1
            if self.refs > 0:
                return
            alloc, self.alloc = self.alloc, None
        dev = self.dev
        if alloc is not None and not dev.closed:
            dev._pending_free.append((dev._marks(), alloc))

    def drop(self) -> None:
        """The device is closing (no queue runs anything any more): free now, whoever still holds it."""
        with self._lock:
            self.refs = 0
            alloc, self.alloc = self.alloc, None
        if alloc is not None:
            self.dev.allocator.free(alloc)

    def __repr__(self) -> str:
        return f"<LoadedCode {', '.join(self.img.kernels)} at {self.base:#x}, {self.refs} owners>"
