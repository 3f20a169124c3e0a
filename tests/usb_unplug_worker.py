"""A program that rehearses an unplugged USB bridge (tests/test_usb_failures.py runs it in a subprocess with a hard
timeout, so a hang fails the test instead of freezing the suite). Steps: open SIMUSB+AMD:gfx1100 (boot), load a
code object, upload two buffers, allocate one, launch vadd, wait, download. The unplug is armed from the
environment (AMDQ_SIM_INJECT, before the boot) or, with `--at STEP key=value...`, from code (`dev.sim.inject`)
just before STEP. After the DeviceLost, each later call on the device must raise DeviceLost too; the device is
closed, a new open_device (the re-plug) must boot the GPU and run the kernel bit-exactly. The last line of the
output is `RESULT <json>`.

    python tests/usb_unplug_worker.py CODE_OBJECT [--at STEP key=value ...] [--timeout-ms N]
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np

import amdq
from amdq.errors import DeviceLost

N = 1 << 18                                     # 1 MiB per buffer: four copy-in chunks, two copy-out chunks


def parked():
    """The bridge a failed open left unplugged (amdq.sim.usb parks it for the re-plug), without taking it."""
    from amdq.sim.usb import bridge
    return bridge._parked.get("gfx1100")


def main(argv: list[str]) -> dict:
    code = open(argv[0], "rb").read()
    at, params, timeout_ms = None, {}, 2000
    rest = argv[1:]
    while rest:
        a = rest.pop(0)
        if a == "--at":
            at = rest.pop(0)
        elif a == "--timeout-ms":
            timeout_ms = int(rest.pop(0))
        else:
            k, _, v = a.partition("=")
            params[k] = int(v, 0)
    res: dict = {"steps": [], "lost": None, "exact": None}
    host_a = np.arange(N, dtype=np.float32)
    host_b = np.full(N, 0.5, np.float32)
    st: dict = {}

    def step(name: str, fn):
        if at == name:
            st["dev"].sim.inject("usb_unplug", **params)
        t0 = time.monotonic()
        try:
            out = fn()
        except DeviceLost as e:
            now = time.monotonic()
            bridge = st["dev"].sim if "dev" in st else parked()
            gone = getattr(bridge, "unplugged_at", None)
            res["lost"] = {"step": name, "s": now - t0, "noticed_s": None if gone is None else now - gone,
                           "msg": str(e),
                           "in_flight": getattr(e, "in_flight", None), "activity": getattr(e, "activity", None)}
            raise
        except Exception as e:                  # anything but DeviceLost from an unplug is a failure to report
            res["other"] = {"step": name, "error": f"{type(e).__name__}: {e}"}
            raise
        res["steps"].append(name)
        return out

    try:
        st["dev"] = dev = step("boot", lambda: amdq.open_device("SIMUSB+AMD:gfx1100"))
        st["prg"] = prg = step("load", lambda: dev.load(code))
        st["a"] = step("upload", lambda: dev.upload(host_a))
        st["b"] = step("upload2", lambda: dev.upload(host_b))
        st["c"] = step("alloc", lambda: dev.alloc(4 * N))
        h = step("launch", lambda: prg["vadd"](st["a"], st["b"], st["c"], 2.0, N, grid=(N // 256, 1, 1),
                                               block=(256, 1, 1)))
        step("wait", lambda: h.wait(timeout_ms))
        out = step("download", lambda: st["c"].read())
        res["exact"] = out == (host_a + 1.0).tobytes()
        dev.close()
        return res
    except DeviceLost:
        pass
    dev = st.get("dev")
    later = []
    if dev is not None:                          # every later call: DeviceLost at once
        some = st.get("a")
        ops = [("read", lambda: some.read()), ("write", lambda: some.write(b"\0" * 64)),
               ("alloc", lambda: dev.alloc(64)), ("upload", lambda: dev.upload(np.ones(16, np.float32))),
               ("synchronize", lambda: dev.synchronize(timeout_ms=timeout_ms))]
        if "prg" in st and some is not None:
            ops.append(("launch", lambda: st["prg"]["vadd"](some, some, some, 1.0, 16, grid=(1, 1, 1),
                                                            block=(64, 1, 1), wait=True, timeout_ms=timeout_ms)))
        if some is None:
            ops = ops[2:]
        for name, op in ops:
            t0 = time.monotonic()
            try:
                op()
                later.append([name, "returned", time.monotonic() - t0])
            except DeviceLost:
                later.append([name, "DeviceLost", time.monotonic() - t0])
            except Exception as e:
                later.append([name, f"{type(e).__name__}: {e}", time.monotonic() - t0])
        t0 = time.monotonic()
        dev.close()
        res["close_s"] = time.monotonic() - t0
    res["later"] = later
    d2 = amdq.open_device("SIMUSB+AMD:gfx1100")          # the re-plug
    try:
        res["reboot"] = {"kind": d2.iface.report.kind, "reason": d2.iface.report.reason,
                         "mode1_reset": d2.iface.report.mode1_reset}
        p2 = d2.load(code)
        a2, b2, c2 = d2.upload(host_a), d2.upload(host_b), d2.alloc(4 * N)
        p2["vadd"](a2, b2, c2, -2.0, N, grid=(N // 256, 1, 1), block=(256, 1, 1), wait=True, timeout_ms=timeout_ms)
        res["replug_exact"] = c2.read() == (host_a - 1.0).tobytes()
    finally:
        d2.close()
    return res


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1:])))
