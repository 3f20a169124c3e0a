"""The narrow seam between an interface and the operating system: open, ioctl, mmap, sysfs, and for VFIO
pread/pwrite on a device fd, file mappings, eventfds and poll.

`OSSeam` is the real system. The simulated GPU provides a seam with the same methods, so the code
above it (ioctl structs, mmap offsets, doorbell writes) is the code that runs on hardware.
"""
from __future__ import annotations

import ctypes
import fcntl
import mmap as _mmap
import os
import select

from .base import Mapping

PROT_NONE, PROT_READ, PROT_WRITE = 0, 1, 2
MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS, MAP_NORESERVE = 0x01, 0x02, 0x10, 0x20, 0x4000
MAP_FAILED = ctypes.c_void_p(-1).value


class OSSeam:
    def __init__(self):
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.mmap.restype = ctypes.c_void_p
        self._libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                    ctypes.c_long]
        self._libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def open(self, path: str, flags: int = os.O_RDWR | os.O_CLOEXEC) -> int:
        return os.open(path, flags)

    def close(self, fd: int) -> None:
        os.close(fd)

    def ioctl(self, fd: int, request: int, arg: bytearray | int = 0) -> int:
        """Issue an ioctl whose argument is a struct `arg` (updated in place) or a plain integer; returns the
        ioctl's return value; OSError on failure."""
        if isinstance(arg, int):
            return fcntl.ioctl(fd, request, arg)
        return fcntl.ioctl(fd, request, arg, True)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        return os.pread(fd, size, offset)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        return os.pwrite(fd, data, offset)

    def mmap(self, addr: int | None, size: int, prot: int, flags: int, fd: int = -1, offset: int = 0) -> Mapping:
        p = self._libc.mmap(addr or None, size, prot, flags, fd, offset)
        if p in (None, MAP_FAILED):
            e = ctypes.get_errno()
            raise OSError(e, f"mmap of {size:#x} bytes at offset {offset:#x} failed: {os.strerror(e)}")
        mv = memoryview((ctypes.c_char * size).from_address(p)).cast("B") if prot != PROT_NONE else None
        return Mapping(p, size, mv)

    def munmap(self, m: Mapping) -> None:
        self._libc.munmap(m.addr, m.size)

    def map_shared(self, fd: int, size: int, offset: int) -> Mapping:
        """A shared read/write mapping of a file (a VFIO region). Unlike `mmap`, it stays valid while a view
        of it is alive: `unmap_shared` leaves an exported mapping to the process."""
        mm = _mmap.mmap(fd, size, _mmap.MAP_SHARED, _mmap.PROT_READ | _mmap.PROT_WRITE, offset=offset)
        anchor = ctypes.c_char.from_buffer(mm)
        addr = ctypes.addressof(anchor)
        del anchor
        m = Mapping(addr, size, memoryview(mm))
        m.file_map = mm
        return m

    def unmap_shared(self, m: Mapping) -> None:
        try:
            m.mv.release()
            m.file_map.close()
        except BufferError:
            pass                              # a view still exported: the mapping goes with the process

    def eventfd(self, initval: int = 0) -> int:
        """A non-blocking eventfd (close-on-exec)."""
        return os.eventfd(initval, os.EFD_CLOEXEC | os.EFD_NONBLOCK)

    def eventfd_read(self, fd: int) -> int:
        """The eventfd's counter, reset to 0; 0 when nothing was signalled."""
        try:
            return os.eventfd_read(fd)
        except BlockingIOError:
            return 0

    def poll(self, fds: list[int], timeout_ms: int | None) -> list[int]:
        """The fds of `fds` readable within `timeout_ms` (None or negative: wait without limit)."""
        p = select.poll()
        for fd in fds:
            p.register(fd, select.POLLIN)
        t = None if timeout_ms is None or timeout_ms < 0 else timeout_ms
        return [fd for fd, ev in p.poll(t) if ev & (select.POLLIN | select.POLLERR | select.POLLHUP)]

    def readlink(self, path: str) -> str:
        return os.readlink(path)

    def read_text(self, path: str) -> str:
        with open(path) as f:
            return f.read()

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def read_user(self, ptr: int, size: int) -> bytes:
        return ctypes.string_at(ptr, size)
