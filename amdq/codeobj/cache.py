"""Caches of parsed code objects and of programs loaded on devices."""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable


class LRU:
    """A small thread-safe LRU map. `on_evict(value)` (if given) is called, outside the lock, for every value
    that leaves it without being asked for: evicted for capacity, purged, or made twice concurrently."""

    def __init__(self, capacity: int = 64, on_evict: Callable[[Any], None] | None = None):
        if capacity < 1:
            raise ValueError(f"an LRU needs a capacity of at least 1, not {capacity}")
        self.capacity, self.on_evict = capacity, on_evict
        self._d, self._lock = OrderedDict(), threading.Lock()

    def get_or_create(self, key: Hashable, make: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._d:
                self._d.move_to_end(key)
                return self._d[key]
        value = make()
        gone = []
        with self._lock:
            if key in self._d:                   # another thread made it meanwhile: keep theirs
                gone.append(value)
                value = self._d[key]
            else:
                self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.capacity:
                gone.append(self._d.popitem(last=False)[1])
        self._evicted(gone)
        return value

    def _evicted(self, values: list) -> None:
        if self.on_evict is not None:
            for v in values:
                self.on_evict(v)

    def pop(self, key: Hashable) -> Any:
        """Remove and return the value of `key` (None if absent); the caller takes it over (no on_evict)."""
        with self._lock:
            return self._d.pop(key, None)

    def purge(self, pred: Callable[[Hashable], bool]) -> None:
        """Drop every entry whose key satisfies `pred`."""
        with self._lock:
            gone = [self._d.pop(k) for k in [k for k in self._d if pred(k)]]
        self._evicted(gone)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._d

    def __len__(self) -> int:
        return len(self._d)


def program_key(code_object: bytes, devices: Any) -> tuple[str, frozenset]:
    """Cache key of a program: (sha256 of the code object, the set of devices it is loaded on)."""
    devs = devices if isinstance(devices, (list, tuple, set, frozenset)) else (devices,)
    return hashlib.sha256(code_object).hexdigest(), frozenset(devs)


images = LRU(128)          # sha256 -> ProgramImage (target-independent parse and layout)
# program_key -> LoadedCode (amdq.runtime.codemem): the cache owns one reference, given up on eviction
programs = LRU(128, on_evict=lambda code: code.release())


def image_for(code_object: bytes, arch: str | None = None):
    """The (cached) ProgramImage of a code object, checked against `arch`."""
    from .image import ProgramImage
    img = images.get_or_create(hashlib.sha256(code_object).hexdigest(), lambda: ProgramImage(code_object))
    if arch is not None:
        img.check_runs_on(arch)
    return img
