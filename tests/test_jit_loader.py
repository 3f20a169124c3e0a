"""The JIT's own object loader (sim/shader/jit/loader.py) against MCJIT, and the warm start it gives: compiled code
from the disk cache runs without LLVM."""
import ctypes
import json
import os
import subprocess
import sys
import re
import textwrap

import numpy as np
import pytest

from amdq.sim.shader.jit import compiled, loader

# What the JIT's generated code leans on: a switch (a jump table in .rodata, relocated), float and vector constants
# (constant pools), a private constant table, calls to internal functions (through the GOT in the large code model).
IR = """
@table = private unnamed_addr constant [8 x i32] [i32 3, i32 1, i32 4, i32 1, i32 5, i32 9, i32 2, i32 6]

define internal i32 @twist(i32 %x) noinline {
  %a = mul i32 %x, 2654435761
  %b = lshr i32 %a, 7
  %c = xor i32 %a, %b
  ret i32 %c
}

define internal float @pick(i32 %k) noinline {
  switch i32 %k, label %d [ i32 0, label %l0  i32 1, label %l1  i32 2, label %l2  i32 3, label %l3
                            i32 4, label %l4  i32 5, label %l5  i32 6, label %l6 ]
l0: ret float 1.5
l1: ret float -2.25
l2: ret float 3.125
l3: ret float 1024.0
l4: ret float 0x36A0000000000000
l5: ret float -0.0
l6: ret float 7.75
d:  ret float 0.5
}

define i32 @mix(i32 %x, i32 %k) {
  %t = call i32 @twist(i32 %x)
  %i = and i32 %k, 7
  %p = getelementptr [8 x i32], ptr @table, i32 0, i32 %i
  %v = load i32, ptr %p
  %s = add i32 %t, %v
  %f = call float @pick(i32 %k)
  %fi = bitcast float %f to i32
  %r = xor i32 %s, %fi
  ret i32 %r
}

define void @scale(ptr %out, ptr %in) {
  %v = load <8 x float>, ptr %in, align 4
  %m = fmul <8 x float> %v, <float 1.5, float 2.5, float 0.25, float -1.0, float 3.0, float 0.0009765625, float 8.0, float 0.125>
  %a = fadd <8 x float> %m, <float 0.5, float 0.5, float 0.5, float 0.5, float -7.0, float 2.0, float 1.0, float 0.0>
  store <8 x float> %a, ptr %out, align 4
  ret void
}
"""
MIX = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32, ctypes.c_int32)
SCALE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


def _object(ir: str) -> bytes:
    """The object compiled.py's target machine emits for `ir` (the first tier's settings)."""
    llvm, tm = compiled._llvm(compiled.FAST)
    mod = llvm.parse_assembly(ir)
    mod.verify()
    mod.triple = tm.triple
    return tm.emit_object(mod)


def _mcjit(obj: bytes, names: list[str]) -> dict[str, int]:
    llvm, tm = compiled._llvm(compiled.FAST)
    eng = compiled._engine(llvm, tm)
    compiled._add(llvm, eng, obj)
    return {n: eng.get_function_address(n) for n in names}


def test_loaded_code_matches_mcjit():
    obj = _object(IR)
    mine, theirs = loader.load(obj, ["mix", "scale"]), _mcjit(obj, ["mix", "scale"])
    assert set(mine) >= {"mix", "scale"} and mine["mix"] != theirs["mix"]
    a, b = MIX(mine["mix"]), MIX(theirs["mix"])
    for x in (0, 1, 7, 12345, -1, 2**31 - 1):
        for k in range(-1, 10):
            assert a(x, k) == b(x, k), (x, k)
    src = np.array([1, -2, 3.5, 1e30, -0.0, 7, 1e-40, np.inf], np.float32)
    outs = []
    for fns in (mine, theirs):
        out = np.zeros(8, np.float32)
        SCALE(fns["scale"])(out.ctypes.data, src.ctypes.data)
        outs.append(out)
    assert outs[0].tobytes() == outs[1].tobytes()


def test_every_function_of_a_region_is_found():
    obj = _object(IR)
    with pytest.raises(loader.Unsupported, match="functions missing"):
        loader.load(obj, ["mix", "nope"])


