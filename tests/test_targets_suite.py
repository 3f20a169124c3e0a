"""The OpenCL kernel suite (every test of tests/test_shader_kernels.py) on every simulated target beyond the
suite's own gfx1100, on the shader core alone (tests.harness), through the public API on a SIMKFD device
(tests.device_harness) and, for the simulated PCI function's targets, on a SIMPCI device (the AM driver); outputs checked against numpy by the suite's own assertions.

One parametrization: TARGETS x WHERE x each suite case. A suite case is a suite function with one choice of
its own parameters (read from its pytest.mark.parametrize marks); wave-size variants are collected for the
targets that have both wave sizes (RDNA), and CDNA runs its only wave size (64: the suite's -mwavefrontsize64
flag is dropped there, clang's default for gfx9). A target joins by adding one TARGETS entry (with `xfail`
naming what it lacks while it cannot run the suite).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

import device_harness
import harness
import test_shader_kernels as suite


@dataclass(frozen=True)
class Target:
    arch: str
    waves: tuple[int, ...]          # wave sizes the target runs (the suite's `wave` parameter)
    xfail: str = ""                 # a reason, while the target cannot run the suite yet


TARGETS = [
    Target("gfx1151", (32, 64)),
    Target("gfx1200", (32, 64)),
    Target("gfx1201", (32, 64)),
    Target("gfx942", (64,)),
    Target("gfx950", (64,)),        # clang-19 front end, LLVM 22 code generation (tests/clang.py NEWER_THAN_CLANG19)
]
WHERE = ("core", "device", "pci")
PCI_TARGETS = ("gfx1201", "gfx942")          # the simulated PCI function's targets (gfx1100: test_device_suite)


def _cases() -> list[tuple[str, dict]]:
    """(suite function name, keyword arguments) for every parametrized variant of every suite test."""
    out = []
    for name in sorted(n for n in dir(suite) if n.startswith("test_")):
        marks = [m for m in getattr(getattr(suite, name), "pytestmark", []) if m.name == "parametrize"]
        axes = []
        for m in marks:
            argnames, values = m.args[0], m.args[1]
            assert "," not in argnames, (name, argnames)     # the suite parametrizes one name per mark
            axes.append([(argnames, v) for v in values])
        for combo in itertools.product(*axes):
            out.append((name, dict(combo)))
    return out


def _params():
    for t, where, (name, kw) in itertools.product(TARGETS, WHERE, _cases()):
        if "wave" in kw and kw["wave"] not in t.waves or where == "pci" and t.arch not in PCI_TARGETS:
            continue
        cid = "-".join([name.removeprefix("test_")] + [f"{'wave' if k == 'wave' else k}{v}" for k, v in kw.items()])
        marks = [pytest.mark.xfail(reason=t.xfail, strict=False)] if t.xfail else []
        yield pytest.param(t, where, name, kw, id=f"{t.arch}-{where}-{cid}", marks=marks)


def _runner(t: Target, where: str):
    run = harness.run_cl if where == "core" else device_harness.run_cl
    pci = {"interface": "SIMPCI"} if where == "pci" else {}

    def run_cl(*a, **k):
        flags = tuple(k.pop("flags", ()))
        if t.waves == (64,):                   # gfx9: wave64 only, and clang's default there
            flags = tuple(f for f in flags if "wavefrontsize" not in f)
        return run(*a, **{**k, "flags": flags, "arch": t.arch, **pci})
    return run_cl


@pytest.mark.parametrize("target, where, name, kw", list(_params()))
def test_suite(target: Target, where: str, name: str, kw: dict, monkeypatch) -> None:
    """One suite case compiled by clang-19 for `target` and run on the core or through the device."""
    monkeypatch.setattr(suite, "run_cl", _runner(target, where))
    getattr(suite, name)(**kw)
