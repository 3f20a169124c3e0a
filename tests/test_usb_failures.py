"""Failure on the USB interface must be clean (issue 13): an unplugged bridge at 20 points of a program's life (boot,
load, upload, launch, wait, download, mid-copy chunks) gives DeviceLost within the call's timeout, naming what was in
flight, never a hang or a partial copy reported as done; later calls raise DeviceLost at once; the re-plug (a new
open_device) boots the GPU fully and runs a kernel bit-exactly. Stalled endpoints and transfer errors are clear
DeviceErrors after which the device works (the halt cleared where the protocol allows). AMDQ_SIM_INJECT takes every
simulator fault kind in an unmodified program. `amdq info` shows the bridge; profiles show the interface's transfers.

Each unplug runs tests/usb_unplug_worker.py in a subprocess with a hard timeout: a hang fails the test."""
from __future__ import annotations

import importlib
import json
import os
import pathlib
import pkgutil
import re
import subprocess
import sys

import numpy as np
import pytest

import amdq
from amdq.errors import DeviceError, DeviceLost
from amdq.hw import usb_asm24 as H

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent
WORKER = HERE / "usb_unplug_worker.py"
VADD = (pathlib.Path(amdq.__file__).parent / "examples" / "vadd.ll").read_text()
CALL_TIMEOUT_MS = 2000                 # a DeviceLost must come within this of the unplug
WAIT_TIMEOUT_MS = 15000                # every wait of the worker (the GPU's own work: a loaded CI machine's
#                                        simulator may be slow, and over USB no retired-wave count shows progress)
HARD_TIMEOUT_S = 90                    # the subprocess: past this it hung


@pytest.fixture(scope="module")
def code_object(tmp_path_factory) -> pathlib.Path:
    p = tmp_path_factory.mktemp("usb-failures") / "vadd.o"
    p.write_bytes(amdq.compile(VADD, arch="gfx1100"))
    return p


def _env(**more: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("AMDQ_SIM_INJECT", "AMDQ_TRACE", "AMD_DISABLE_SDMA",
                                                             "AMDQ_SIM_USB_TIMING", "DEV")}
    env.update(PYTHONPATH=str(ROOT), AMDQ_WAIT_TIMEOUT_MS=str(WAIT_TIMEOUT_MS), **more)
    return env


def run_worker(code: pathlib.Path, *args: str, inject: str | None = None) -> dict:
    """The worker's RESULT, or a failure saying it hung or crashed."""
    env = _env(**({"AMDQ_SIM_INJECT": inject} if inject else {}))
    try:
        r = subprocess.run([sys.executable, str(WORKER), str(code), "--timeout-ms", str(WAIT_TIMEOUT_MS), *args],
                           env=env, capture_output=True, text=True, timeout=HARD_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the program hung ({HARD_TIMEOUT_S} s): {args} {inject}\n{(e.stderr or b'')[-3000:]!r}")
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, f"the worker failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT "):])