def test_an_undefined_symbol_is_left_to_mcjit(tmp_path, monkeypatch):
    """An object calling outside itself (here libm's sinf) is refused by the loader; compiled.get maps it through
    MCJIT instead, and it runs."""
    ir = """
declare float @sinf(float)
define i32 @chain(i32 %x, i32 %k) { ret i32 0 }
define i32 @f(i32 %x, i32 %k) {
  %a = sitofp i32 %x to float
  %s = call float @sinf(float %a)
  %r = fptosi float %s to i32
  %t = add i32 %r, %k
  ret i32 %t
}
"""
    obj = _object(ir)
    with pytest.raises(loader.Unsupported, match="sinf"):
        loader.load(obj, ["f"])
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(tmp_path))
    key = "f" * 64
    (tmp_path / f"{key}.o").write_bytes(obj)
    before = compiled.stats["mcjit_loads"]
    c = compiled.get(key, ["f"], lambda tier: pytest.fail("compiled instead of loaded"))
    assert c.how == "mcjit" and compiled.stats["mcjit_loads"] == before + 1
    assert MIX(c.address("f"))(0, 5) == 5
    compiled.MEMORY.pop(key, None)


def test_a_load_does_not_wait_for_a_compile(tmp_path, monkeypatch):
    """An object loader.py maps is loaded while LLVM's lock is held (the worker compiling, for hundreds of ms at -O2);
    one that needs MCJIT waits for it."""
    import threading
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(tmp_path))
    key = "e" * 64
    (tmp_path / f"{key}.lnk").write_bytes(loader.pack(loader.link(_object(IR), ["mix"])))
    got = []
    with compiled._lock:                                     # a compile in progress
        t = threading.Thread(target=lambda: got.append(compiled.get(key, ["mix"], lambda tier: pytest.fail("compiled"))))
        t.start()
        t.join(10)
        assert got and got[0].how == "native" and got[0].source == "disk"
        assert MIX(got[0].address("mix"))(3, 2) == MIX(loader.load(_object(IR), ["mix"])["mix"])(3, 2)
    compiled.MEMORY.pop(key, None)


def test_a_linked_object_places_anywhere():
    """The linked form (relocated at 0, the address-holding slots listed) packs and unpacks to the same thing and
    runs as MCJIT's mapping wherever it is placed."""
    obj = _object(IR.replace("define internal i32 @twist", "define i32 @twist"))    # (called through the GOT)
    lk = loader.unpack(loader.pack(loader.link(obj, ["mix", "scale"])))
    assert len(lk.fixups) > 0 and {"mix", "scale"} <= lk.entries.keys()    # (the GOT's entries hold addresses)
    theirs = MIX(_mcjit(obj, ["mix"])["mix"])
    for _ in range(3):
        mix = MIX(loader.place(lk)["mix"])
        assert all(mix(x, k) == theirs(x, k) for x in (0, 1, 12345, -1) for k in range(-1, 10))


CALLER = """
declare i32 @mix(i32, i32)
define i32 @twice(i32 %x, i32 %k) {
  %a = call i32 @mix(i32 %x, i32 %k)
  %b = call i32 @mix(i32 %a, i32 %k)
  ret i32 %b
}
"""


def test_objects_link_together():
    """Two objects, one calling a function the other defines (as a region compiled in parts: the chain and the blocks
    of the other part): one image, the call resolved; a function two objects define, or one no object does, is
    refused."""
    a, b = _object(CALLER), _object(IR)
    with pytest.raises(loader.Unsupported, match="mix"):
        loader.link(a, ["twice"])                            # (alone: @mix undefined)
    fns = loader.place(loader.unpack(loader.pack(loader.link([a, b], ["twice", "mix"]))))
    mix, twice = MIX(fns["mix"]), MIX(fns["twice"])
    assert all(twice(x, k) == mix(mix(x, k), k) for x in (0, 7, -1, 99991) for k in range(9))
    with pytest.raises(loader.Unsupported, match="twice"):
        loader.link([a, b, a], ["twice"])


