"""`amdq info` clocks of an AM device: the clock levels the SMU block set and the power limit, asked of the
PMFW through the mailbox, after a full and after a partial boot, in info(), `amdq info` and `--json`."""
from __future__ import annotations

import json

import pytest

import amdq
from amdq.cli import main
from amdq.sim.pci.smu import BOARDS
from sims import am_env

ARCHS = {"gfx1100": (13, 0, 0), "gfx1201": (14, 0, 2), "gfx942": (13, 0, 6)}


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    am_env(monkeypatch, tmp_path, "AM_POWER_LIMIT")


def _levels(arch: str) -> dict[str, list[int]]:
    b = BOARDS[ARCHS[arch]]
    return {"GFXCLK": list(b.gfxclk or b.dpm["GFXCLK"]), "UCLK": list(b.dpm["UCLK"])}


@pytest.mark.parametrize("arch", ARCHS)
def test_info_clocks_full_and_partial(arch, monkeypatch):
    board = BOARDS[ARCHS[arch]]
    watts = board.power_min + 7                                # inside the board's range, not its default
    monkeypatch.setenv("AM_POWER_LIMIT", str(watts))
    d = amdq.open_device(f"SIMPCI+AMD:{arch}")
    smu = d.sim.parts["smu"]                                   # the simulated PMFW: what it holds and was asked
    info = d.info()
    levels = _levels(arch)
    top = {c: lv[-1] for c, lv in levels.items()}
    assert info["boot"] == "full"
    assert info["clocks"] == top and info["clock_levels"] == levels and info["power_limit_w"] == watts
    assert {c: smu.clock_range(c) for c in top} == {c: (v, v) for c, v in top.items()}   # what the PMFW holds
    asked = [m for m, _, _ in smu.log]
    assert asked[-1] == "GetPptLimit"                          # read back through the mailbox, not remembered
    d.close()
    monkeypatch.delenv("AM_POWER_LIMIT")
    d = amdq.open_device(f"SIMPCI+AMD:{arch}")
    smu = d.sim.parts["smu"]
    n = len(smu.log)
    info = d.info()
    assert info["boot"] == "partial"
    assert info["clocks"] == top and info["clock_levels"] == levels
    assert info["power_limit_w"] == watts                      # the PMFW kept the full boot's limit
    asked = [m for m, _, _ in smu.log[n:]]
    assert "GetPptLimit" in asked and ("GetDpmFreqByIndex" in asked or "GetMaxGfxDpmFreq" in asked)
    d.close()


def test_power_limit_follows_the_firmware_not_the_request(monkeypatch):
    """A limit the PMFW changes behind the driver's back shows: info() asks the firmware each time."""
    d = amdq.open_device("SIMPCI+AMD:gfx1100")
    assert d.info()["power_limit_w"] == BOARDS[(13, 0, 0)].power_default
    d.sim.parts["smu"].fw.power_limit = 222
    assert d.info()["power_limit_w"] == 222
    d.close()


@pytest.mark.parametrize("arch", ["gfx1201", "gfx942"])
def test_cli_info_clocks(arch, capsys):
    assert main(["info", "--device", f"SIMPCI+AMD:{arch}", "--json"]) == 0
    (e,) = json.loads(capsys.readouterr().out)
    levels = _levels(arch)
    assert e["clocks"] == {c: lv[-1] for c, lv in levels.items()} and e["clock_levels"] == levels
    assert e["power_limit_w"] == BOARDS[ARCHS[arch]].power_default
    assert main(["info", "--device", f"SIMPCI+AMD:{arch}"]) == 0
    out = capsys.readouterr().out
    assert f"clocks          GFXCLK {levels['GFXCLK'][-1]} MHz, UCLK {levels['UCLK'][-1]} MHz" in out
    assert f"power limit     {BOARDS[ARCHS[arch]].power_default} W" in out
    assert "boot            partial: initialised by this driver" in out


def test_clocks_of_a_closed_device_are_not_known():
    from amdq.errors import AMBootError
    d = amdq.open_device("SIMPCI+AMD:gfx1100")
    drv = d.iface.driver
    d.close()
    with pytest.raises(AMBootError, match="has not booted"):
        drv.clock_report()
    info = d.iface.info()                                           # the rest is known still; clocks are not
    assert info["boot"] == "full" and info["clocks"] is None and info["power_limit_w"] is None


def test_asking_for_clocks_is_not_counted_in_the_boot():
    d = amdq.open_device("SIMPCI+AMD:gfx1201")
    r = d.iface.report
    before = {n: (b.reads, b.writes) for n, b in r.blocks.items()}
    d.info()
    assert {n: (b.reads, b.writes) for n, b in r.blocks.items()} == before
    assert d.iface.driver.stats["info"].reads > 0                   # the mailbox was used, and counted apart
    d.close()