# (where the unplug is armed, the step it must hit, what the DeviceLost must say the interface was doing).
# Boot points arm from the environment before the process opens the device (counting transfers or bytes from the
# first request); the rest from code just before the step (counting from there).
ENV = "env"
POINTS = [
    (ENV, "after_transfers=0", "boot", "reading the product string"),            # the very first request
    (ENV, "after_transfers=12", "boot", "bringing up the PCIe side"),            # the switch ports
    (ENV, "after_transfers=60", "boot", "bringing up the PCIe side|booting the GPU"),  # the GPU's BARs
    (ENV, "after_transfers=300", "boot", "booting the GPU"),                      # IP discovery, register setup
    (ENV, "after_bytes=3000000", "boot", "booting the GPU"),                     # firmware streamed to the PSP
    (ENV, "after_bytes=9000000", "boot", "booting the GPU|creating a|allocating|reading VRAM"),
    (ENV, "after_bytes=14900000", "boot", "creating a|allocating|reading VRAM|booting the GPU"),  # the queues
    ("load", "after_transfers=2", "load", "allocating"),                          # the code's page-table update
    ("upload", "after_transfers=1", "upload", "allocating 1048576 bytes"),        # the buffer's page tables
    ("upload", "after_bytes=100000", "upload", "copying 1048576 bytes in"),       # chunk 0 on the wire
    ("upload", "after_bytes=400000", "upload", "copying 1048576 bytes in"),       # chunk 1, the other window
    ("upload", "after_bytes=900000", "upload", "copying 1048576 bytes in"),       # chunk 3, window reused
    ("upload2", "after_bytes=1040000", "upload2", "copying 1048576 bytes in"),    # the drain fence at the end
    ("launch", "after_transfers=0", "launch", "submitting work"),                # the shadows pushed
    ("launch", "after_transfers=2", "launch", "submitting work"),                # the doorbell itself
    ("wait", "after_transfers=0", "wait", "waiting for the GPU"),
    ("wait", "after_transfers=6", "wait", "waiting for the GPU"),                # GPU-written memory read back
    ("download", "after_transfers=0", "download", "copying 1048576 bytes out"),  # the F2 arm
    ("download", "after_bytes=200000", "download", "copying 1048576 bytes out"),  # chunk 0 streaming in
    ("download", "after_bytes=600000", "download", "copying 1048576 bytes out"),  # chunk 1
]


def test_twenty_unplug_points():
    assert len(POINTS) == 20 and len({(a, p) for a, p, _, _ in POINTS}) == 20


@pytest.mark.parametrize("at,param,step,doing", POINTS, ids=[f"{a}-{p}" for a, p, _, _ in POINTS])
def test_unplug_is_clean(code_object, at, param, step, doing):
    if at == ENV:
        res = run_worker(code_object, inject=f"usb_unplug:{param}")            # an unmodified program, rehearsed
    else:
        res = run_worker(code_object, "--at", at, param)
    assert "other" not in res, res["other"]                                      # nothing but DeviceLost
    lost = res["lost"]
    assert lost is not None, f"the unplug at {at} {param} was never noticed: {res}"
    assert lost["step"] == step, f"the unplug landed in {lost['step']}, not {step}: {lost['msg']}"
    noticed = lost["noticed_s"]
    assert noticed is not None and noticed < 0.5, f"DeviceLost {noticed} s after the unplug"
    if step != "boot":
        assert lost["s"] < CALL_TIMEOUT_MS / 1000, f"DeviceLost after {lost['s']:.2f} s"
    assert "is gone (unplugged?) during " in lost["msg"] and lost["in_flight"]  # the request in flight
    assert re.search(doing, lost["msg"]), f"{doing!r} not in {lost['msg']!r}"   # and what the interface did
    if step == "wait":
        assert "lost waiting for kernel vadd (timeline value" in lost["msg"]
    if step == "launch":
        assert "launching kernel vadd" in lost["msg"]
    assert res["exact"] is None                                                 # no download reported as done
    reboot = res["reboot"]
    assert reboot["kind"] == "full"                                             # the re-plug boots the GPU
    if step == "boot":                                                          # no device to call: the open raised
        assert res["later"] == []
        assert reboot["reason"].startswith(("uninitialised", "the previous session did not end cleanly")), reboot
    else:
        assert len(res["later"]) >= 3, "no later call was tried"
        for name, outcome, secs in res["later"]:
            assert outcome == "DeviceLost", f"{name} after the unplug: {outcome}"
            assert secs < 0.5, f"{name} took {secs:.3f} s to say DeviceLost"   # at once: no transfer, no timeout
            #                                                                   (the shortest is 1 s); a loaded machine's margin
        assert res["close_s"] < 1.0
        assert "did not end cleanly" in reboot["reason"] and reboot["mode1_reset"], reboot
    assert res["replug_exact"] is True                                          # and runs the kernel bit-exactly


def test_without_an_unplug_the_worker_succeeds(code_object):
    res = run_worker(code_object)                                                # the same program, nothing armed
    assert res["lost"] is None and res["exact"] is True
    assert res["steps"] == ["boot", "load", "upload", "upload2", "alloc", "launch", "wait", "download"]


