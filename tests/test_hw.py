"""Hardware tables: layouts, targets, and the kernel-descriptor tables checked against the facts files."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from amdq.errors import UnsupportedTarget
from amdq.hw import kd as KD
from amdq.hw.layout import Bits, Struct
from amdq.hw.targets import TARGETS, get_target

FACTS = Path(__file__).resolve().parents[2] / "shared" / "facts"


def test_bits_roundtrip():
    b = Bits("R", {"A": (0, 3), "B": (4, 4), "C": (8, 15)})
    w = b.encode(A=5, B=1, C=0xAB)
    assert w == 5 | 16 | 0xAB00 and b.decode(w) == {"A": 5, "B": 1, "C": 0xAB}
    with pytest.raises(ValueError):
        b.encode(A=16)
    with pytest.raises(KeyError):
        b.encode(D=1)


def test_struct_roundtrip():
    s = Struct("S", 16, [("a", 0, "u32"), ("b", 4, "i64"), ("c", 12, "4b")])
    raw = s.pack(a=7, b=-2, c=b"xy")
    assert len(raw) == 16 and s.unpack(raw) == {"a": 7, "b": -2, "c": b"xy\0\0"}
    with pytest.raises(ValueError):
        s.unpack(raw[:10])


def test_targets_table():
    assert list(TARGETS) == ["gfx1100", "gfx1101", "gfx1102", "gfx1151", "gfx1200", "gfx1201", "gfx942", "gfx950"]
    for t in TARGETS.values():
        assert t.family in ("RDNA3", "RDNA4", "CDNA3", "CDNA4")
        assert t.wave_size == (64 if t.family.startswith("CDNA") else 32)
        assert set(t.ip) == {"GC", "SDMA", "NBIO", "MMHUB", "MP0", "MP1", "OSSSYS", "HDP"}
        assert t.gfx_version == {"RDNA3": 11, "RDNA4": 12, "CDNA3": 9, "CDNA4": 9}[t.family]
        assert t.lds_bytes >= 64 * 1024 and t.cus > 0 and t.max_waves_per_cu > 0
    assert get_target("gfx942:sramecc+:xnack-").arch == "gfx942"


def test_unsupported_target_lists_supported():
    with pytest.raises(UnsupportedTarget) as e:
        get_target("gfx90a")
    for arch in TARGETS:
        assert arch in str(e.value)


def _facts(name: str) -> dict:
    p = FACTS / name
    if not p.exists():
        pytest.skip("shared facts not present")
    return json.loads(p.read_text())


def test_descriptor_struct_matches_facts():
    st = _facts("amdgpu_kd.json")["structs"]["llvm_amdhsa_kernel_descriptor_t"]
    assert st["size"] == KD.KERNEL_DESCRIPTOR.size
    for f in st["fields"]:
        off, typ = KD.KERNEL_DESCRIPTOR.fields[f["name"]]
        assert off == f["offset"] and KD.KERNEL_DESCRIPTOR.field_size(typ) == f["size"]


@pytest.mark.parametrize("table,prefix", [("RSRC1", "COMPUTE_PGM_RSRC1"), ("RSRC2", "COMPUTE_PGM_RSRC2"),
                                          ("RSRC3", "COMPUTE_PGM_RSRC3"), ("CODE_PROPERTIES", "KERNEL_CODE_PROPERTY")])
def test_descriptor_bits_match_facts(table, prefix):
    consts = _facts("amdgpu_kd.json")["constants"]
    tables = getattr(KD, table)
    tables = tables.values() if isinstance(tables, dict) else [tables]
    for bits in tables:
        for name, f in bits.fields.items():
            pat = re.compile(rf"{prefix}_(?:[A-Z0-9]+_)*?{name}_SHIFT$")
            cands = {(consts[k], consts[k[:-6] + "_WIDTH"]) for k in consts if pat.match(k)}
            assert (f.lo, f.hi - f.lo + 1) in cands, f"{bits.name}.{name} at {f.lo}:{f.hi}, facts say {cands}"


def test_dispatch_packet_one_layout():
    """The packet processor's compiled reader and the runtime's kernarg patch come from the one struct the
    packet builder writes; a reader refuses fields out of order."""
    import struct as _s

    import pytest as _pytest

    from amdq.hw import aql as A
    p = A.dispatch_packet((64, 2, 1), (3, 4, 1), 96, 512, 0x1000, kernarg=0x2000, hdr=0x1502)
    _s.pack_into("<Q", p, A.KERNARG_ADDRESS, 0xABCD000)
    f = A.KERNEL_DISPATCH.unpack(p)
    assert A.DISPATCH_READ.unpack_from(p) == (f["full_header"], 64, 2, 1, 192, 8, 1, 96, 512, 0x1000, 0xABCD000)
    assert f["setup"] == 2 and A.COMPLETION_SIGNAL.unpack_from(p) == (0,)
    with _pytest.raises(ValueError, match="ascending"):
        A.KERNEL_DISPATCH.reader("grid_size_x", "header")


def test_compiled_decoders_give_the_decoder_fields():
    """Words.decoder (the compiled decode of a fixed-length packet, what the simulated engines run) gives what decode
    gives, fields in the same order, for every fixed-length SDMA and PM4 layout; a layout with a tail has none."""
    import random
    from amdq.hw import pm4 as P
    from amdq.hw import sdma as S
    rng = random.Random(14)
    layouts = [lay for t in (S.SDMA4, S.SDMA5, S.SDMA6) for lay in t.layouts.values()]
    layouts += [lay for gen in (9, 10, 11, 12) for lay in P.table(gen).layouts.values()]
    compiled = 0
    for lay in layouts:
        dec = lay.decoder()
        if lay.tail or lay.optional:
            assert dec is None
            continue
        compiled += 1
        for _ in range(20):
            words = [rng.getrandbits(32) for _ in lay.words]
            want = lay.decode(words)
            got = dec(words)
            assert got == want and list(got) == list(want), lay.name
    assert compiled > 20


def test_sdma_fixed_encoders_give_the_encoder_words():
    """The precomputed encoders of the copy queue's per-submission packets (Words.encoder) give what encode gives,
    and refuse what it refuses."""
    import random
    from amdq.hw import sdma as S
    rng = random.Random(14)
    for t in (S.SDMA4, S.SDMA5, S.SDMA6):
        for name, fields in (("COPY_LINEAR", ("count", "src_addr", "dst_addr")), ("FENCE", ("addr", "data")),
                             ("TRAP", ("int_context",))):
            enc = t.encoder(name, *fields)
            for _ in range(100):
                vals = [rng.randrange(0, 1 << rng.choice((8, 22, 32, 48, 64))) for _ in fields]
                try:
                    want = t.encode(name, **dict(zip(fields, vals)))
                except ValueError:
                    with pytest.raises(ValueError):
                        enc(*vals)
                    continue
                assert enc(*vals) == want