@pytest.mark.parametrize("damage", ["flip", "truncated", "fixup outside", "entry outside", "not linked"])
def test_a_damaged_linked_object_is_refused(damage):
    import msgpack
    import struct
    import zlib
    blob = bytearray(loader.pack(loader.link(_object(IR), ["mix"])))
    n = len(loader.MAGIC)
    if damage == "flip":
        blob[len(blob) // 2] ^= 0x10
    elif damage == "truncated":
        blob = blob[:len(blob) - 9]
    elif damage == "not linked":
        blob = bytearray(_object(IR))
    else:
        f = msgpack.unpackb(bytes(blob[n + 4:]))
        if damage == "fixup outside":
            f["fixups"] += struct.pack("<I", len(f["code"]) - 4)
        else:
            f["entries"]["mix"] = len(f["code"]) + 16
        body = msgpack.packb(f)
        blob = bytearray(loader.MAGIC + struct.pack("<I", zlib.crc32(body)) + body)
    with pytest.raises(loader.Unsupported):
        loader.unpack(bytes(blob))


def test_a_damaged_linked_file_is_compiled_again(tmp_path, monkeypatch):
    """compiled.get over a .lnk file that does not unpack compiles the region and replaces the file; an object file
    of an earlier version (.o, linkable) is loaded natively and written linked."""
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(tmp_path))
    key, made = "d" * 64, []
    (tmp_path / f"{key}.lnk").write_bytes(b"amdq-linked-1\n" + b"\0" * 40)
    c = compiled.get(key, ["mix"], lambda tier: made.append(tier) or IR)
    assert made and c.source == "compiled" and MIX(c.address("mix"))(3, 2) == MIX(loader.load(_object(IR), ["mix"])["mix"])(3, 2)
    assert loader.unpack((tmp_path / f"{key}.lnk").read_bytes()).entries.keys() >= {"mix"}
    compiled.MEMORY.pop(key, None)
    old = "c" * 64
    (tmp_path / f"{old}.o").write_bytes(_object(IR))
    c = compiled.get(old, ["mix"], lambda tier: pytest.fail("compiled"))
    assert c.how == "native" and c.source == "disk" and (tmp_path / f"{old}.lnk").exists()
    compiled.MEMORY.pop(old, None)


@pytest.mark.parametrize("damage", ["truncated", "not elf", "bad section table", "relocation outside"])
def test_a_damaged_object_is_refused(damage):
    obj = bytearray(_object(IR))
    if damage == "truncated":
        obj = obj[:len(obj) // 2]
    elif damage == "not elf":
        obj[1:4] = b"XYZ"
    elif damage == "bad section table":
        obj[0x28:0x30] = (len(obj) - 8).to_bytes(8, "little")
    else:                                               # a RELA entry's offset far past its section
        import struct
        shoff, = struct.unpack_from("<Q", obj, 0x28)
        shnum, = struct.unpack_from("<H", obj, 0x3C)
        for i in range(shnum):
            sh = shoff + 64 * i
            if struct.unpack_from("<I", obj, sh + 4)[0] == loader.SHT_RELA:
                off, = struct.unpack_from("<Q", obj, sh + 24)
                struct.pack_into("<Q", obj, off, 1 << 40)
                break
    with pytest.raises(loader.Unsupported):
        loader.load(bytes(obj), ["mix"])


def test_the_suites_objects_load_without_mcjit(tmp_path, monkeypatch):
    """Regions the JIT compiles (first tier and -O2: every instruction kind of the bench kernels) are mapped by the
    loader, never by MCJIT."""
    import harness
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(tmp_path))
    monkeypatch.setenv("AMDQ_SIM_JIT", "sync")
    from amdq.sim.shader.jit import runtime
    runtime.forget()
    before = dict(compiled.stats)
    src = "__kernel void k(__global float *a, __global const float *b) { int i = get_global_id(0); " \
          "float s = 0; for (int j = 0; j < 8; j++) s = fma(s, b[(i + j) & 255], a[i]); a[i] = s > 1 ? sqrt(s) : s; }"
    a, b = np.linspace(-2, 2, 256, dtype=np.float32), np.linspace(0, 1, 256, dtype=np.float32)
    harness.run_cl(src, "k", [a, b], (4, 1, 1), (64, 1, 1))
    assert compiled.stats["compiled"] > before["compiled"]
    assert compiled.stats["mcjit_loads"] == before["mcjit_loads"]
    assert all(c.how == "native" for c in compiled.MEMORY.values() if c.source == "compiled")


CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    sys.path[:0] = [{root!r}, {tests!r}]
    import harness
    from amdq.sim.shader.jit import compiled, library, runtime
    src = "__kernel void k(__global float *a) {{ int i = get_global_id(0); a[i] = a[i] * 3.0f + 1.0f; }}"
    a = np.arange(256, dtype=np.float32)
    runtime.prepare()                   # (what making a simulated GPU does: the read-ahead starts)
    runtime.prefetched(60)
    (out,), _ = harness.run_cl(src, "k", [a], (4, 1, 1), (64, 1, 1))
    print(json.dumps({{"ok": bool(np.array_equal(out, a * np.float32(3) + np.float32(1))),
                      "llvm": "llvmlite.binding" in sys.modules, "stats": compiled.stats,
                      "used": runtime.counts["wave_instructions"], "prefetched": runtime.counts["prefetched"],
                      "library": library.stats}}))
""")


def test_a_warm_process_runs_compiled_code_without_llvm(tmp_path):
    """A first process compiles (and writes the host down, the JIT library, and at exit its code pages' images and
    the index of the pages it ran); a second one places the library and reads that page's record and image ahead
    (when its simulated GPU is made), keys and loads that code without ever importing LLVM, and runs it compiled from
    its first dispatch."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "AMDQ_SIM_JIT_CACHE": str(tmp_path), "PYTHONPATH": root}
    code = CHILD.format(root=root, tests=os.path.join(root, "tests"))

    def child(mode: str) -> dict:
        p = subprocess.run([sys.executable, "-c", code], env={**env, "AMDQ_SIM_JIT": mode}, capture_output=True,
                           text=True, timeout=300, cwd=root)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout.strip().splitlines()[-1])
    first = child("sync")
    assert first["ok"] and first["llvm"] and first["stats"]["compiled"] > 0
    assert list((tmp_path / "hosts").iterdir())
    second = child("1")
    assert second["ok"] and not second["llvm"], "the warm process started LLVM"
    assert second["stats"]["image_loads"] > 0 and second["stats"]["compiled"] == 0 and second["used"] > 0
    assert first["prefetched"] == 0 and second["prefetched"] == 1
    assert first["library"]["compiled"] == 1 and (second["library"]["compiled"], second["library"]["loaded"]) == (0, 1)


def test_a_host_written_down_wrongly_is_asked_again(tmp_path, monkeypatch):
    """A hosts/ file that does not hold an identity is not believed: LLVM names the host (and the file is
    rewritten)."""
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(tmp_path))
    fp = compiled.host_fingerprint()
    if fp is None:
        pytest.skip("no /proc/cpuinfo: the host is always LLVM's")
    (tmp_path / "hosts").mkdir()
    (tmp_path / "hosts" / fp).write_text("garbage")
    monkeypatch.setattr(compiled, "_state", {k: v for k, v in compiled._state.items() if k != "known"})
    hid = compiled.host_id()
    assert hid == compiled._state["id"] and hid.count("|") >= 2
    assert (tmp_path / "hosts" / fp).read_text() == hid


def test_compile_threads_chosen(monkeypatch):
    """AMDQ_SIM_JIT_THREADS chooses how many threads a compile uses; otherwise up to two, as the cores allow."""
    for env, want in (("1", 1), ("2", 2)):
        monkeypatch.setenv("AMDQ_SIM_JIT_THREADS", env)
        monkeypatch.delitem(compiled._state, "threads", raising=False)
        assert compiled.compile_threads() == want
    monkeypatch.delenv("AMDQ_SIM_JIT_THREADS")
    monkeypatch.delitem(compiled._state, "threads", raising=False)
    assert 1 <= compiled.compile_threads() <= min(2, len(os.sched_getaffinity(0)))
    monkeypatch.delitem(compiled._state, "threads", raising=False)


