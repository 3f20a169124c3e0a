"""The tools of the `amdq` command: info (per-target board figures), decode (dumps of real launches, raw streams),
run (one kernel from the command line), disasm labels, AMDQ_TRACE, the dispatch progress line, --version."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

import amdq
from amdq.cli import build_parser, main
from amdq.hw import aql as A
from amdq.hw import pm4, sdma
from amdq.hw.boards import BOARDS
from amdq.hw.targets import TARGETS

AMDQ = [sys.executable, "-m", "amdq.cli"]
ROOT = Path(__file__).resolve().parent.parent
VADD = resources.files("amdq").joinpath("examples/vadd.ll").read_text()


def run(*args: str, env: dict | None = None, cwd: str | None = None) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([*AMDQ, *args], capture_output=True, text=True, timeout=300, env=e, cwd=cwd)


def one_line_error(r: subprocess.CompletedProcess, cmd: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith("amdq: no AMD GPU")]
    assert len(lines) == 1 and lines[0].startswith(f"amdq {cmd}: "), r.stderr
    return lines[0]


# -- --version and help ------------------------------------------------------------------------------
def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"amdq {amdq.__version__}"


def test_every_positional_argument_has_help():
    ap = build_parser()
    sub = next(a for a in ap._actions if a.__class__.__name__ == "_SubParsersAction")
    assert {"info", "decode", "run", "disasm", "inspect", "demo"} <= set(sub.choices)
    for name, p in sub.choices.items():
        for a in p._actions:
            if not a.option_strings:
                assert a.help, f"amdq {name}: positional {a.dest} has no help"


# -- info ------------------------------------------------------------------------------------------
def test_board_table_is_the_targets_source():
    for arch, t in TARGETS.items():
        b = BOARDS[arch]
        assert (t.board, t.cus, t.ses, t.vram_bytes) == (b.name, b.cus, b.ses, b.vram_gib << 30)
    assert BOARDS["gfx1100"].bandwidth_gbs == 960.0 and BOARDS["gfx1201"].bandwidth_gbs == 640.0


def test_info_json_per_target(capsys):
    got = {}
    for arch in ("gfx1100", "gfx1201", "gfx942"):
        assert main(["info", "--device", f"SIM:{arch}", "--json"]) == 0
        (e,) = json.loads(capsys.readouterr().out)
        b, t = BOARDS[arch], TARGETS[arch]
        assert e["arch"] == arch and e["board"] == b.name
        assert e["compute_units"] == b.cus and e["shader_engines"] == b.ses
        assert e["engine_clock_mhz"] == b.engine_mhz and e["vram_bytes"] == b.vram_gib << 30
        assert e["wave_size"] == t.wave_size and e["lds_bytes"] == t.lds_bytes
        assert e["memory"] == {"type": b.memory, "gbps": b.memory_gbps, "bus_bits": b.bus_bits,
                               "bandwidth_gbs": round(b.bandwidth_gbs, 1)}
        got[arch] = e
    for key in ("compute_units", "shader_engines", "engine_clock_mhz", "vram_bytes"):
        assert len({e[key] for e in got.values()}) == 3, key          # real figures per target, not one for all
    assert got["gfx942"]["num_xcc"] == 8 and got["gfx942"]["wave_size"] == 64


def test_info_text(capsys):
    assert main(["info", "--device", "SIM:gfx1201"]) == 0
    out = capsys.readouterr().out
    assert "Radeon RX 9070 XT" in out and "2970 MHz peak" in out and "4 shader engines" in out
    assert "GDDR6, 20 Gbps x 256 bits = 640 GB/s" in out


# -- decode ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pm4_dump(tmp_path_factory):
    """A dump of a gfx1100 PM4 queue after a launch and a resubmitted bound launch (its work in an IB)."""
    from amdq.tools.decode import dump_queues
    path = tmp_path_factory.mktemp("dump") / "pm4.dump"
    dev = amdq.open_device("SIM:gfx1100")
    try:
        if dev.queue.kind != "compute":
            pytest.skip("the compute queue of gfx1100 is not PM4 here (AMD_AQL set)")
        k = dev.load(amdq.compile(VADD, dev.arch))["vadd"]
        a, c = dev.upload(np.ones(256, np.float32)), dev.alloc(1024)
        k(a, a, c, 2.0, 256, grid=(1, 1, 1), block=(256, 1, 1), wait=True)
        b = k.bind(a, a, c, 3.0, 256, grid=(1, 1, 1), block=(256, 1, 1))
        b.submit()
        dev.synchronize()
        doc = dump_queues(dev, str(path))
        ib = b.ib_alloc.va
    finally:
        dev.close()
    return path, doc, ib


def test_decode_dump_of_a_pm4_launch(pm4_dump, capsys):
    path, doc, ib = pm4_dump
    assert doc["arch"] == "gfx1100" and {q["kind"] for q in doc["queues"]} == {"pm4", "sdma"}
    assert any(va == ib for va, _ in doc["memory"])                     # the bound launch's IB was dumped
    assert main(["decode", str(path)]) == 0
    out = capsys.readouterr().out
    for s in ("SET_SH_REG", "GC.regCOMPUTE_PGM_LO", "GC.regCOMPUTE_PGM_RSRC2", "GC.regCOMPUTE_NUM_THREAD_X = 0x00000100",
              "NUM_THREAD_FULL=0x100", "DISPATCH_DIRECT", "kernel vadd", "RELEASE_MEM",
              "EVENT_TYPE=CACHE_FLUSH_AND_INV_TS_EVENT", "DATA_SEL=SEND_64_BIT_DATA", "COPY_LINEAR", "FENCE"):
        assert s in out, s
    lines = out.splitlines()
    i = next(k for k, ln in enumerate(lines) if f"IB_BASE={ib:#x}" in ln)
    assert lines[i + 1].strip() == f"IB @ {ib:#x}, {int(lines[i].split('IB_SIZE=')[1].split()[0], 0)} dwords:"
    inside = lines[i + 2:i + 40]
    assert any("DISPATCH_DIRECT" in ln and "kernel vadd" in ln for ln in inside)    # followed into the IB
    assert any(f"{ib:#x} ACQUIRE_MEM" in ln for ln in inside)


def test_decode_dump_without_ib_memory(pm4_dump):
    from amdq.tools.decode import decode_dump
    _, doc, ib = pm4_dump
    out = "\n".join(decode_dump({**doc, "memory": []}))
    assert f"(not followed: IB at {ib:#x} is not in the dump)" in out


def test_decode_follows_aql_vendor_packets_of_a_graph():
    from amdq.tools.decode import decode_dump, dump_queues
    dev = amdq.open_device("SIM:gfx942")
    try:
        k = dev.load(amdq.compile(VADD, dev.arch))["vadd"]
        a, c = dev.upload(np.ones(256, np.float32)), dev.alloc(1024)
        with dev.capture() as g:
            k(a, a, c, 2.0, 256, grid=(1, 1, 1), block=(256, 1, 1))
        dev.synchronize()
        dev.sim.defer = True                       # the packets stay in the ring until the dump is taken
        try:
            k(a, a, c, 3.0, 256, grid=(1, 1, 1), block=(256, 1, 1))
            g.replay()
            doc = dump_queues(dev)
        finally:
            dev.sim.defer = False
        dev.synchronize()
        assert np.allclose(c.numpy(np.float32), 3.0)
    finally:
        dev.close()
    out = "\n".join(decode_dump(doc))
    assert "KERNEL_DISPATCH" in out and "kernel vadd" in out and "workgroup=(256, 1, 1)" in out
    assert "VENDOR PM4_IB" in out
    assert out.count("IB @ ") >= 2                 # the vendor packet's IB, and the graph's IB inside it
    assert "GC[0].regCOMPUTE_PGM_LO" in out and "DISPATCH_DIRECT" in out


def test_decode_run_script(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import sys, numpy as np, amdq\n"
                      "from importlib import resources\n"
                      "src = resources.files('amdq').joinpath('examples/vadd.ll').read_text()\n"
                      "dev = amdq.open_device(sys.argv[1])\n"
                      "k = dev.load(amdq.compile(src, dev.arch))['vadd']\n"
                      "a, c = dev.upload(np.ones(64, np.float32)), dev.alloc(256)\n"
                      "k(a, a, c, 2.0, 64, grid=(1, 1, 1), block=(64, 1, 1), wait=True)\n")
    dump = tmp_path / "run.dump"
    r = run("decode", "--run", str(script), "--save", str(dump), "--", "SIM:gfx1201", env={"AMD_AQL": "0"})
    assert r.returncode == 0, r.stderr
    assert "SIMKFD+AMD:gfx1201" in r.stdout and "DISPATCH_DIRECT" in r.stdout and "kernel vadd" in r.stdout
    assert "GC.regCOMPUTE_NUM_THREAD_X = 0x00000040" in r.stdout
    assert dump.stat().st_size < 64 << 10                 # the written part of the rings, not 16 MiB of ring
    r2 = run("decode", str(dump))
    assert r2.returncode == 0 and r2.stdout == r.stdout


def test_decode_malformed_dump_is_a_clean_error(tmp_path):
    import msgpack
    f = tmp_path / "bad.dump"
    f.write_bytes(msgpack.packb({"format": "amdq-dump", "version": 1, "arch": "gfx1100", "memory": [],
                                 "queues": [{"kind": "pm4", "ring": b"\0" * 16}]}))
    assert "dumped queue 0 is malformed" in one_line_error(run("decode", str(f)), "decode")
    f.write_bytes(msgpack.packb({"format": "amdq-dump", "version": 7}))
    assert "dump version 7" in one_line_error(run("decode", str(f)), "decode")


def test_decode_raw_pm4_register_writes(tmp_path, capsys):
    from amdq.hw import regs
    gc = regs.load("GC", (11, 0, 0))
    base = regs.bases("navi")["GC"]
    rsrc2 = gc.regCOMPUTE_PGM_RSRC2
    addr = rsrc2.address(base)
    dw = pm4.encode("SET_SH_REG", 11, REG=addr, VALUES=[rsrc2.encode(USER_SGPR=6, TGID_X_EN=1)])
    uc = gc.regGRBM_GFX_INDEX if "regGRBM_GFX_INDEX" in gc else None
    if uc is not None:
        dw += pm4.encode("SET_UCONFIG_REG", 11, REG=uc.address(base), VALUES=[uc.encode(SE_BROADCAST_WRITES=1)])
    dw += pm4.encode("WRITE_DATA", 11, DST_SEL=0, ADDR=addr, DATA=[rsrc2.encode(TGID_Y_EN=1)])
    f = tmp_path / "raw.bin"
    f.write_bytes(struct.pack(f"<{len(dw)}I", *dw))
    assert main(["decode", str(f), "--kind", "pm4", "--arch", "gfx1100"]) == 0
    out = capsys.readouterr().out
    assert "SET_SH_REG (1 register)" in out and "GC.regCOMPUTE_PGM_RSRC2 = 0x0000008c  USER_SGPR=6 TGID_X_EN=1" in out
    assert "WRITE_DATA" in out and "DST_SEL=MEM_MAPPED_REGISTER" in out and "TGID_Y_EN=1" in out
    if uc is not None:
        assert "SET_UCONFIG_REG" in out and "GC.regGRBM_GFX_INDEX" in out and "SE_BROADCAST_WRITES=1" in out
    assert main(["decode", str(f), "--kind", "pm4", "--gen", "11"]) == 0
    assert capsys.readouterr().out == out


def test_decode_raw_sdma_and_aql(tmp_path, capsys):
    dw = sdma.encode("COPY_LINEAR", 6, count=0xFF, src_addr=0x1000, dst_addr=0x2000)
    dw += sdma.encode("INDIRECT", 6, ib_base=0x40000, ib_size=16)
    f = tmp_path / "sdma.bin"
    f.write_bytes(struct.pack(f"<{len(dw)}I", *dw))
    assert main(["decode", str(f), "--kind", "sdma", "--gen", "6"]) == 0
    out = capsys.readouterr().out
    assert "COPY_LINEAR count=0xff src_addr=0x1000 dst_addr=0x2000" in out
    assert "INDIRECT" in out and "(not followed: IB at 0x40000 is not in the dump)" in out
    pkt = A.dispatch_packet((64, 1, 1), (4, 1, 1), 0, 0, 0xABC000, 0xDEF000,
                            A.header(A.HSA_PACKET_TYPE_KERNEL_DISPATCH, 1))
    f = tmp_path / "aql.bin"
    f.write_bytes(bytes(pkt) + bytes(A.BARRIER_AND.pack(header=A.header(A.HSA_PACKET_TYPE_BARRIER_AND),
                                                        dep_signal=[{"handle": 0x5000}])))
    assert main(["decode", str(f), "--kind", "aql", "--arch", "gfx942"]) == 0
    out = capsys.readouterr().out
    assert "KERNEL_DISPATCH" in out and "workgroup=(64, 1, 1) grid=(256, 1, 1)" in out
    assert "kernel_object=0xabc000 kernarg_address=0xdef000" in out and "BARRIER_AND" in out and "0x5000" in out


@pytest.mark.parametrize("argv, what", [
    (["--kind", "pm4"], "needs --arch"),
    ([], "is not an amdq dump"),
    (["--kind", "pm4", "--gen", "10"], "no supported target of GFX generation 10"),
    (["--kind", "aql", "--arch", "gfx1100"], "not whole 64-byte AQL packets"),
    (["--kind", "pm4", "--arch", "gfx803"], "UnsupportedTarget"),
])
def test_decode_bad_input_is_a_clean_error(tmp_path, argv, what):
    f = tmp_path / "x.bin"
    f.write_bytes(b"\x01\x02\x03\x04" * 3)
    assert what in one_line_error(run("decode", str(f), *argv), "decode")


# -- run -------------------------------------------------------------------------------------------
def test_run_writes_outputs(tmp_path):
    a = np.arange(300, dtype=np.float32)
    b = np.linspace(-1, 1, 300).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    ll = tmp_path / "vadd.ll"
    ll.write_text(VADD)
    co = tmp_path / "vadd.o"
    co.write_bytes(amdq.compile(VADD, "gfx1201"))
    r = run("run", str(co), "--arg", str(tmp_path / "a.npy"), "--arg", str(tmp_path / "b.npy"), "--arg",
            "zeros:300:float32", "--arg", "0.5", "--arg", "300", "--grid", "2", "--block", "256",
            "--device", "SIM:gfx1201", "--out", str(tmp_path / "out"), "--json")
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert rec["kernel"] == "vadd" and rec["grid"] == [2, 1, 1] and rec["block"] == [256, 1, 1]
    for stage in ("encode", "submit", "gpu", "wait"):
        assert rec["stages"][stage] is not None and rec["stages"][stage] >= 0, stage
    c = np.load(tmp_path / "out" / "2_c.npy")
    assert c.dtype == np.float32 and c.shape == (300,)
    assert np.array_equal(c, np.float32(0.5) * b + a)                  # fma(s, b, a) is exact here
    assert np.array_equal(np.load(tmp_path / "out" / "0_a.npy"), a)
    r = run("run", str(ll), "--kernel", "vadd", "--arg", str(tmp_path / "a.npy"), "--arg", str(tmp_path / "b.npy"),
            "--arg", "size:1200", "--arg", "f32:2", "--arg", "i32:100", "--grid", "1", "--block", "128",
            "--device", "SIM:gfx1100", "--out", str(tmp_path / "o2"))
    assert r.returncode == 0, r.stderr
    assert "vadd on SIMKFD+AMD:gfx1100" in r.stdout and "gpu" in r.stdout and "3_c.npy" not in r.stdout
    c = np.load(tmp_path / "o2" / "2_c.npy").view(np.float32)
    assert np.array_equal(c[:100], a[:100] + 2 * b[:100]) and not c[100:].any()     # n=100: the rest untouched


@pytest.mark.parametrize("args, what", [
    (["--arg", "zeros:4:float32"], "takes 5 arguments"),
    (["--arg", "7", "--arg", "zeros:4:float32", "--arg", "zeros:4:float32", "--arg", "1", "--arg", "1"],
     "argument a is a pointer"),
    (["--arg", "zeros:4:float32"] * 3 + ["--arg", "f64:1", "--arg", "1"], "argument s is 4 bytes; f64 is 8"),
    (["--arg", "zeros:4:float32"] * 3 + ["--arg", "1.0", "--arg", "i32:9999999999"], "does not fit i32"),
    (["--arg", "nope.npy"] + ["--arg", "zeros:4:float32"] * 2 + ["--arg", "1.0", "--arg", "1"], "no file nope.npy"),
    (["--kernel", "missing"], "no kernel 'missing'"),
])
def test_run_bad_arguments_are_clean_errors(tmp_path, args, what):
    co = tmp_path / "vadd.o"
    co.write_bytes(amdq.compile(VADD, "gfx1100"))
    r = run("run", str(co), *args, "--grid", "1", "--block", "64", "--device", "SIM:gfx1100", cwd=str(tmp_path))
    assert what in one_line_error(r, "run")


def test_run_bad_grid(tmp_path):
    co = tmp_path / "vadd.o"
    co.write_bytes(amdq.compile(VADD, "gfx1100"))
    assert "--grid" in one_line_error(run("run", str(co), "--grid", "0", "--block", "64"), "run")


# -- disasm ----------------------------------------------------------------------------------------
def test_disasm_branch_labels(tmp_path):
    co = amdq.compile(VADD, "gfx1100")
    f = tmp_path / "vadd.o"
    f.write_bytes(co)
    r = run("disasm", str(f))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    br = next(ln for ln in lines if "s_cbranch_execz" in ln)
    assert br.split()[-1] == "BB0_0"
    k = lines.index("BB0_0:")
    assert "s_endpgm" in lines[k + 1]                         # the label stands before its target
    raw_lines = run("disasm", "--no-labels", str(f)).stdout.splitlines()
    pc, _, simm = next(ln for ln in raw_lines if "s_cbranch_execz" in ln).split()
    assert int(lines[k + 1].split()[0], 16) == int(pc, 16) + 4 + 4 * int(simm)      # the label is the branch's target
    assert "BB0_0" not in "\n".join(raw_lines)
    # the same code as a raw binary: --arch, the same labels and addresses
    from amdq.tools.disasm import kernels
    addr, code, _ = kernels(co)["vadd"]
    raw = tmp_path / "vadd.bin"
    raw.write_bytes(code)
    r2 = run("disasm", str(raw), "--arch", "gfx1100", "--base", hex(addr))
    assert r2.returncode == 0, r2.stderr
    assert r2.stdout.splitlines() == lines[1:]                # all but the function name


def test_labels_backward_and_outside():
    from amdq.tools.disasm import labelled
    # s_nop 0; s_branch -2 (back to the nop); s_cbranch_scc0 +100 (outside the listing)
    words = [0xBF800000, 0xBFA0FFFE, 0xBFA10064]
    from amdq.tools.disasm import disassemble
    lst = disassemble(struct.pack("<3I", *words), "gfx1100", 0x100)
    out = labelled(lst, 3)
    assert out[0][0] == "BB3_0" and out[1][2] == "s_branch BB3_0"
    assert out[2][0] is None and out[2][2].startswith("s_cbranch_scc0 ") and "BB" not in out[2][2]


def test_disasm_raw_bad_length(tmp_path):
    f = tmp_path / "odd.bin"
    f.write_bytes(b"\x00" * 6)
    assert "not whole instruction dwords" in one_line_error(run("disasm", str(f), "--arch", "gfx1100"), "disasm")


# -- AMDQ_TRACE ------------------------------------------------------------------------------------
SCRIPT = """
import numpy as np, amdq
from importlib import resources
src = resources.files("amdq").joinpath("examples/vadd.ll").read_text()
dev = amdq.open_device("SIM:gfx1100")
k = dev.load(amdq.compile(src, dev.arch))["vadd"]
a, c = dev.upload(np.ones(256, np.float32)), dev.alloc(1024)
k(a, a, c, 2.0, 256, grid=(1, 1, 1), block=(256, 1, 1))
with dev.profile() as p:                     # the program's own profile still works inside the trace
    k(a, a, c, 3.0, 256, grid=(1, 1, 1), block=(256, 1, 1))
