"""The AM driver's SMU block against the simulated PMFW: the mailbox protocol per SMU family, response codes as
errors naming the message, timeouts naming the message, power limit and clock levels, mode1 reset."""
from __future__ import annotations

import pytest

from amdq.am.smu import SMU
from amdq.errors import AMTimeout, DeviceError, DeviceLost, SMUError
from amdq.hw import smu as S

from am_bench import Bench

ARCHS = {"gfx1100": (13, 0, 0), "gfx1201": (14, 0, 2), "gfx942": (13, 0, 6)}


def bench(arch="gfx1100", start=True, **kw):
    b = Bench(arch, parts=("smu",), **kw)
    if start:
        b.smu.start()
    drv = SMU(b.am)
    drv.timeout_ms = 100
    return b, drv


@pytest.mark.parametrize("arch", ARCHS)
def test_boot_messages_per_family(arch, monkeypatch):
    monkeypatch.delenv("AM_POWER_LIMIT", raising=False)
    b, drv = bench(arch)
    assert drv.table.version == ARCHS[arch] == b.smu.table.version
    drv.init_hw()
    assert drv.fw_version == b.smu.board.fw_version and drv.driver_if == drv.table.driver_if
    names = [m for m, _, _ in b.smu.log]
    assert names[:3] == ["GetSmuVersion", "GetDriverIfVersion", "EnableAllSmuFeatures"]
    assert all(code == S.TABLES[ARCHS[arch]].result["OK"] for _, _, code in b.smu.log)
    # the ids on the wire are the family's: the last message in C2PMSG_66 is the last one sent
    assert b.raw.MP1[S.MSG_REG].read() == drv.table.msg[names[-1]]
    # highest level by default, GFXCLK and UCLK
    for clk in ("GFXCLK", "UCLK"):
        top = (b.smu.board.gfxclk if clk == "GFXCLK" and b.smu.board.gfxclk else b.smu.board.dpm[clk])[-1]
        assert b.smu.clock_range(clk) == (top, top), clk
    if arch == "gfx942":                       # 13.0.6 has no GFXCLK in PPCLK: the GfxClk messages
        assert {"GetMaxGfxDpmFreq", "SetSoftMaxGfxClk", "SetSoftMinGfxClk"} <= set(names)
        assert "GetDriverIfVersion" in drv.table.msg and drv.table.msg["GetDriverIfVersion"] == 4
    else:
        assert "SetSoftMaxByFreq" in names and "SetSoftMaxGfxClk" not in names


def test_mailbox_sequence_is_the_protocol():
    b, drv = bench()
    seen = []
    drv.am.regs.tracer = lambda a: seen.append((a.op, a.reg.name if a.reg else hex(a.addr), a.value))
    assert drv.send("GetSmuVersion") == b.smu.board.fw_version
    ops = [(op, name) for op, name, _ in seen]
    # the session's first message: the response read once (off the bus?), not waited for; clear, argument,
    # message, poll, result
    assert ops[:4] == [("R", S.RESP_REG), ("W", S.RESP_REG), ("W", S.ARG_REG), ("W", S.MSG_REG)]
    seen.clear()
    assert drv.send("GetSmuVersion") == b.smu.board.fw_version
    ops = [(op, name) for op, name, _ in seen]
    # later ones: previous answer first, then clear, argument, message, poll, result
    assert ops[0] == ("R", S.RESP_REG)
    i = ops.index(("W", S.RESP_REG))
    assert ops[i:i + 3] == [("W", S.RESP_REG), ("W", S.ARG_REG), ("W", S.MSG_REG)]
    assert ops[i + 3][1] == S.RESP_REG and ops[-1] == ("R", S.ARG_REG)
    assert seen[i + 2][2] == drv.table.msg["GetSmuVersion"]


@pytest.mark.parametrize("arch", ARCHS)
def test_power_limit_set_and_read_back(arch, monkeypatch):
    b, drv = bench(arch)
    monkeypatch.setenv("AM_POWER_LIMIT", str(b.smu.board.power_max - 10))
    drv.init_hw()
    assert drv.power_limit() == b.smu.board.power_max - 10 == b.smu.fw.power_limit
    with pytest.raises(SMUError, match=r"SetPptLimit .* failed: response 0xff \(Failed\)") as e:
        drv.set_power_limit(b.smu.board.power_max + 1)
    assert e.value.message == "SetPptLimit" and e.value.response == 0xFF
    assert drv.power_limit() == b.smu.board.power_max - 10        # the firmware kept the old limit


def test_power_limit_env_must_be_watts(monkeypatch):
    b, drv = bench()
    monkeypatch.setenv("AM_POWER_LIMIT", "lots")
    with pytest.raises(DeviceError, match="AM_POWER_LIMIT='lots'"):
        drv.init_hw()


@pytest.mark.parametrize("arch", ARCHS)
def test_clock_levels_set_and_read_back(arch):
    b, drv = bench(arch)
    drv.send("EnableAllSmuFeatures")
    levels = drv.dpm_levels("UCLK")
    assert levels == list(b.smu.board.dpm["UCLK"])
    assert drv.set_clock_level("UCLK", 1) == levels[1]
    assert b.smu.clock_range("UCLK") == (levels[1], levels[1])
    gfx = drv.dpm_levels("GFXCLK")
    assert gfx[0] < gfx[-1]
    drv.set_clock_range("GFXCLK", gfx[0], gfx[-1])
    assert b.smu.clock_range("GFXCLK") == (gfx[0], gfx[-1])
    with pytest.raises(DeviceError, match="UCLK has 4 DPM levels"):
        drv.set_clock_level("UCLK", 7)


