"""The AM driver's boot on SIMPCI end to end, both ways -- with the real firmware files when present and with
the generated stand-ins -- and when it fails: a firmware the PSP refuses, an SMU that does not answer, a
missing firmware file, a malformed one. Each failure raises the amdq.errors exception that names what
failed, and the next boot (the fault gone) is a full boot that succeeds."""
from __future__ import annotations

import hashlib

import pytest

import amdq
from amdq.am import firmware as F
from amdq.am import smu as smu_mod
from amdq.errors import AMTimeout, FirmwareError, FirmwareMissing, FirmwareRefused
from amdq.hw import am
from amdq.hw.targets import get_target
from amdq.iface import pci
from amdq.sim.pci.device import SimPCIDevice
from sims import am_env

ARCHS = ("gfx1100", "gfx1201", "gfx942")
WAYS = ("real", "standin")
UNCLEAN = "the previous session did not end cleanly (SCRATCH_REG6=0x0)"


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    am_env(monkeypatch, tmp_path, "AM_POWER_LIMIT", "AMDQ_FIRMWARE_PATH")
    monkeypatch.setenv("AMDQ_WAIT_TIMEOUT_MS", "200")          # an SMU that never answers fails fast


def _required(arch: str) -> list[str]:
    return [s.file for s in F.target_firmware(arch) if s.required]


def policy(way: str, arch: str) -> bool:
    """The driver's firmware policy for `way`: real files only (skipped when they are not here), or stand-ins."""
    if way == "standin":
        return True
    missing = [f for f in _required(arch) if F.find_firmware(f) is None]
    if missing:
        pytest.skip(f"the real firmware of {arch} ({', '.join(missing)}) is not in {', '.join(F.search_dirs())}: "
                    f"run scripts/fetch_firmware.sh (Debian firmware-amd-graphics) to boot with it")
    return False


def boot(arch: str, standin: bool | None, inject: list | None = None):
    """Power the simulated function on (with its saved state), arm `inject`, boot; (device, interface). On a
    failure the function is powered off (its state saved, as a GPU keeps it) and the error raised."""
    dev = SimPCIDevice(arch, mode="sync")
    for kind, params in inject or ():
        dev.inject(kind, **params)
    dev._inject_boot()                      # the power-on injections (amdgpu_initialised ...) armed here
    try:
        return dev, pci.PCI(dev, arch, standin=standin)
    except BaseException:
        dev.close()
        raise


def boot_closed(arch: str, standin: bool | None, inject: list | None = None):
    dev, iface = boot(arch, standin, inject)
    iface.close()
    return dev, iface


def _psp_prefix(arch: str) -> str:
    v = get_target(arch).ip["MP0"]
    return f"psp_{v[0]}_{v[1]}_{v[2]}"


def _gc_prefix(arch: str) -> str:
    v = get_target(arch).ip["GC"]
    return f"gc_{v[0]}_{v[1]}_{v[2]}"


# --- both ways: full and partial ---------------------------------------------------------------------------
@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("arch", ARCHS)
def test_full_then_partial_boot(arch, way):
    standin = policy(way, arch)
    dev, a = boot_closed(arch, standin)
    assert (a.report.kind, a.report.reason, a.report.mode1_reset) == ("full", "uninitialised", False)
    fws = {f["file"]: f for f in a.driver.firmware_list()}
    assert set(_required(arch)) <= set(fws)
    assert all(f["standin"] == (way == "standin") for f in fws.values()), fws
    for name, f in fws.items():
        if way == "real":                                   # the bytes of the file on disk, not a generated image
            with open(F.find_firmware(name), "rb") as fh:
                raw = F._decompress(fh.name, fh.read())
            assert f["sha256"] == hashlib.sha256(raw).hexdigest(), name
            assert f["version"] != F.STANDIN_UCODE_VERSION, name
        else:
            assert f["version"] == F.STANDIN_UCODE_VERSION, name
    assert dev.gfx.loaded                                   # the PSP handed the GFX firmware to its engines
    dev, b = boot(arch, standin)
    assert (b.report.kind, b.report.reason) == ("partial", "initialised by this driver")
    assert b.report.reads + b.report.writes < a.report.reads + a.report.writes
    b.close()