assert [r.kernel for r in p.records] == ["vadd"]
dev.close()
dev2 = amdq.open_device("SIM:gfx1201")       # left open: resolved at exit
k2 = dev2.load(amdq.compile(src.replace("@vadd", "@vadd2"), dev2.arch))["vadd2"]
b = dev2.upload(np.ones(64, np.float32))
k2(b, b, b, 1.0, 64, grid=(1, 1, 1), block=(64, 1, 1))
"""


def test_trace_env_var_traces_an_unmodified_script(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    trace = tmp_path / "trace.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AMDQ_TRACE": str(trace)}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    d = json.loads(trace.read_text())
    ev = d["traceEvents"]
    gpu = [e for e in ev if e.get("cat") == "gpu"]
    assert sorted(e["name"] for e in gpu) == ["vadd", "vadd", "vadd2"]
    assert all(e["dur"] >= 0 and e["ph"] == "X" for e in gpu)
    assert {e["pid"] for e in gpu} == {1, 2}                         # one process track per device
    names = {e["args"]["name"] for e in ev if e.get("name") == "process_name"}
    assert names == {"amdq SIMKFD+AMD:gfx1100", "amdq SIMKFD+AMD:gfx1201"}
    env.pop("AMDQ_TRACE")
    trace.unlink()
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr and not trace.exists()


# -- the progress line -----------------------------------------------------------------------------
@pytest.mark.parametrize("terminal", [True, False])
def test_progress_line_for_long_dispatches(monkeypatch, capfd, terminal):
    from amdq.sim import progress
    monkeypatch.setattr(progress, "THRESHOLD_S", 0.0)
    monkeypatch.setattr(progress, "INTERVAL_S", 0.0)
    monkeypatch.setattr(progress, "is_terminal", lambda: terminal)
    from amdq.sim.shader.core import ShaderCore
    monkeypatch.setattr(ShaderCore.__init__, "__defaults__", (1024,))     # batches of 4 workgroups: several updates
    dev = amdq.open_device("SIM:gfx1100")
    try:
        k = dev.load(amdq.compile(VADD, dev.arch))["vadd"]
        n = 16 * 1024
        a, c = dev.upload(np.ones(n, np.float32)), dev.alloc(4 * n)
        k(a, a, c, 2.0, n, grid=(n // 256, 1, 1), block=(256, 1, 1), wait=True)
        assert np.allclose(c.numpy(np.float32), 3.0)
    finally:
        dev.close()
    err = capfd.readouterr().err
    if terminal:
        assert f"{n // 256}/{n // 256} workgroups (100%)" in err and "\ramdq: dispatch of 0x" in err
        assert err.count("workgroups") >= 2                          # updates along the way, then the last one
    else:
        assert "workgroups" not in err