def test_placed_functions_are_named_for_perf(tmp_path, monkeypatch):
    """AMDQ_SIM_JIT_PERFMAP: each placed object's global functions are written to perf's map file of the process,
    at the addresses they run at, each running up to the next one."""
    path = tmp_path / "perf.map"
    monkeypatch.setattr(loader, "_PERFMAP", True)
    monkeypatch.setattr(loader, "perfmap_path", lambda: str(path))
    lk = loader.link(_object(IR), ["mix", "scale"])
    at = loader.place(lk)
    rows = {name: (int(a, 16), int(n, 16)) for a, n, name in (line.split() for line in path.read_text().splitlines())}
    assert rows.keys() == {"mix", "scale"} and all(rows[k][0] == at[k] for k in at)
    first, second = sorted(rows, key=lambda k: rows[k][0])
    assert rows[first][0] + rows[first][1] == rows[second][0]
    assert rows[second][0] + rows[second][1] == at[second] - lk.entries[second] + len(lk.code)
    monkeypatch.setattr(loader, "_PERFMAP", False)
    loader.place(lk)
    assert len(path.read_text().splitlines()) == 2


def test_linked_objects_combine_into_one_mapping():
    """loader.combine lays several linked objects out as one (their address slots moved with them): placed once, each
    one's functions run as when it is placed alone, named "<part>/<function>"."""
    ext = _object(IR.replace("define internal i32 @twist", "define i32 @twist"))    # (called through the GOT)
    a, b = loader.link(ext, ["mix", "scale"]), loader.link(_object(IR), ["mix", "scale"])
    assert len(a.fixups) > 0
    both = loader.combine({"a": a, "b": b})
    assert both.entries.keys() == {f"{t}/{n}" for t in "ab" for n in a.entries.keys() | b.entries.keys()} - \
        {"b/twist"}
    at = loader.place(loader.unpack(loader.pack(both)))
    alone = MIX(loader.place(a)["mix"])
    for tag in "ab":
        mix = MIX(at[f"{tag}/mix"])
        assert all(mix(x, k) == alone(x, k) for x in (0, 1, 12345, -1) for k in range(-1, 10))
    x = np.arange(8, dtype=np.float32) - 3
    outs = []
    for fn in (at["a/scale"], at["b/scale"]):
        out = np.zeros(8, np.float32)
        SCALE(fn)(out.ctypes.data, x.ctypes.data)
        outs.append(out)
    assert np.array_equal(outs[0], outs[1]) and outs[0].any()
    image, spans = loader.unpack_image(loader.pack_image({"a": a, "b": b}))      # (a code page's image)
    assert image.code == both.code and image.entries == both.entries
    for tag, lk in (("a", a), ("b", b)):
        back = loader.split(image, tag, *spans[tag])
        assert back.code == lk.code and back.entries == lk.entries and np.array_equal(back.fixups, lk.fixups)


def test_an_import_is_bound_when_placed():
    """An object may leave functions another placed object defines (the JIT library's) undefined when the link
    allows them as imports: their GOT entries are filled when it is placed, wherever both lie; the imports survive
    pack/unpack and combine/split, and an import nothing binds is refused."""
    lib = loader.place(loader.link(_object(IR), ["mix"]))
    obj = _object(CALLER)
    with pytest.raises(loader.Unsupported, match="mix"):
        loader.link(obj, ["twice"], imports={"other"})          # (not an allowed import)
    lk = loader.link(obj, ["twice"], imports={"mix", "other"})
    assert set(lk.imports) == {"mix"} and len(lk.imports["mix"]) >= 1 and "mix" not in lk.entries
    mix = MIX(lib["mix"])

    def check(fns: dict, name: str = "twice") -> None:
        twice = MIX(fns[name])
        assert all(twice(x, k) == mix(mix(x, k), k) for x in (0, 7, -1, 99991) for k in range(9))
    check(loader.place(loader.unpack(loader.pack(lk)), lib.__getitem__))
    both = loader.combine({"a": loader.link(_object(IR), ["mix"]), "b": lk})
    assert set(both.imports) == {"mix"}
    check(loader.place(both, lib.__getitem__), "b/twice")
    image, spans = loader.unpack_image(loader.pack_image({"a": loader.link(_object(IR), ["mix"]), "b": lk}))
    back = loader.split(image, "b", *spans["b"])
    assert np.array_equal(back.imports["mix"], lk.imports["mix"])
    check(loader.place(back, lib.__getitem__))
    with pytest.raises(loader.Unsupported, match="import mix"):
        loader.place(lk)                                        # (nothing binds it)
    with pytest.raises(loader.Unsupported, match="import mix"):
        loader.place(lk, {}.__getitem__)


