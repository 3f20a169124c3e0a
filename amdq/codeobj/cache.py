"""Caches of parsed code objects and of programs loaded on devices."""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable


class LRU:
    """A small thread-safe LRU map."""

    def __init__(self, capacity: int = 64):
        self.capacity, self._d, self._lock = capacity, OrderedDict(), threading.Lock()

    def get_or_create(self, key: Hashable, make: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._d:
                self._d.move_to_end(key)
                return self._d[key]
        value = make()
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.capacity:
                self._d.popitem(last=False)
        return value

    def pop(self, key: Hashable) -> Any:
        with self._lock:
            return self._d.pop(key, None)

    def purge(self, pred: Callable[[Hashable], bool]) -> None:
        """Drop every entry whose key satisfies `pred`."""
        with self._lock:
            for k in [k for k in self._d if pred(k)]:
                del self._d[k]

    def __contains__(self, key: Hashable) -> bool:
        return key in self._d

    def __len__(self) -> int:
        return len(self._d)


def program_key(code_object: bytes, devices: Any) -> tuple[str, frozenset]:
    """Cache key of a program: (sha256 of the code object, the set of devices it is loaded on)."""
    devs = devices if isinstance(devices, (list, tuple, set, frozenset)) else (devices,)
    return hashlib.sha256(code_object).hexdigest(), frozenset(devs)


images = LRU(128)          # sha256 -> ProgramImage (target-independent parse and layout)
programs = LRU(128)        # program_key -> Program (owned by the runtime)


def image_for(code_object: bytes, arch: str | None = None):
    """The (cached) ProgramImage of a code object, checked against `arch`."""
    from .image import ProgramImage
    img = images.get_or_create(hashlib.sha256(code_object).hexdigest(), lambda: ProgramImage(code_object))
    if arch is not None:
        from ..errors import TargetMismatch
        from ..hw.targets import get_target
        want = get_target(arch).arch
        if img.target.arch != want:
            raise TargetMismatch(f"code object is for {img.target.arch}, the device is {want}: recompile with -mcpu={want}")
    return img
