"""Program-image and program caches."""
from __future__ import annotations

import pytest

import amdq
from amdq.codeobj import cache
from amdq.errors import TargetMismatch
from test_compile import IR


def test_image_cache_parses_once_and_checks_target():
    co = amdq.compile(IR, "gfx1100")
    a = cache.image_for(co, "gfx1100")
    assert cache.image_for(co) is a
    with pytest.raises(TargetMismatch):
        cache.image_for(co, "gfx942")


def test_program_key_is_binary_and_device_set():
    co = amdq.compile(IR, "gfx1100")
    assert cache.program_key(co, ["d0", "d1"]) == cache.program_key(co, ("d1", "d0"))
    assert cache.program_key(co, ["d0"]) != cache.program_key(co, ["d0", "d1"])
    assert cache.program_key(co + b"\0", ["d0"]) != cache.program_key(co, ["d0"])


def test_lru_evicts_oldest():
    lru = cache.LRU(2)
    made = []
    get = lambda k: lru.get_or_create(k, lambda: made.append(k) or k)  # noqa: E731
    get(1), get(2), get(1), get(3), get(1), get(2)
    assert made == [1, 2, 3, 2] and len(lru) == 2