def test_a_damaged_import_is_refused():
    """A linked object whose import slot lies outside its code does not unpack."""
    import msgpack
    import struct
    import zlib
    blob = loader.pack(loader.link(_object(CALLER), ["twice"], imports={"mix"}))
    n = len(loader.MAGIC)
    f = msgpack.unpackb(blob[n + 4:])
    f["imports"]["mix"] += struct.pack("<I", len(f["code"]) - 4)
    body = msgpack.packb(f)
    with pytest.raises(loader.Unsupported, match="fields"):
        loader.unpack(loader.MAGIC + struct.pack("<I", zlib.crc32(body)) + body)


def test_regions_call_the_jit_library(tmp_path, monkeypatch):
    """The first tier's regions hold none of the shared functions: they import them from the JIT library (one module
    per wave size, compiled once and kept on disk like a region); a new process places it from disk, and a library
    file that does not load is compiled again. Every kernel still gives the interpreter's results (test_jit.py)."""
    import harness
    from amdq.sim.shader.jit import block, library, runtime
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(tmp_path))
    monkeypatch.setenv("AMDQ_SIM_JIT", "sync")
    texts: list[str] = []
    orig = block.ModuleGen.text_parts
    monkeypatch.setattr(block.ModuleGen, "text_parts", lambda self, n: texts.extend(got := orig(self, n)) or got)
    src = "__kernel void k(__global uint *a, __global const uint *b) { int i = get_global_id(0); " \
          "a[i] = a[i] * b[i & 15] + 7u; }"
    a, b = np.arange(256, dtype=np.uint32) * 977, np.arange(16, dtype=np.uint32) + 3
    want = a * b[np.arange(256) & 15] + np.uint32(7)

    def run() -> None:
        (out, _), _ = harness.run_cl(src, "k", [a.copy(), b], (4, 1, 1), (64, 1, 1))
        assert np.array_equal(out, want)
    runtime.forget()
    before = dict(library.stats)
    run()
    assert library.stats["compiled"] == before["compiled"] + 1
    assert texts and all(not re.search(r"^define .*@(gm_|lookup|tiles)", t, re.M) for t in texts)
    assert any(re.search(r"^declare .*@gm_r1[sv]_l(32|64)w(8|16)\(", t, re.M) for t in texts)
    made = [c for c in compiled.MEMORY.values() if c.source == "compiled" and c.linked is not None and c.linked.imports]
    assert made and all(set(c.linked.imports) <= library.imports() for c in made)
    (lib_file,) = [tmp_path / f"{library.key(lanes)}{compiled.LINKED}" for lanes in (32, 64)
                   if (tmp_path / f"{library.key(lanes)}{compiled.LINKED}").exists()]
    runtime.forget()                                    # (a new process: the library from disk)
    run()
    assert library.stats["compiled"] == before["compiled"] + 1 and library.stats["loaded"] == before["loaded"] + 1
    lib_file.write_bytes(b"not a linked object")
    runtime.forget()
    run()
    assert library.stats["compiled"] == before["compiled"] + 2
    runtime.forget()


