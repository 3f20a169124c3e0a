"""The narrow seam between an interface and the operating system: open, ioctl, mmap, sysfs.

`OSSeam` is the real system. The simulated GPU provides a seam with the same methods, so the code
above it (ioctl structs, mmap offsets, doorbell writes) is the code that runs on hardware.
"""
from __future__ import annotations

import ctypes
import fcntl
import os

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

    def ioctl(self, fd: int, request: int, arg: bytearray) -> None:
        """Issue an ioctl whose argument struct is `arg` (updated in place); OSError on failure."""
        fcntl.ioctl(fd, request, arg, True)

    def mmap(self, addr: int | None, size: int, prot: int, flags: int, fd: int = -1, offset: int = 0) -> Mapping:
        p = self._libc.mmap(addr or None, size, prot, flags, fd, offset)
        if p in (None, MAP_FAILED):
            e = ctypes.get_errno()
            raise OSError(e, f"mmap of {size:#x} bytes at offset {offset:#x} failed: {os.strerror(e)}")
        mv = memoryview((ctypes.c_char * size).from_address(p)).cast("B") if prot != PROT_NONE else None
        return Mapping(p, size, mv)

    def munmap(self, m: Mapping) -> None:
        self._libc.munmap(m.addr, m.size)

    def read_text(self, path: str) -> str:
        with open(path) as f:
            return f.read()

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def read_user(self, ptr: int, size: int) -> bytes:
        return ctypes.string_at(ptr, size)
