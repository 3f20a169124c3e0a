"""The amdq command: inspect's JSON shape, clean errors, and the demo."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from oracle import compile_cl

AMDQ = [sys.executable, "-m", "amdq.cli"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*AMDQ, *args], capture_output=True, text=True, timeout=120)


def test_inspect_json_shape():
    r = run("inspect", str(compile_cl("vadd.cl", "gfx1100")), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["arch"] == "gfx1100"
    k = d["kernels"][0]
    for key in ("name", "kernarg_size", "group_segment_size", "private_segment_size", "wavefront_size", "wave32",
                "rsrc1", "rsrc2", "rsrc3", "entry_offset", "sgpr_count", "vgpr_count", "args"):
        assert key in k, key
    assert k["name"] == "vadd" and k["wave32"] is True and k["wavefront_size"] == 32
    assert {"offset", "size", "value_kind"} <= set(k["args"][0])


def test_inspect_text():
    r = run("inspect", str(compile_cl("lds_reduce.cl", "gfx942")))
    assert r.returncode == 0, r.stderr
    assert "gfx942" in r.stdout and "wave64" in r.stdout and "global_buffer" in r.stdout


@pytest.mark.parametrize("content", [b"", b"garbage", b"\x7fELF" + bytes(60), None])
def test_malformed_file_one_line_error(tmp_path, content):
    f = tmp_path / "bad.o"
    if content is None:
        data = bytearray(compile_cl("vadd.cl", "gfx1100").read_bytes())
        data[0x12] = 62                    # e_machine: x86-64
        content = bytes(data)
    f.write_bytes(content)
    r = run("inspect", str(f))
    assert r.returncode != 0
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("amdq inspect: CodeObjectError:")


def test_missing_file_one_line_error(tmp_path):
    r = run("inspect", str(tmp_path / "nope.hsaco"))
    assert r.returncode != 0 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1151", "gfx1201", "gfx942", "gfx950"])
def test_demo_runs(arch):
    r = run("demo", "--device", f"SIM:{arch}")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[-1] == "demo: all outputs valid"
    for stage in ("compile", "load", "upload", "encode", "submit", "gpu", "wait", "download", "validate"):
        assert any(line.startswith(stage + " ") for line in lines), stage


def test_disasm_lists_every_function():
    from pathlib import Path
    src = str(Path(__file__).parent / "codeobj" / "globals.cl")
    r = run("disasm", str(compile_cl(src, "gfx1100")))
    assert r.returncode == 0, r.stderr
    assert "use_globals:" in r.stdout and "twice:" in r.stdout and "s_endpgm" in r.stdout and "s_setpc_b64" in r.stdout
    r = run("disasm", str(compile_cl(src, "gfx1100")), "--kernel", "missing")
    assert r.returncode != 0 and "no function 'missing'" in r.stderr