@pytest.mark.parametrize("split", [False, True])
def test_a_region_mcjit_maps_binds_the_library(tmp_path, monkeypatch, split):
    """A region the loader refuses is mapped by MCJIT, its calls of the JIT library resolved to the placed library's
    functions: the interpreter's results. A region compiled in parts is compiled again whole for MCJIT (which
    resolves calls between large-code-model objects wrongly)."""
    import harness
    from amdq.sim.shader.jit import block, runtime
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(tmp_path))
    monkeypatch.setenv("AMDQ_SIM_JIT", "sync")
    runtime.forget()
    made: list[int] = []
    orig_parts = block.ModuleGen.text_parts
    monkeypatch.setattr(block.ModuleGen, "text_parts", lambda self, n: made.append(len(got := orig_parts(self, n)))
                        or got)
    if split:
        monkeypatch.setattr(block, "SPLIT_LINES", 0)
        monkeypatch.setattr(runtime, "compile_threads", lambda: 2)
    orig = loader.link

    def link(objs, names, imports=frozenset()):
        if any(n.startswith("blk_") for n in names):      # (a region's link: refused, as for an unknown relocation)
            raise loader.Unsupported("refused by the test")
        return orig(objs, names, imports)
    monkeypatch.setattr(loader, "link", link)
    src = "__kernel void k(__global uint *a, __global const uint *b) { int i = get_global_id(0); " \
          "a[i] = a[i] * b[i & 15] + 7u; }"
    a, b = np.arange(256, dtype=np.uint32) * 977, np.arange(16, dtype=np.uint32) + 3
    before = compiled.stats["mcjit_loads"]
    (out, _), _ = harness.run_cl(src, "k", [a.copy(), b], (4, 1, 1), (64, 1, 1))
    assert np.array_equal(out, a * b[np.arange(256) & 15] + np.uint32(7))
    assert compiled.stats["mcjit_loads"] > before and runtime.counts["wave_instructions"] > 0
    assert made == ([2, 1] if split else [1])          # (in parts, then whole for MCJIT)
    runtime.forget()


def test_a_library_that_cannot_be_made_leaves_the_regions_to_the_interpreter(tmp_path, monkeypatch):
    """When the JIT library cannot be compiled (LLVM fails) nor loaded, the regions that import it are not placed:
    they run in the interpreter, with its results, and the compile failure is counted; nothing crashes, and the
    library is not tried again until the process forgets (runtime.forget)."""
    import harness
    from amdq.sim.shader.jit import library, runtime
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(tmp_path))
    monkeypatch.setenv("AMDQ_SIM_JIT", "sync")
    runtime.forget()

    tried = []

    def broken(key, names, make_parts):
        tried.append(key)
        raise RuntimeError("LLVM code generation error (the test)")
    monkeypatch.setattr(compiled, "get_library", broken)
    src = "__kernel void k(__global uint *a, __global const uint *b) { int i = get_global_id(0); " \
          "a[i] = a[i] * b[i & 15] + 7u; }"
    a, b = np.arange(256, dtype=np.uint32) * 977, np.arange(16, dtype=np.uint32) + 3
    before, used = compiled.stats["compile_failures"], runtime.counts["wave_instructions"]
    (out, _), _ = harness.run_cl(src, "k", [a.copy(), b], (4, 1, 1), (64, 1, 1))
    assert np.array_equal(out, a * b[np.arange(256) & 15] + np.uint32(7))
    assert compiled.stats["compile_failures"] > before and runtime.counts["wave_instructions"] == used
    with pytest.raises(LookupError, match="LLVM code generation error"):
        library.address(library.symbol("lookup", 32))
    assert len(tried) == 1                  # (the failure is remembered: no compile again per region or image)
    runtime.forget()


def test_an_import_in_an_absolute_slot_is_bound():
    """An object calling an import through 8-byte absolute addresses in its code (large code model, not position
    independent: R_X86_64_64 against the import, one slot per call) gets the import's address in each slot."""
    llvm, _ = compiled._llvm(compiled.FAST)
    cpu, feats = compiled._state["cpu"]
    tm = compiled._state["target"].create_target_machine(cpu=cpu, features=feats, opt=0, codemodel="large",
                                                         reloc="static")
    mod = llvm.parse_assembly(CALLER)
    mod.triple = tm.triple
    lk = loader.link(tm.emit_object(mod), ["twice"], imports={"mix"})
    assert len(lk.imports["mix"]) == 2 and len(lk.fixups) == 0         # (the two calls' movabs immediates)
    lib = loader.place(loader.link(_object(IR), ["mix"]))
    mix, twice = MIX(lib["mix"]), MIX(loader.place(lk, lib.__getitem__)["twice"])
    assert all(twice(x, k) == mix(mix(x, k), k) for x in (0, 7, -1, 99991) for k in range(9))


