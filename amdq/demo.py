"""`amdq demo`: compile with llvmlite, run a small model on the default device, validate every output
against numpy and show where the time went, stage by stage."""
from __future__ import annotations

import contextlib
import sys
import time
from collections import defaultdict
from importlib import resources

import numpy as np

STAGES = ("compile", "load", "upload", "encode", "submit", "gpu", "wait", "download", "validate")


class Stages:
    def __init__(self):
        self.t = defaultdict(float)
        self.n = defaultdict(int)

    def add(self, stage: str, seconds: float) -> None:
        self.t[stage] += seconds
        self.n[stage] += 1

    def time(self, stage: str):
        s = self

        class _T:
            def __enter__(self):
                self.t0 = time.perf_counter()

            def __exit__(self, *a):
                s.add(stage, time.perf_counter() - self.t0)
        return _T()

    def launch(self, handle) -> None:
        rec = handle.record
        self.add("encode", rec.encode)
        self.add("submit", rec.submit)
        self.add("wait", rec.wait)
        if rec.gpu is not None:
            self.add("gpu", rec.gpu)

    def table(self) -> str:
        rows = [f"{'stage':<10}{'count':>7}{'total ms':>12}{'per call us':>14}"]
        for s in STAGES:
            if self.n[s]:
                rows.append(f"{s:<10}{self.n[s]:>7}{self.t[s] * 1e3:>12.3f}{self.t[s] / self.n[s] * 1e6:>14.1f}")
        return "\n".join(rows)


def run(spec: str | None = None, trace: str | None = None, out=sys.stdout, settled=None) -> int:
    """Run the demo on the device `spec`; `settled()`, when given, is called once the device is open and the
    programs loaded, before the timed launches (an application may settle its heap there: `amdq demo` freezes
    the garbage collector's objects). 0 when every output is valid."""
    import amdq
    p = lambda *a: print(*a, file=out)  # noqa: E731
    st = Stages()
    dev = amdq.open_device(spec)
    p(f"device: {dev.name}")
    src = {n: resources.files("amdq").joinpath(f"examples/{n}.ll").read_text() for n in ("vadd", "model")}
    with st.time("compile"):
        cos = {n: amdq.compile(s, dev.arch) for n, s in src.items()}
    with st.time("load"):
        prg = {n: dev.load(c) for n, c in cos.items()}
    vadd, linear, softmax, reduce = (prg["vadd"]["vadd"], prg["model"]["linear"], prg["model"]["softmax"],
                                     prg["model"]["reduce_sum"])
    r = np.random.default_rng(42)
    B, D, H, C, N = 64, 128, 64, 10, 1 << 16
    x, w1, b1 = r.standard_normal((B, D), np.float32), r.standard_normal((D, H), np.float32) / 8, r.standard_normal(H, np.float32)
    w2, b2 = r.standard_normal((H, C), np.float32) / 8, r.standard_normal(C, np.float32)
    va, vb, red = r.standard_normal(N, np.float32), r.standard_normal(N, np.float32), r.random(N, np.float32)
    with st.time("upload"):
        X, W1, B1, W2, B2 = (dev.upload(a) for a in (x, w1, b1, w2, b2))
        VA, VB, RED = dev.upload(va), dev.upload(vb), dev.upload(red)
    H1, LOG, PROB = dev.alloc(B * H * 4), dev.alloc(B * C * 4), dev.alloc(B * C * 4)
    VC, PART, TOT = dev.alloc(N * 4), dev.alloc(N // 256 * 4), dev.alloc(4)
    wg = 64

    def g(n: int) -> int:
        return (n + wg - 1) // wg
    if settled is not None:
        settled()
    prof = dev.profile() if trace else contextlib.nullcontext()
    with prof:
        st.launch(linear(X, W1, B1, H1, B, D, H, 1, grid=g(B * H), block=wg, wait=True))
        st.launch(linear(H1, W2, B2, LOG, B, H, C, 0, grid=g(B * C), block=wg, wait=True))
        st.launch(softmax(LOG, PROB, B, C, grid=g(B), block=wg, wait=True))
        st.launch(vadd(VA, VB, VC, 0.5, N, grid=N // 256, block=256, wait=True))
        st.launch(reduce(RED, PART, N, grid=N // 256, block=256, wait=True))
        st.launch(reduce(PART, TOT, N // 256, grid=1, block=256, wait=True))
    if trace:
        prof.save(trace)
        p(f"trace: {trace} ({len(prof.records)} launches; open it in ui.perfetto.dev)")
    with st.time("download"):
        got = {"hidden": H1.numpy(np.float32, (B, H)), "logits": LOG.numpy(np.float32, (B, C)),
               "probs": PROB.numpy(np.float32, (B, C)), "vadd": VC.numpy(np.float32),
               "sum": TOT.numpy(np.float32)[0]}
    with st.time("validate"):
        h = np.maximum(x.astype(np.float64) @ w1 + b1, 0)
        logits = h @ w2 + b2
        e = np.exp(logits - logits.max(1, keepdims=True))
        want = {"hidden": h, "logits": logits, "probs": e / e.sum(1, keepdims=True),
                "vadd": (va.astype(np.float64) + 0.5 * vb.astype(np.float64)), "sum": red.astype(np.float64).sum()}
        tol = {"hidden": 1e-4, "logits": 1e-4, "probs": 1e-5, "vadd": 1e-6, "sum": 1e-5}
        bad = [k for k in want if not np.allclose(got[k], want[k], rtol=tol[k], atol=tol[k])]
    p(f"model: {B}x{D} -> dense {H} + ReLU -> dense {C} -> softmax; vadd of {N}; sum of {N}")
    p(st.table())
    dev.close()
    if bad:
        for k in bad:
            err = np.max(np.abs(np.asarray(got[k], np.float64) - want[k]))
            p(f"demo: output {k} does not match numpy (max abs error {err:.3g})")
        return 1
    p("demo: all outputs valid")
    return 0