# --- a firmware the PSP refuses -----------------------------------------------------------------------------
@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("arch", ARCHS)
def test_psp_refusal_names_the_file_then_a_full_boot(arch, way):
    standin = policy(way, arch)
    # the first load the PSP sees is the bootloader's: the key database of the SOS bundle
    with pytest.raises(FirmwareRefused) as e:
        boot(arch, standin, [("psp_refuse", {})])
    assert f"firmware {_psp_prefix(arch)}_sos.bin" in str(e.value) and "TEE_ERROR_SECURITY" in str(e.value)
    assert "LOAD_KEY_DATABASE" in str(e.value)
    dev, a = boot_closed(arch, standin)
    assert (a.report.kind, a.report.reason, a.report.mode1_reset) == ("full", UNCLEAN, False)   # no sOS to reset
    # an IP firmware, with the sOS running: the RLC's
    boot_closed(arch, standin, [("amdgpu_initialised", {})])       # a fresh full boot path, after a reset
    with pytest.raises(FirmwareRefused) as e:                       # a GPU amdgpu left: mode1 reset, full boot
        boot(arch, standin, [("amdgpu_initialised", {}),
                             ("psp_refuse", {"fw_type": am.GFX_FW_TYPE_RLC_G, "status": 0xFFFF0007})])
    assert f"firmware {_gc_prefix(arch)}_rlc.bin part rlc_g" in str(e.value)
    assert e.value.status == 0xFFFF0007
    dev, b = boot_closed(arch, standin)
    assert (b.report.kind, b.report.reason, b.report.mode1_reset) == ("full", UNCLEAN, True)
    assert dev.resets == 1
    _, c = boot_closed(arch, standin)
    assert c.report.kind == "partial"


# --- the SMU's firmware refused: no PMFW to take the mode1 reset ---------------------------------------------
@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])       # gfx942's PMFW is resident (not loaded by the PSP)
def test_refused_smu_firmware_then_a_reset_through_the_psp(arch, way, monkeypatch):
    standin = policy(way, arch)
    monkeypatch.setattr(smu_mod, "PROBE_MS", 30.0)
    with pytest.raises(FirmwareRefused) as e:
        boot(arch, standin, [("psp_refuse", {"fw_type": am.GFX_FW_TYPE_SMU})])
    assert "smu_" in str(e.value) and "SMU" in str(e.value)
    dev, a = boot_closed(arch, standin)                 # the sOS runs, the PMFW does not: the PSP resets the chip
    assert (a.report.kind, a.report.reason, a.report.mode1_reset, a.report.reset_via) == \
        ("full", UNCLEAN, True, "psp")
    assert dev.resets == 1 and dev.parts["smu"].fw.running
    _, b = boot_closed(arch, standin)
    assert b.report.kind == "partial"


# --- a partial boot that does not resume -------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_a_failed_partial_boot_falls_back_to_a_full_one(arch):
    boot_closed(arch, True)
    # the GFX block was reset behind this driver: the clean session's state says partial, the MEC cannot run
    dev, a = boot_closed(arch, True, [("gfx_reset", {})])
    assert (a.report.kind, a.report.mode1_reset) == ("full", True)
    assert a.report.reason.startswith("the partial boot failed (") and "MEC" in a.report.reason, a.report.reason
    assert dev.resets == 1
    _, b = boot_closed(arch, True)
    assert b.report.kind == "partial"