def test_the_library_mcjit_maps(tmp_path, monkeypatch):
    """A JIT library the loader refuses is mapped by MCJIT, compiled once (its own functions are not imports: no
    compile of it from inside its own), and the regions placed natively bind it: the interpreter's results."""
    import harness
    from amdq.sim.shader.jit import library, runtime
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(tmp_path))
    monkeypatch.setenv("AMDQ_SIM_JIT", "sync")
    runtime.forget()
    orig_link, made = loader.link, []

    def link(objs, names, imports=frozenset()):
        if any(n.startswith("lookup_l") for n in names):      # (the library's link: refused)
            raise loader.Unsupported("refused by the test")
        return orig_link(objs, names, imports)
    orig_get = compiled.get_library

    def get_library(key, names, make_parts):
        made.append(key)
        return orig_get(key, names, make_parts)
    monkeypatch.setattr(loader, "link", link)
    monkeypatch.setattr(compiled, "get_library", get_library)
    before = compiled.stats["mcjit_loads"]
    library.ready((32,))
    assert len(made) == 1 and compiled.stats["mcjit_loads"] == before + 1
    src = "__kernel void k(__global uint *a, __global const uint *b) { int i = get_global_id(0); " \
          "a[i] = a[i] * b[i & 15] + 7u; }"
    a, b = np.arange(256, dtype=np.uint32) * 977, np.arange(16, dtype=np.uint32) + 3
    (out, _), _ = harness.run_cl(src, "k", [a.copy(), b], (4, 1, 1), (64, 1, 1))
    assert np.array_equal(out, a * b[np.arange(256) & 15] + np.uint32(7)) and len(made) == 1
    runtime.forget()


COLD_CHILD = textwrap.dedent("""
    import atexit, json, os, sys
    atexit.register(lambda: print(json.dumps({{"llvm": "llvmlite.binding" in sys.modules}})))   # (runs last)
    import numpy as np
    sys.path[:0] = [{root!r}, {tests!r}]
    import harness
    from amdq.sim.shader.jit import runtime
    runtime.HOT = float("inf")          # (nothing gets compiled: the interpreter heats the code, and that is noted)
    src = "__kernel void k(__global float *a) {{ int i = get_global_id(0); a[i] = a[i] * 3.0f + 1.0f; }}"
    a = np.arange(4096, dtype=np.float32)
    for _ in range(20):
        (out,), _ = harness.run_cl(src, "k", [a], (64, 1, 1), (64, 1, 1))
    assert np.array_equal(out, a * np.float32(3) + np.float32(1))
""")


def test_a_cold_process_that_compiles_nothing_never_starts_llvm(tmp_path):
    """A first process on a machine (empty disk cache, the host not written down) whose code never gets hot enough
    to compile: it names its code pages and writes their heat down at exit without starting LLVM (the vector width
    comes from the kernel's CPU flags until LLVM named the host)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "AMDQ_SIM_JIT_CACHE": str(tmp_path), "PYTHONPATH": root, "AMDQ_SIM_JIT": "1"}
    env.pop("AMDQ_SIM_JIT_WIDTH", None)
    p = subprocess.run([sys.executable, "-c", COLD_CHILD.format(root=root, tests=os.path.join(root, "tests"))],
                       env=env, capture_output=True, text=True, timeout=300, cwd=root)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"llvm": False}, "the cold process started LLVM"
    assert list((tmp_path / "pages").iterdir()), "no heat written down"
    assert not (tmp_path / "hosts").exists()


def test_the_cpu_flags_give_llvms_vector_width():
    """The width a process picks before LLVM named the host (the kernel's CPU flags) is the one LLVM's features give:
    the page keys of both kinds of process agree."""
    flags = compiled.cpu_flags()
    if flags is None:
        pytest.skip("no /proc/cpuinfo flags: the width is always LLVM's")
    assert ("avx512f" in flags) == ("+avx512f" in compiled.host_features())