def test_bad_arguments_get_the_failure_response():
    b, drv = bench()
    drv.send("EnableAllSmuFeatures")
    uclk = drv.table.clk["UCLK"]
    with pytest.raises(SMUError, match="GetDpmFreqByIndex .* response 0xff"):
        drv.send("GetDpmFreqByIndex", uclk << 16 | 9)                    # no level 9
    with pytest.raises(SMUError, match="SetSoftMaxByFreq .* response 0xff"):
        drv.send("SetSoftMaxByFreq", drv.table.clk["DTBCLK"] << 16 | 100)  # a clock without a DPM table here
    with pytest.raises(SMUError, match="SetSoftMinByFreq .* response 0xff"):
        drv.send("SetSoftMinByFreq", uclk << 16 | 5000)                  # above the table
    with pytest.raises(SMUError, match="GetPptLimit .* response 0xff"):
        drv.send("GetPptLimit", 7 << 16)                                 # no power source 7


def test_prerequisite_and_unknown_command():
    b, drv = bench()
    with pytest.raises(SMUError, match=r"SetPptLimit .* response 0xfd \(CmdRejectedPrereq\)"):
        drv.set_power_limit(300)                      # before EnableAllSmuFeatures
    mb = drv.am.regs.MP1
    mb[S.RESP_REG].write(0)
    mb[S.MSG_REG].write(0x77)                         # an id the 13.0.0 table does not have
    assert mb[S.RESP_REG].read() == drv.table.result["UnknownCmd"] == 0xFE
    with pytest.raises(DeviceError, match="has no message Bogus"):
        drv.send("Bogus")


def test_timeout_names_the_message():
    b, drv = bench()
    b.inject("smu_timeout")
    with pytest.raises(AMTimeout, match=r"SMU message GetSmuVersion \(0x2, argument 0x0\): regMP1_SMN_C2PMSG_90"):
        drv.init_hw()
    # the next message waits for the lost answer first, and says so
    with pytest.raises(AMTimeout, match="SMU message GetDriverIfVersion: regMP1_SMN_C2PMSG_90 answer to the previous"):
        drv.send("GetDriverIfVersion")


def test_a_lost_answer_of_a_previous_session_does_not_block_the_next():
    b, drv = bench()
    b.inject("smu_timeout")
    with pytest.raises(AMTimeout, match="SMU message GetSmuVersion"):
        drv.send("GetSmuVersion")
    assert b.raw.MP1[S.RESP_REG].read() == S.RESP_NONE            # the mailbox is left waiting
    b.inject.clear("smu_timeout")
    nxt = SMU(b.am)                                                  # the next session's driver
    nxt.timeout_ms = 100
    assert nxt.send("GetSmuVersion") == b.smu.board.fw_version     # answered: it did not wait for the lost one
    assert nxt.send("GetDriverIfVersion") == nxt.table.driver_if


def test_timeout_of_one_message_only():
    b, drv = bench("gfx1201")
    b.inject("smu_timeout", msg="SetPptLimit")
    drv.check_version()
    drv.send("EnableAllSmuFeatures")
    with pytest.raises(AMTimeout, match="SMU message SetPptLimit"):
        drv.set_power_limit(250)


def test_firmware_not_started_does_not_answer():
    b, drv = bench(start=False)
    with pytest.raises(AMTimeout, match="GetSmuVersion"):
        drv.check_version()


@pytest.mark.parametrize("arch", ARCHS)
def test_mode1_reset_resets_the_device(arch):
    b, drv = bench(arch)
    drv.init_hw()
    assert b.smu.fw.features
    drv.mode1_reset()
    assert b.resets == 1
    if b.smu.resident:                  # MI300: the boot firmware starts the PMFW again, at its defaults
        assert b.smu.fw.running and not b.smu.fw.features
    else:                               # Radeon: silent until the PSP loads it again
        assert not b.smu.fw.running and b.raw.MP1[S.RESP_REG].read() == 0
    assert b.smu.resident == (arch == "gfx942")
    sent = b.smu.log[-1]
    if arch == "gfx942":
        assert sent[:2] == ("GfxDriverReset", 1)
    else:
        assert sent[0] == "Mode1Reset"
    if not b.smu.resident:
        with pytest.raises(AMTimeout, match="GetSmuVersion"):        # no PMFW until it is loaded again
            drv.check_version()
        b.smu.start()
    drv.init_hw()
    assert b.smu.fw.features


def test_resident_firmware_runs_after_reset():
    b, drv = bench("gfx942", start=False, resident=True)
    drv.init_hw()
    drv.mode1_reset()
    assert b.resets == 1
    drv.check_version()


def test_driver_interface_mismatch_is_reported():
    b, drv = bench(start=False)
    b.smu.start(driver_if=0x99)
    drv.check_version()
    assert any(level == 1 and "driver interface 0x99" in m for level, m in drv.am.logs)


def test_off_the_bus():
    b, drv = bench()
    b.raw.MP1[S.RESP_REG].write(0xFFFFFFFF)
    with pytest.raises(DeviceLost, match="off the bus"):
        drv.send("GetSmuVersion")


def test_unsupported_mp1():
    with pytest.raises(Exception, match=r"SMU \(MP1\) 13.0.7: no message table"):
        S.table((13, 0, 7))


def test_state_survives_the_process():
    b, drv = bench()
    drv.init_hw()
    drv.set_power_limit(300)
    state = b.smu.save()
    b2, drv2 = bench(start=False)
    b2.smu.load(state)
    assert drv2.power_limit() == 300