# --- an SMU that does not answer ----------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_smu_timeout_names_the_message_then_a_full_boot(arch, monkeypatch):
    monkeypatch.setenv("AMDQ_SIM_INJECT", "smu_timeout")         # through the environment, as a program sees it
    with pytest.raises(AMTimeout, match=r"SMU message GetSmuVersion \(0x2, argument 0x0\)") as e:
        amdq.open_device(f"SIMPCI+AMD:{arch}")
    assert "GetSmuVersion" in e.value.info["what"]
    monkeypatch.delenv("AMDQ_SIM_INJECT")
    d = amdq.open_device(f"SIMPCI+AMD:{arch}")                   # the hung PMFW's lost answer does not block it
    info = d.info()
    assert (info["boot"], info["boot_reason"], info["mode1_reset"]) == ("full", f"full: {UNCLEAN}", True)
    d.close()
    # one message only, later in a full boot (of a GPU amdgpu left: after the mode1 reset, which is answered)
    with pytest.raises(AMTimeout, match="SMU message EnableAllSmuFeatures"):
        boot(arch, True, [("amdgpu_initialised", {}), ("smu_timeout", {"msg": "EnableAllSmuFeatures"})])
    _, a = boot_closed(arch, True)
    assert (a.report.kind, a.report.mode1_reset) == ("full", True)
    # the mode1 reset itself (AM_RESET=1 on a running GPU): the PMFW takes GetSmuVersion, not the reset
    monkeypatch.setenv("AM_RESET", "1")
    reset_msg = "GfxDriverReset" if arch == "gfx942" else "Mode1Reset"
    with pytest.raises(AMTimeout, match=f"SMU message {reset_msg}"):
        boot(arch, True, [("smu_timeout", {"msg": reset_msg})])
    dev, b = boot_closed(arch, True)
    assert (b.report.kind, b.report.reason, b.report.mode1_reset) == ("full", "AM_RESET=1", True)
    assert b.report.reset_via == "smu"
    # a PMFW that takes no message at all: the mode1 reset goes through the PSP, and the hung PMFW (still
    # hung after the reset here, as the injection stays armed) is named by the boot's own first message
    monkeypatch.setattr(smu_mod, "PROBE_MS", 30.0)
    dev = SimPCIDevice(arch, mode="sync")
    dev.inject("smu_timeout")
    try:
        with pytest.raises(AMTimeout, match="SMU message GetSmuVersion"):
            pci.PCI(dev, arch, standin=True)
        assert dev.resets == 1 and reset_msg not in [m for m, _, _ in dev.parts["smu"].log]   # by the PSP
    finally:
        dev.close()
    dev, b = boot_closed(arch, True)                    # that PMFW answers again: the SMU takes the reset
    assert (b.report.kind, b.report.mode1_reset, b.report.reset_via) == ("full", True, "smu")
    monkeypatch.delenv("AM_RESET")
    _, c = boot_closed(arch, True)
    assert c.report.kind == "partial"


# --- a missing firmware file --------------------------------------------------------------------------------
@pytest.fixture
def no_firmware(monkeypatch, tmp_path):
    """Firmware searched only in an empty AMDQ_FIRMWARE_PATH (and an empty cache): not the machine's."""
    empty = tmp_path / "fw-empty"
    empty.mkdir()
    monkeypatch.setenv("AMDQ_FIRMWARE_PATH", str(empty))
    monkeypatch.setenv("AMDQ_FIRMWARE_CACHE", str(tmp_path / "cache-empty"))
    monkeypatch.setattr(F, "SYSTEM_DIRS", ())
    monkeypatch.setattr(F, "_announced", set())
    return str(empty)


@pytest.mark.parametrize("arch", ARCHS)
def test_missing_firmware_names_path_and_package_then_a_full_boot(arch, no_firmware, monkeypatch, capfd):
    with pytest.raises(FirmwareMissing) as e:                      # hardware's policy: real files only
        boot(arch, False)
    msg = str(e.value)
    first = _required(arch)[0]
    assert f"firmware {first} not found in {no_firmware}" in msg
    assert "firmware-amd-graphics" in msg and "scripts/fetch_firmware.sh" in msg and "AMDQ_FIRMWARE_PATH" in msg
    # the simulated device's policy: stand-ins for the missing files, said once
    d = amdq.open_device(f"SIMPCI+AMD:{arch}")
    info = d.info()
    assert (info["boot"], info["boot_reason"]) == ("full", "full: uninitialised")   # nothing touched the GPU
    assert all(f["standin"] for f in info["firmware"])
    d.close()
    err = capfd.readouterr().err
    assert f"firmware file(s) for {arch} not found in {no_firmware}" in err and "generated stand-in" in err
    d = amdq.open_device(f"SIMPCI+AMD:{arch}")
    assert d.info()["boot"] == "partial"
    d.close()
    assert "not found" not in capfd.readouterr().err                # said once per target


