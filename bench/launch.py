"""Host cost of a kernel launch, GPU side deferred: fresh launch (encode + signal + ring write +
doorbell), resubmission of a bound launch, and the limit: one slice write of the same dwords into the
ring; then the same two on the AQL queue (AMD_AQL=1). Last line: JSON.

Where a fresh PM4 launch's microseconds go (`stages_us`), each stage timed alone the way the launch runs it:
`encode` (the plan's lookup, kernel-argument space taken and the arguments packed), `ring_write` (the plan's
template copied into the ring and patched in place: kernarg address, timeline value), `doorbell` (write
pointer published, doorbell written; the simulated doorbell only records it while the GPU is deferred),
and `bookkeeping`, the rest of the fresh launch (argument checks, the device lock, the timeline value and
its cross-queue ordering hook, the Launch handle and its host timestamps). The AQL launch's (`aql_stages_us`)
alike: `encode` (plan, argument space, packing), `ring_write` (the signal's PM4 patched, both slots' bodies and
headers), `doorbell` (write_dispatch_id and the doorbell), `bookkeeping` the rest.

    python bench/launch.py [--quick] [--device SIMPCI+AMD:gfx1100]

With a SIMPCI device the same launches run on SIMKFD too, and the ratios (goal <= 1.2) are reported.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import amdq  # noqa: E402
import amdq.runtime.aql_queue as mod  # noqa: E402  (the AQL queue's slot layout, for its stages)
import pair  # noqa: E402  (bench/pair.py)

KERNEL = """
define amdgpu_kernel void @axpy(ptr addrspace(1) %y, ptr addrspace(1) %x, float %a, i32 %n) {
  %i = call i32 @llvm.amdgcn.workitem.id.x()
  %xp = getelementptr float, ptr addrspace(1) %x, i32 %i
  %yp = getelementptr float, ptr addrspace(1) %y, i32 %i
  %xv = load float, ptr addrspace(1) %xp
  %yv = load float, ptr addrspace(1) %yp
  %r = call float @llvm.fma.f32(float %a, float %xv, float %yv)
  store float %r, ptr addrspace(1) %yp
  ret void
}
declare i32 @llvm.amdgcn.workitem.id.x()
declare float @llvm.fma.f32(float, float, float)
"""


def per_call(fn, n: int, rounds: int, reset) -> float:
    """Best-of-rounds seconds per call of fn over n calls, running `reset` (untimed) between rounds."""
    return pair.interleaved({"": {"": pair.Case(fn, n, reset)}}, rounds)[""][""]


def aql_launch(n: int, rounds: int) -> dict:
    """The same fresh launch and bound resubmission on the AQL queue (AMD_AQL=1): dispatch packet + vendor
    PM4-IB signal packet, header written last, doorbell = last packet index."""
    old = os.environ.get("AMD_AQL")
    os.environ["AMD_AQL"] = "1"
    try:
        dev = amdq.open_device("SIM:gfx1100")
    finally:
        os.environ.pop("AMD_AQL") if old is None else os.environ.__setitem__("AMD_AQL", old)
    k = dev.load(amdq.compile(KERNEL, dev.arch))["axpy"]
    y, x = dev.upload(np.zeros(64, np.float32)), dev.upload(np.ones(64, np.float32))
    k(y, x, 2.0, 64, grid=1, block=64, wait=True)
    gpu = dev.sim

    def reset():
        gpu.defer = False
        dev.queue.ring_doorbell()
        dev.synchronize()
        gpu.defer = True

    q, kv, args, grid, block = dev.queue, dev.kernargs, (y, x, 2.0, 64), (1, 1, 1), (64, 1, 1)
    p = q.plan(k, args, grid, block)
    scratch = bytearray(len(q._rel))

    def encode():                       # what AQLQueue.launch does before the ring: plan, argument space, pack
        pl = q.plan(k, args, grid, block)
        ka, off = kv.take(pl.size + len(q._rel))
        pl.pack(kv.mv, off, args)

    def ring_write():                   # the signal's PM4 patched, both slots' bodies, the two header words (here
        i = q.wid                       # INVALID: the slots past the write index stay unwritten for the GPU)
        o = (i % q.slots) * 64
        q._put_rel(scratch, 0, q._rel_head, 1, q._rel_tail)
        mod.TWO_SLOTS.pack_into(q.mv, o, mod.INVALID, p.head, kv.va, p.tail, mod.INVALID, q._vhead, kv.va, q._vdw3,
                                q._vtail)
        mod.U32.pack_into(q.mv, o, mod.INVALID)
        mod.U32.pack_into(q.mv, o + 64, mod.INVALID)

    def doorbell():                     # write_dispatch_id and the doorbell again: nothing new for the GPU
        q._set_wid(q.wid)
        q._ring_bell(q.wid - 1)

    gpu.defer = True
    bound = k.bind(y, x, 2.0, 64, grid=1, block=64)
    best = pair.interleaved({"": {"fresh": pair.Case(lambda: k(y, x, 2.0, 64, grid=1, block=64), n, reset),
                                  "bound": pair.Case(bound.submit, n, reset), "encode": pair.Case(encode, n, reset),
                                  "ring_write": pair.Case(ring_write, n), "doorbell": pair.Case(doorbell, n)}},
                            rounds)[""]
    gpu.defer = False
    reset()
    gpu.defer = False
    dev.synchronize()
    ok = bool(np.allclose(y.numpy(np.float32), 2.0 * (3 + 2 * n * rounds)))   # one untimed call per case
    dev.close()
    us = {key: v * 1e6 for key, v in best.items()}
    stages = {key: round(us[key], 2) for key in ("encode", "ring_write", "doorbell")}
    stages["bookkeeping"] = round(max(0.0, us["fresh"] - sum(stages.values())), 2)
    return {"aql_stages_us": stages, "aql_fresh_launch_us": round(us["fresh"], 2),
            "aql_bound_resubmit_us": round(us["bound"], 2), "aql_packets_per_launch": 2, "aql_results_valid": ok}


class HostLaunch:
    """Fresh launch, bound resubmit, graph replay and the ring-slice limit on the compute queue of `spec`, as
    cases (bench/pair.py) timed with the GPU deferred; `result()` checks what the GPU computed of them all."""
    KERNELS = 100                                               # a graph of 100 launches, replayed whole

    def __init__(self, spec: str, n: int):
        self.dev = dev = amdq.open_device(spec)
        k = dev.load(amdq.compile(KERNEL, dev.arch))["axpy"]
        y, x = dev.upload(np.zeros(64, np.float32)), dev.upload(np.ones(64, np.float32))
        self.y = y
        k(y, x, 2.0, 64, grid=1, block=64, wait=True)             # build the launch plan once
        self.gpu = dev.sim                                          # the simulated GPU (or the PCI function before it)
        with dev.capture() as g:
            for _ in range(self.KERNELS):
                k(y, x, 2.0, 64, grid=1, block=64)
        bound = k.bind(y, x, 2.0, 64, grid=1, block=64)
        p = dev.queue.plan(k, (y, x, 2.0, 64), (1, 1, 1), (64, 1, 1))
        ring, dw = dev.queue.ring, p.dw
        self.dwords = int(len(dw))

        def slice_write():
            ring[0:len(dw)] = dw
        q, kv, args, grid, block = dev.queue, dev.kernargs, (y, x, 2.0, 64), (1, 1, 1), (64, 1, 1)

        def encode():                       # what PM4Queue.launch does before the ring (stages_us)
            pl = q.plan(k, args, grid, block)
            ka, off = kv.take(pl.size)
            pl.pack(kv.mv, off, args)
            kv.wrote(off, pl.size)

        def ring_write():                   # the template into the ring at the write pointer, patched there
            o = 4 * (q.wptr % q.ring_dw)
            if p.plain is not None:         # (template and patches in one struct pack)
                p.plain(q._rmv, o, p.head, kv.alloc.va, p.mid, q.timeline.value, p.tail)
            else:
                q._rmv[o:o + p.nbytes] = p.tpl
                q._patch(p, q._rmv, o, kv.alloc.va, q.timeline.value, None)
            q._ringmap.wrote(o, p.nbytes)

        def doorbell():                     # the same write pointer again: nothing new for the GPU
            q._bell(q.wptr)
        stages = hasattr(q, "_patch")       # (a PM4 queue)
        graphs = max(3, n // self.KERNELS)
        self.cases = {"fresh_launch_us": pair.Case(lambda: k(y, x, 2.0, 64, grid=1, block=64), n, self.reset),
                      "bound_resubmit_us": pair.Case(bound.submit, n, self.reset),
                      "graph_replay_per_kernel_us": pair.Case(g.replay, graphs, self.reset),
                      "ring_slice_write_us": pair.Case(slice_write, n)}
        if stages:
            self.cases.update({"stage_encode": pair.Case(encode, n), "stage_ring_write": pair.Case(ring_write, n),
                               "stage_doorbell": pair.Case(doorbell, n)})
        self.gpu.defer = True

    def reset(self) -> None:
        """Let the GPU run what was queued (the doorbell rung again with the queue's write pointer)."""
        q = self.dev.queue.q
        self.gpu.defer = False
        q.doorbell.write64(q.doorbell_off, self.dev.queue.wptr)
        self.dev.synchronize()
        self.gpu.defer = True

    def result(self, best: dict[str, float], rounds: int) -> dict:
        """The figures, once the GPU ran everything: y grew by 2 in every launch (one untimed call per case)."""
        self.reset()
        self.gpu.defer = False
        per = {"fresh_launch_us": 1, "bound_resubmit_us": 1, "graph_replay_per_kernel_us": self.KERNELS}
        launches = 1 + sum(m * (1 + self.cases[k].calls * rounds) for k, m in per.items())
        got, want = self.y.numpy(np.float32), 2.0 * launches
        ok = bool(np.allclose(got, want))
        if not ok:
            print(f"results: y = {got[:4]}..., expected {want}", file=sys.stderr)
        self.dev.close()
        us = {k: v * 1e6 for k, v in best.items()}
        us["graph_replay_per_kernel_us"] /= self.KERNELS
        limit = us["ring_slice_write_us"]
        stages = {}
        if "stage_encode" in us:
            stages = {k: round(us[f"stage_{k}"], 2) for k in ("encode", "ring_write", "doorbell")}
            stages["bookkeeping"] = round(max(0.0, us["fresh_launch_us"] - sum(stages.values())), 2)
        return {"stages_us": stages, "fresh_launch_us": round(us["fresh_launch_us"], 2), "bound_resubmit_us": round(us["bound_resubmit_us"], 2),
                "graph_replay_per_kernel_us": round(us["graph_replay_per_kernel_us"], 3),
                "ring_slice_write_us": round(limit, 2), "launch_dwords": self.dwords,
                "fresh_vs_limit": round(us["fresh_launch_us"] / limit, 1),
                "bound_vs_limit": round(us["bound_resubmit_us"] / limit, 1), "results_valid": ok}


def host_launch(specs: list[str], n: int, rounds: int) -> list[dict]:
    """The cases of every device in `specs`, their rounds interleaved; one result per device."""
    runs = [HostLaunch(s, n) for s in specs]
    best = pair.interleaved({str(i): r.cases for i, r in enumerate(runs)}, rounds)
    return [r.result(best[str(i)], rounds) for i, r in enumerate(runs)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", default="SIMKFD+AMD:gfx1100",
                    help="a SIMPCI device is measured against SIMKFD in the same run (goal: within 1.2x)")
    a = ap.parse_args()
    n, rounds = (150, 7) if a.quick else (500, 15)
    pci = a.device.upper().startswith("SIMPCI")
    both = host_launch([a.device] + ([pair.simkfd_of(a.device)] if pci else []), n, rounds)
    res = both[0]
    res["device"] = a.device
    res["targets"] = {"fresh_launch_us": 20, "bound_resubmit_us": 5, "graph_replay_per_kernel_us": 3}
    # issue 14's goals on this machine (where the ring slice write took 0.29 us), as multiples of the limit
    # measured in the same run: fresh <= 3 us, bound <= 1 us, graph replay <= 0.5 us per kernel
    res["goals_vs_limit"] = {"fresh_launch_us": round(3 / 0.29, 1), "bound_resubmit_us": round(1 / 0.29, 1),
                             "graph_replay_per_kernel_us": round(0.5 / 0.29, 1)}
    lim = res["ring_slice_write_us"]
    res["meets_goals_vs_limit"] = {k: res[k] / lim <= g for k, g in res["goals_vs_limit"].items()}
    dw = res["launch_dwords"]
    print(f"{a.device}")
    print(f"fresh launch       {res['fresh_launch_us']:8.2f} us  ({dw} dwords)")
    if res["stages_us"]:
        print("  of which          " + ", ".join(f"{k} {v:.2f}" for k, v in res["stages_us"].items()) + " us")
    print(f"bound resubmit     {res['bound_resubmit_us']:8.2f} us")
    print(f"graph replay       {res['graph_replay_per_kernel_us']:8.3f} us per kernel (100-launch graph)")
    print(f"ring slice write   {res['ring_slice_write_us']:8.2f} us  (limit)")
    if pci:
        kfd = both[1]
        res.update(pair.against(res, kfd, ("fresh_launch_us", "bound_resubmit_us", "graph_replay_per_kernel_us")))
        res["results_valid"] = res["results_valid"] and kfd["results_valid"]
        print("vs SIMKFD          " + ", ".join(f"{k.split('_')[0]} {v:.2f}x" for k, v in res["vs_simkfd"].items())
              + "  (rounds interleaved)")
        print(json.dumps(res))
        return
    res.update(aql_launch(n, rounds))
    res["results_valid"] = res["results_valid"] and res["aql_results_valid"]
    print(f"AQL fresh launch   {res['aql_fresh_launch_us']:8.2f} us  (dispatch + vendor PM4-IB signal packet)")
    print("  of which          " + ", ".join(f"{k} {v:.2f}" for k, v in res["aql_stages_us"].items()) + " us")
    print(f"AQL bound resubmit {res['aql_bound_resubmit_us']:8.2f} us")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
