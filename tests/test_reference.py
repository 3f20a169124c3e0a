"""The README's examples run as written, and docs/reference.md is what scripts/gen_reference.py writes (every
public name, error, CLI command and environment variable, from the code)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def run(code: str, tmp_path) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AMDQ_CACHE": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_readme_example_runs_as_written(tmp_path):
    out = run(BLOCKS[0], tmp_path)
    assert out.strip().splitlines()[-1] == "[2. 2. 2. 2.]"


def test_readme_opencl_example_runs_as_written(tmp_path):
    if not any(shutil.which(f"clang-{v}") for v in range(19, 41)) and not shutil.which("clang"):
        pytest.skip("no clang 19 or newer on PATH (the OpenCL example needs one)")
    out = run(BLOCKS[1], tmp_path)
    assert out.strip().splitlines()[-1] == "[0. 3. 6. 9.]"


def test_reference_is_current():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_reference.py"), "--check"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, f"docs/reference.md is stale: run scripts/gen_reference.py ({r.stderr.strip()})"


def test_reference_names_every_public_name():
    import amdq
    text = (ROOT / "docs" / "reference.md").read_text()
    for name in amdq.__all__:
        assert f"amdq.{name}" in text
    for cls in (amdq.Device, amdq.Array, amdq.Launch, amdq.Buffer):
        for m in (n for n in dir(cls) if not n.startswith("_")):
            assert f"`.{m}" in text, f"{cls.__name__}.{m}"