# --- a malformed firmware file ------------------------------------------------------------------------------
def _corrupt(src: bytes, how: str) -> bytes:
    raw = bytearray(src)
    if how == "payload":                      # one byte of the ucode flipped: the common header's crc32 no longer
        h = am.common_firmware_header.unpack(bytes(raw))         # matches
        raw[h["ucode_array_offset_bytes"] + 17] ^= 0x40
        return bytes(raw)
    if how == "truncated":                    # the file ends early: size_bytes says more
        return bytes(raw[:len(raw) - 4096])
    raise ValueError(how)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("arch", ARCHS)
def test_malformed_firmware_names_file_and_field_then_a_full_boot(arch, way, monkeypatch, tmp_path):
    standin = policy(way, arch)
    bad = tmp_path / "fw-bad"
    bad.mkdir()
    monkeypatch.setenv("AMDQ_FIRMWARE_PATH", str(bad))
    cases = ((f"{_gc_prefix(arch)}_mec.bin", "payload", "crc32"), (f"{_psp_prefix(arch)}_sos.bin", "truncated",
                                                                    "size_bytes"))
    for file, how, field in cases:
        if way == "real":
            with open(F.find_firmware(file, [d for d in F.search_dirs() if d != str(bad)]), "rb") as fh:
                src = F._decompress(fh.name, fh.read())
        else:
            src = F.standin_image(file)
        path = bad / file
        path.write_bytes(_corrupt(src, how))
        with pytest.raises(FirmwareError) as e:
            # the real way: real files only; the stand-in way: the simulated device's policy, which takes a
            # file that is present (the corrupted one, first in AMDQ_FIRMWARE_PATH) over a stand-in
            boot(arch, False if way == "real" else None)
        assert not isinstance(e.value, FirmwareMissing)
        assert str(e.value).startswith(f"firmware {file}: {field} "), str(e.value)
        path.unlink()
    monkeypatch.delenv("AMDQ_FIRMWARE_PATH")
    _, a = boot_closed(arch, standin)
    assert (a.report.kind, a.report.reason) == ("full", "uninitialised")    # the GPU was not touched
    _, b = boot_closed(arch, standin)
    assert b.report.kind == "partial"


def test_the_real_way_skips_naming_the_script(monkeypatch, tmp_path):
    monkeypatch.setattr(F, "SYSTEM_DIRS", ())
    monkeypatch.setenv("AMDQ_FIRMWARE_CACHE", str(tmp_path))
    with pytest.raises(pytest.skip.Exception, match="scripts/fetch_firmware.sh"):
        policy("real", "gfx1100")
    assert policy("standin", "gfx1100") is True


# --- boot memory after a mode1 reset ------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("inject", [[("amdgpu_initialised", {})], [("gfx_reset", {})]])
def test_boot_memory_directory_matches_what_the_blocks_use_after_a_reset(arch, inject):
    """A boot that resets the GPU first reserves its boot memory after the reset (which clears the region): the
    directory the next partial boot reads names every region where the blocks programmed it, none overlapping."""
    from amdq.am.ip import Region
    if inject[0][0] == "gfx_reset":
        boot_closed(arch, True)                                       # a clean session, so the next is partial
    dev, a = boot_closed(arch, True, inject)
    assert a.report.mode1_reset
    entries = a.driver.am.boot.entries
    spans = sorted(entries.values())
    assert all(o1 + s1 <= o2 for (o1, s1), (o2, _) in zip(spans, spans[1:])), spans
    for name, blk in a.driver.blocks.items():
        for r in vars(blk).values():
            if isinstance(r, Region):
                assert entries.get(r.name, (None,))[0] == r.offset, (name, r)
    ih = a.driver.blocks["ih"]
    _, b = boot(arch, True)                                           # the next process: partial, same places
    try:
        assert b.report.kind == "partial"
        lo, hi = (b.driver.regs.OSSSYS[f"regIH_RB_WPTR_ADDR_{x}"].read() for x in ("LO", "HI"))
        assert (hi & 0xFFFF) << 32 | lo & ~3 == b.driver.blocks["ih"].wb.mc == ih.wb.mc
    finally:
        b.close()