# -- AMDQ_SIM_INJECT takes every simulator kind -----------------------------------------------------------------------
def _module_kinds() -> dict[str, str]:
    kinds: dict[str, str] = {}
    import amdq.sim as sim
    for m in pkgutil.walk_packages(sim.__path__, "amdq.sim."):
        mod = importlib.import_module(m.name)
        kinds.update(getattr(mod, "INJECT_KINDS", {}) or {})
    return kinds


def test_every_block_kind_is_known_before_its_module_is_imported():
    fresh = subprocess.run([sys.executable, "-c", "import json, amdq.sim.inject as I; print(json.dumps(I.KINDS))"],
                           env=_env(), capture_output=True, text=True, timeout=60)
    known = json.loads(fresh.stdout)
    mods = _module_kinds()
    assert mods and set(mods) <= set(known), f"kinds only a module import registers: {set(mods) - set(known)}"
    assert {"usb_unplug", "usb_stall", "usb_error", "pcie_link_fail", "psp_refuse", "reset_fails"} <= set(known)


@pytest.mark.parametrize("spec", ["SIM:gfx1100", "SIMUSB+AMD:gfx1100"])
def test_the_environment_takes_usb_and_other_kinds_in_an_unmodified_program(spec):
    script = ("import amdq, numpy as np\n"
              f"d = amdq.open_device({spec!r})\n"
              "b = d.upload(np.arange(1000, dtype=np.uint32))\n"
              "assert np.array_equal(b.numpy(np.uint32), np.arange(1000, dtype=np.uint32))\n"
              "print('armed', sorted(k for k in d.sim.inject.armed) if hasattr(d.sim, 'inject') and "
              "hasattr(d.sim.inject, 'armed') else sorted(d.sim.injector.armed))\n"
              "d.close()\n")
    inject = "usb_error:endpoint=0x81:after_transfers=100000,smu_timeout:msg=NoSuchMessage,psp_refuse:fw_type=999"
    r = subprocess.run([sys.executable, "-c", script], env=_env(AMDQ_SIM_INJECT=inject), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "usb_error" in r.stdout and "psp_refuse" in r.stdout
    bad = subprocess.run([sys.executable, "-c", script], env=_env(AMDQ_SIM_INJECT="usb_unplugged"),
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "unknown fault injection 'usb_unplugged'" in bad.stderr


def test_unplug_from_the_environment_after_n_bytes_stops_an_unmodified_upload():
    script = ("import amdq, numpy as np\n"
              "from amdq.errors import DeviceLost\n"
              "d = amdq.open_device('SIMUSB+AMD:gfx1100')\n"
              "try:\n"
              "    for i in range(100):\n"
              "        d.upload(np.zeros(1 << 18, np.float32))\n"
              "except DeviceLost as e:\n"
              "    print('LOST', i, e)\n")
    r = subprocess.run([sys.executable, "-c", script], env=_env(AMDQ_SIM_INJECT="usb_unplug:after_bytes=20000000"),
                       capture_output=True, text=True, timeout=HARD_TIMEOUT_S)
    assert r.returncode == 0, r.stderr[-3000:]
    lost = [ln for ln in r.stdout.splitlines() if ln.startswith("LOST")]
    assert lost and "copying 1048576 bytes in" in lost[0]
    assert 0 < int(lost[0].split()[1]) < 10                                      # the boot took ~15 MB of the 20


# -- stalls and transfer errors: clear errors, then the device works ------------------------------------------------
@pytest.fixture
def dev(monkeypatch):
    monkeypatch.delenv("AMDQ_SIM_INJECT", raising=False)
    d = amdq.open_device("SIMUSB+AMD:gfx1100")
    yield d
    d.close()


def _data(n: int, seed: int = 1) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


@pytest.mark.timeout(120)
def test_a_stalled_bulk_in_is_an_error_naming_it_then_the_halt_is_cleared(dev):
    data = _data(700_001)
    buf = dev.alloc(len(data))
    buf.write(data)
    dev.synchronize()
    ctrl = dev.iface.fn.ctrl
    dev.sim.inject("usb_stall", endpoint=H.EP_BULK_IN)
    with pytest.raises(DeviceError, match=r"SRAM read of .* while copying 700001 bytes out .*libusb -9.*stalled.*"
                                          r"halt was cleared \(endpoint 0x81\)") as e:
        buf.read()
    assert not isinstance(e.value, DeviceLost) and e.value.in_flight.startswith("SRAM read")
    assert ctrl.stalls_cleared == 1 and not dev.sim.halted
    assert buf.read() == data                                                    # the next copy is whole
    assert dev.info()["bridge"]["stalls_cleared"] == 1


@pytest.mark.timeout(120)
def test_a_stall_while_the_copy_windows_are_set_up_leaves_nothing_mapped(dev):
    data = _data(5000, 4)
    buf = dev.alloc(len(data))
    dev.synchronize()
    assert dev.iface.copier is None                                             # the first copy sets them up
    dev.sim.inject("usb_stall", endpoint=H.EP_BULK_OUT, after_transfers=2)
    with pytest.raises(DeviceError, match="stalled.*halt was cleared"):
        buf.write(data)
    buf.write(data)                                                             # set up again, not a VM overlap
    assert buf.read() == data


@pytest.mark.timeout(120)
def test_a_stalled_bulk_out_mid_upload_is_an_error_then_uploads_work(dev):
    data = _data(900_000, 2)
    buf = dev.alloc(len(data))
    buf.write(b"x")                                                             # the copy windows set up
    dev.synchronize()
    dev.sim.inject("usb_stall", endpoint=H.EP_BULK_OUT, after_transfers=8)
    with pytest.raises(DeviceError, match=r"copying 900000 bytes in .*(STALL|libusb -9).*stalled.*halt was cleared"):
        buf.write(data)
    assert not dev.sim.halted
    dev.synchronize(timeout_ms=5000)                                             # the copy engine was released
    buf.write(data)
    assert buf.read() == data


@pytest.mark.timeout(120)
def test_a_control_stall_fails_one_request_and_the_next_works(dev):
    buf = dev.upload(np.arange(4096, dtype=np.uint32))
    dev.synchronize()
    dev.sim.inject("usb_stall", endpoint=0)
    with pytest.raises(DeviceError, match="libusb -9.*the endpoint stalled"):
        buf.read()
    assert np.array_equal(buf.numpy(np.uint32), np.arange(4096, dtype=np.uint32))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("err,code", [("io", -1), ("timeout", -7)])
def test_a_transfer_error_on_a_read_is_an_error_then_reads_work(dev, err, code):
    data = _data(300_000, 3)
    buf = dev.alloc(len(data))
    buf.write(data)
    dev.synchronize()
    dev.sim.inject("usb_error", endpoint=H.EP_BULK_IN, error=err)
    with pytest.raises(DeviceError, match=f"libusb {code}") as e:
        buf.read()
    assert not isinstance(e.value, DeviceLost)
    assert buf.read() == data


@pytest.mark.timeout(120)
def test_a_kernel_runs_after_a_stall_in_a_wait(dev):
    prg = dev.load(amdq.compile(VADD, arch="gfx1100"))
    n = 4096
    a, b, c = dev.upload(np.arange(n, dtype=np.float32)), dev.upload(np.ones(n, np.float32)), dev.alloc(4 * n)
    dev.sim.inject("usb_stall", endpoint=H.EP_BULK_IN)
    h = prg["vadd"](a, b, c, 1.0, n, grid=(n // 256, 1, 1), block=(256, 1, 1))
    with pytest.raises(DeviceError, match="stalled"):
        h.wait(5000)
    h.wait(5000)                                                                 # the halt cleared: the wait goes on
    assert np.array_equal(c.numpy(np.float32), np.arange(n, dtype=np.float32) + 1)


# -- re-plug in one process ----------------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_replug_in_process_finds_the_same_gpu_and_boots_it_fully(monkeypatch):
    monkeypatch.delenv("AMDQ_SIM_INJECT", raising=False)
    d = amdq.open_device("SIMUSB+AMD:gfx1100")
    bridge = d.sim
    buf = d.upload(np.arange(100, dtype=np.uint32))
    d.sim.inject("usb_unplug")
    with pytest.raises(DeviceLost):
        buf.read()
    d.close()
    assert bridge.fn.gpu is not None and bridge.unplugged                        # parked, the GPU still powered
    d2 = amdq.open_device("SIMUSB+AMD:gfx1100")
    try:
        assert d2.sim is bridge and not bridge.unplugged
        r = d2.iface.report
        assert r.kind == "full" and "did not end cleanly" in r.reason and r.mode1_reset
        b2 = d2.upload(np.arange(100, dtype=np.uint32)[::-1].copy())
        assert np.array_equal(b2.numpy(np.uint32), np.arange(100, dtype=np.uint32)[::-1])
    finally:
        d2.close()
    d3 = amdq.open_device("SIMUSB+AMD:gfx1100")                                  # closed cleanly: a new bridge
    try:
        assert d3.sim is not bridge
    finally:
        d3.close()


# -- amdq info and profiles -------------------------------------------------------------------------------------------
def test_amdq_info_shows_the_bridge_and_the_gpu_behind_it(monkeypatch, capsys):
    from amdq.cli import main
    monkeypatch.delenv("AMDQ_SIM_INJECT", raising=False)
    assert main(["info", "--device", "SIMUSB+AMD:gfx1100", "--json"]) == 0
    (e,) = json.loads(capsys.readouterr().out)
    br = e["bridge"]
    assert br["chip"] == "ASMedia ASM2464" and br["firmware"] == "1.00" and br["usb_version"] == "3.2"
    assert br["usb_speed"].startswith("SuperSpeed+") and br["pcie_link"] == "L0, up" and br["ltssm"] == H.LTSSM_L0
    assert br["gpu"] == "1002:744c gfx1100" and br["product"].startswith("custom")
    assert main(["info", "--device", "SIMUSB+AMD:gfx1100"]) == 0
    text = capsys.readouterr().out
    assert "bridge          ASMedia ASM2464 at usb:1-2, firmware 1.00" in text
    assert "USB link        SuperSpeed+ (USB 3.2 Gen 2, 10 Gbit/s)" in text
    assert "PCIe link       L0, up; behind it the GPU 1002:744c gfx1100" in text


def test_amdq_info_on_a_high_speed_link():
    from amdq.iface import usb as U
    from amdq.sim.usb import SimUSBContext
    ctx = SimUSBContext(arch="gfx1100", speed="high")
    try:
        it = U.open_usb(ctx, "gfx1100", standin=None)
        try:
            br = it.bridge_info()
            assert br["usb_speed"] == "high speed (USB 2.0, 480 Mbit/s)" and br["usb_version"] == "2.0"
        finally:
            it.close()
    finally:
        ctx.close()


@pytest.mark.timeout(120)
def test_a_profile_shows_the_usb_transfers_on_their_own_tracks(dev, tmp_path):
    prg = dev.load(amdq.compile(VADD, arch="gfx1100"))
    n = 1 << 16
    with dev.profile() as p:
        a, b, c = dev.upload(np.ones(n, np.float32)), dev.upload(np.ones(n, np.float32)), dev.alloc(4 * n)
        prg["vadd"](a, b, c, 1.0, n, grid=n // 256, block=256, wait=True)
        assert c.read() == np.full(n, 2.0, np.float32).tobytes()
    s = p.interface_summary()
    assert set(s) == {"USB control", "USB bulk"}
    assert s["USB bulk"]["bytes"] >= 3 * 4 * n and s["USB control"]["events"] > 10
    assert all(v["seconds"] > 0 for v in s.values())
    assert dev.iface.fn.ctrl.events is None                                      # the log is off again
    p.save(str(tmp_path / "t.json"))
    tr = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    names = {e["args"]["name"] for e in tr if e.get("name") == "thread_name"}
    assert {"host", "USB control", "USB bulk"} <= names and any(n.startswith("GPU") for n in names)
    usb = [e for e in tr if e.get("cat") == "interface"]
    assert usb and all(e["dur"] >= 0 and "bytes" in e["args"] for e in usb)
    assert any(e["name"].startswith("bulk OUT: copy-in chunk") or "SRAM write" in e["name"] for e in usb)
    assert any(e["name"].startswith("bulk IN: SRAM read") for e in usb)
    starts = [e["ts"] for e in usb]
    assert starts == sorted(starts)
    with dev.profile() as q:                                                      # nothing done: no events
        pass
    assert q.events() == []


def test_a_profile_on_an_interface_without_events_has_no_interface_track(monkeypatch, tmp_path):
    monkeypatch.delenv("AMDQ_SIM_INJECT", raising=False)
    d = amdq.open_device("SIM:gfx1100")
    try:
        with d.profile() as p:
            d.upload(np.ones(16, np.float32)).read()
        assert p.events() == [] and not any(e.get("cat") == "interface" for e in p.trace()["traceEvents"])
    finally:
        d.close()


def test_amdq_trace_of_an_unmodified_program_has_the_usb_tracks(tmp_path):
    out = tmp_path / "trace.json"
    script = ("import amdq, numpy as np\n"
              "d = amdq.open_device('SIMUSB+AMD:gfx1100')\n"
              "d.upload(np.arange(100000, dtype=np.float32)).read()\n")
    r = subprocess.run([sys.executable, "-c", script], env=_env(AMDQ_TRACE=str(out)), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    tr = json.loads(out.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in tr if e.get("name") == "thread_name"}
    assert {"USB control", "USB bulk"} <= names
    assert sum(e["args"]["bytes"] for e in tr if e.get("cat") == "interface" and "bulk" in e["args"]["kind"]) \
        >= 2 * 400000


@pytest.mark.timeout(120)
def test_timed_launches_read_their_timestamps_back_over_the_bridge(dev):
    prg = dev.load(amdq.compile(VADD, arch="gfx1100"))
    n = 1024
    a, b, c = dev.upload(np.ones(n, np.float32)), dev.upload(np.ones(n, np.float32)), dev.alloc(4 * n)
    recs = [prg["vadd"](a, b, c, 1.0, n, grid=n // 256, block=256, wait=True).wait() for _ in range(3)]
    assert all(r.gpu is not None and r.gpu > 0 for r in recs), [r.gpu for r in recs]   # not the stale zeros
    assert all(x.gpu_end <= y.gpu_start + 1e-6 for x, y in zip(recs, recs[1:]))


# -- copies of every size class, unaligned, bit-exact -------------------------------------------------------------
SIZES = [1, 2, 3, 5, 4095, 4097, 65537, H.COPYIN_CHUNK - 1, H.COPYIN_CHUNK, H.COPYIN_CHUNK + 1,
         H.COPYOUT_CHUNK - 1, H.COPYOUT_CHUNK + 1, (1 << 20) + 3, (4 << 20) + 1, (16 << 20) + 5, (64 << 20) + 7]


@pytest.fixture(scope="module")
def copy_dev():
    old = {k: os.environ.pop(k, None) for k in ("AMDQ_SIM_INJECT", "AMDQ_SIM_USB_TIMING")}
    d = amdq.open_device("SIMUSB+AMD:gfx1100")
    assert not d.sim.timing.sleep                                               # the link model does not sleep
    yield d
    d.close()
    os.environ.update({k: v for k, v in old.items() if v is not None})


@pytest.mark.timeout(300)
@pytest.mark.parametrize("size", SIZES)
def test_copies_of_every_size_class_are_bit_exact(copy_dev, size):
    d = copy_dev
    off = size % 7 + 1                                                          # never dword-aligned
    data = _data(size, size)
    pad = 13
    buf = d.alloc(off + size + pad)
    buf.write(b"\xa5" * (off + size + pad))
    buf.write(data, off)
    assert buf.read(size, off) == data
    assert buf.read(off) == b"\xa5" * off                                       # what lies before is untouched
    assert buf.read(pad, off + size) == b"\xa5" * pad                           # and after
    buf.free()


@pytest.mark.timeout(120)
def test_a_wait_on_another_thread_raises_device_lost_when_the_bridge_goes(monkeypatch):
    import threading
    import time
    monkeypatch.delenv("AMDQ_SIM_INJECT", raising=False)
    d = amdq.open_device("SIMUSB+AMD:gfx1100")
    try:
        prg = d.load(amdq.compile(VADD, arch="gfx1100"))
        n = 256
        a, b, c = (d.upload(np.ones(n, np.float32)) for _ in range(3))
        d.synchronize()
        d.sim.inject("hang_cp")                                                  # the launch never completes
        h = prg["vadd"](a, b, c, 1.0, n, grid=1, block=256)
        got: list = []

        def waiter() -> None:
            t0 = time.monotonic()
            try:
                h.wait(20000)
                got.append(("returned", time.monotonic() - t0))
            except Exception as e:                                               # what the wait raised, and when
                got.append((e, time.monotonic() - t0))
        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.3)
        d.sim.inject("usb_unplug")                                               # the cable goes while it waits
        t.join(10)
        assert not t.is_alive(), "the wait hung"
        (e, secs), = got
        assert isinstance(e, DeviceLost) and secs < 2.0, (e, secs)
        assert "lost waiting for kernel vadd" in str(e)
        with pytest.raises(DeviceLost):
            c.read()
    finally:
        d.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("after", [0, 40, 230, 260])              # queues, memory, the fini (a close: ~273)
def test_an_unplug_during_close_does_not_raise_and_the_next_open_boots(monkeypatch, after):
    monkeypatch.delenv("AMDQ_SIM_INJECT", raising=False)
    d = amdq.open_device("SIMUSB+AMD:gfx1100")
    d.upload(np.arange(1000, dtype=np.uint32))
    d.synchronize()
    d.sim.inject("usb_unplug", after_transfers=after)
    d.close()                                                                    # the fini's requests fail: quiet
    assert d.iface.closed and d.iface.fn.ctrl.lost is not None
    d2 = amdq.open_device("SIMUSB+AMD:gfx1100")
    try:
        assert d2.iface.report.kind == "full"
        b = d2.upload(np.arange(1000, dtype=np.uint32))
        assert np.array_equal(b.numpy(np.uint32), np.arange(1000, dtype=np.uint32))
    finally:
        d2.close()


@pytest.mark.timeout(120)
def test_an_unplug_ends_a_copy_out_that_waits_for_a_hung_copy_engine(monkeypatch):
    import threading
    import time
    monkeypatch.delenv("AMDQ_SIM_INJECT", raising=False)
    d = amdq.open_device("SIMUSB+AMD:gfx1100")
    try:
        buf = d.upload(np.arange(4096, dtype=np.uint32))
        d.synchronize()
        d.sim.inject("hang_sdma")                                                # the SRAM is never released
        threading.Timer(0.3, lambda: d.sim.inject("usb_unplug")).start()
        t0 = time.monotonic()
        with pytest.raises(DeviceLost, match="SRAM read of 16384 bytes while copying 16384 bytes out"):
            buf.read()                                                           # not the 10 s SRAM timeout
        assert time.monotonic() - t0 < 3.0
    finally:
        d.close()


def test_amdq_info_lists_a_usb_bridge_among_the_reachable_gpus(monkeypatch):
    from amdq import cli
    from amdq.iface import pci, usb
    monkeypatch.setattr(pci, "usable", lambda fns: [])
    monkeypatch.setattr(usb, "present", lambda: True)
    assert "USB+AMD" in cli.reachable_specs()
    monkeypatch.setattr(usb, "present", lambda: False)
    assert "USB+AMD" not in cli.reachable_specs()
