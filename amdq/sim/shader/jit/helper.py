"""The compile helper: a child process that compiles the regions this process compiles in the background
(runtime._submit sends them here where the helper is wanted, compiled.helper_wanted), so that the IR's making,
LLVM's start, the JIT library's making and every region's compile run beside the interpreter instead of inside its
process, where they held its interpreter lock about half of their time (a numpy-and-Python loop ran at 15-31% of
its speed while LLVM started on the worker thread, 46-69% while the library compiled; the run of `amdq demo` that
compiles its first regions: 46 ms a launch, median of 10, against 27.5 with the helper, the cache the same before
each).

The worker thread sends a region's description (runtime.describe_region: its blocks' instructions as PCs, bytes and
flags, and the code lines they lie in, what a page's record holds of a candidate); the helper decodes it again,
makes the IR, names the key (LLVM's host), compiles, links and stores the region in the disk cache, and answers with
the key; the worker then places the stored object as a warm process would (loader.py, no LLVM here). Requests still
queued when the process exits are all sent then, and the helper compiles them after it is gone (_flush). A request
carries the settings the code depends on (the disk cache's directory, the vector width), so one helper serves a
process whose settings change (the tests'). Anything the helper cannot do (a module the loader refuses, the helper
gone) is compiled in this process as before; the synchronous mode (AMDQ_SIM_JIT=sync) never uses it;
AMDQ_SIM_JIT_HELPER=0 turns it off.

Messages are msgpack maps, one per request and one per answer, each after its 4-byte little-endian length: a request
names a file in the disk cache's requests/ that holds {key | code+version, tier, names, region, parts, size, env}
(msgpack; the helper deletes it), an answer is {ok, key, seconds, error}.

    python -m amdq.sim.shader.jit.helper_main   (started by this module: requests on stdin, answers on stdout)
"""
from __future__ import annotations

import os
import select
import struct
import subprocess
import sys
import threading
import time

import msgpack

from . import compiled

ENV = ("AMDQ_SIM_JIT_CACHE", "AMDQ_CACHE", "AMDQ_SIM_JIT_WIDTH")     # what a request carries of this process's settings
POLL_SECONDS = 0.05
ANSWER_SECONDS = 300.0      # a helper silent this long is taken for hung: it is ended, the process compiles itself
NICE = 10                   # the helper's scheduling priority below the process it compiles for

_proc: list = []                # the helper process, once started (compiled._state["helper_gone"]: why it cannot be
                                # used, once it died or would not start: compiles stay in this process then)
_lock = threading.Lock()        # (requests come from the worker thread alone; tests may ask from theirs)


def _frame(obj) -> bytes:
    """A message as the pipe carries it: its length, then msgpack of obj."""
    data = msgpack.packb(obj, use_bin_type=True)
    return struct.pack("<I", len(data)) + data


def _send(f, obj) -> None:
    f.write(_frame(obj))
    f.flush()


def _recv(f):
    head = f.read(4)
    if len(head) < 4:
        raise EOFError("the other end closed the pipe")
    (n,) = struct.unpack("<I", head)
    data = f.read(n)
    if len(data) < n:
        raise EOFError("the other end closed the pipe")
    return msgpack.unpackb(data, raw=False)


def _request(p: subprocess.Popen, obj) -> None:
    """Send a request as the helper takes it (a new helper reads nothing while it starts), polling whether this
    process is exiting meanwhile."""
    view, fd = memoryview(_frame(obj)), p.stdin.fileno()
    os.set_blocking(fd, False)
    until = time.monotonic() + ANSWER_SECONDS
    while view:
        if not select.select([], [fd], [], POLL_SECONDS)[1]:
            _waiting(until)
            continue
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            continue


def _waiting(until: float) -> None:
    """Between two polls of the helper's pipe: Abandoned when this process is exiting, EOFError past `until`."""
    if compiled.exiting():
        raise compiled.Abandoned("exiting: the helper is not waited for")
    if time.monotonic() > until:
        raise EOFError(f"the compile helper did not answer in {ANSWER_SECONDS:.0f} s")


def _answer(p: subprocess.Popen):
    """The helper's next answer, read as it comes, polling whether this process is exiting meanwhile (its exit waits
    for the worker thread: it must not wait for a compile too)."""
    fd, got, need = p.stdout.fileno(), b"", 4
    until = time.monotonic() + ANSWER_SECONDS
    while len(got) < need:
        if not select.select([fd], [], [], POLL_SECONDS)[0]:
            _waiting(until)
            continue
        chunk = os.read(fd, need - len(got))
        if not chunk:
            raise EOFError("the compile helper closed its end")
        got += chunk
        if need == 4 and len(got) == 4:
            need += struct.unpack("<I", got)[0]
    return msgpack.unpackb(got[4:], raw=False)


def _start() -> subprocess.Popen:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))))))      # (the directory holding the amdq package this process runs: the helper runs the same)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return subprocess.Popen([sys.executable, "-m", "amdq.sim.shader.jit.helper_main"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, close_fds=True, bufsize=0)


def submit(key, names: list[str], make_ir, tier: str, size: int, region):
    """compiled.submit's future, compiled by the helper from region() (runtime.describe_region's, taken now) on the
    JIT's worker thread; by this process (make_ir) where the helper cannot. A request still queued when the process
    exits is sent to the helper then (_flush), which compiles it for the next process."""
    if compiled.exiting():              # (the exit's flush is done or under way: dropped, its heat is on record)
        return compiled.submit_call(_abandoned)
    parts = 1 if tier != compiled.FAST else max(1, min(compiled.compile_threads(), compiled.cores() - 1))
    req = request(key, tier, names, region(), parts, size)      # (one core at least left to the interpreter)
    with _queue_lock:
        _queued[id(req)] = req          # (by identity: two requests may be equal; the job keeps req alive)

    def job():
        with _queue_lock:
            if id(req) not in _queued or compiled.exiting():    # (the exit sends it, or sent it: not waited for)
                raise compiled.Abandoned("exiting: sent to the helper at exit")
            del _queued[id(req)]
        got = _by_helper(key, names, req, tier, size)
        if got is not None:
            return got
        k = key if isinstance(key, str) else compiled.tier_key(*key, tier)
        return k, compiled.get(k, names, make_ir, tier, size)
    return compiled.submit_call(job)


def _abandoned():
    raise compiled.Abandoned("exiting: not compiled")


_queue_lock = threading.Lock()
_queued: dict[int, dict] = {}   # requests submitted and not yet sent, in order (the worker sends them one at a time)


def _flush() -> None:
    """The process is exiting: every request still queued goes to the helper at once (written, named on its pipe,
    not waited for), which compiles them after this process is gone: the next run finds them on disk (a first run
    of `amdq demo` used to hand over one of its two hot candidates; the other was compiled a run later). A helper
    whose pipe stays full gets no more (_request gives up while exiting): the exit does not hang on it."""
    compiled._exiting.set()             # (the worker stops waiting for an answer: it gives _lock back)
    with _queue_lock:
        reqs = list(_queued.values())
        _queued.clear()
    if not reqs:
        return
    with _lock:
        if compiled._state.get("helper_gone") or not compiled.directory():
            return
        for req in reqs:
            path = _write(req)
            try:
                _request(_started(), {"file": path})
            except (OSError, ValueError, compiled.Abandoned):
                _unlink(path)
                return


getattr(threading, "_register_atexit", lambda fn: None)(_flush)     # (this module is imported by a first request)


def _by_helper(key, names: list[str], req: dict, tier: str, size: int) -> tuple | None:
    """(key, the region) compiled by the helper from request `req` and placed from the disk cache, or None: it could
    not (this process compiles it then)."""
    try:
        ans = compile_region(req)
    except compiled.Abandoned:          # (the process is exiting: nothing compiled here either)
        raise
    except RuntimeError:
        return None
    if not ans.get("ok"):
        return None
    k = ans["key"]
    c = compiled.MEMORY.get(k) or compiled._native(k, names, counted=False)
    if c is None:
        return None
    stats, fast = compiled.stats, tier == compiled.FAST
    with compiled._stats_lock:
        stats["helper_compiles"] += 1
        if ans["seconds"]:
            stats["compiled" if fast else "recompiled"] += 1
            stats["compile_seconds" if fast else "recompile_seconds"] += ans["seconds"]
            if fast:
                stats["compiled_instructions"] += size
    return k, c


def request(key, tier: str, names: list[str], region: dict, parts: int, size: int) -> dict:
    """The request to compile and store one region (`region`: runtime.describe_region's; its IR in `parts` modules):
    `key` its key, or (region code, code version) for the helper to name it."""
    req = {"tier": tier, "names": names, "region": region, "parts": parts, "size": size,
           "env": {k: os.environ.get(k) for k in ENV}}
    if isinstance(key, str):
        req["key"] = key
    else:
        req["code"], req["version"] = key
    return req


def _write(req: dict) -> str:
    """The request's file in the disk cache's requests/ (the helper deletes it once read)."""
    path = os.path.join(compiled.directory(), "requests", f"{os.getpid()}-{next(_serial)}.req")
    compiled._store(path, msgpack.packb(req, use_bin_type=True))
    return path


def compile_region(req: dict) -> dict:
    """Have the helper compile and store the region of `req` (request()). The answer (ok, key, seconds, error);
    RuntimeError when the helper cannot be used (then never again)."""
    # the request goes in a file, the pipe names it: a message that small never waits for the helper to read it, so
    # a process that exits right after asking leaves the helper its work (it compiles what it was sent, then ends)
    with _lock:
        why = compiled._state.get("helper_gone")
        if why:
            raise RuntimeError(why)
        path = _write(req)
        sent = False
        try:
            p = _started()
            _request(p, {"file": path})
            sent = True                 # (the file is the helper's now: it deletes it)
            return _answer(p)
        except compiled.Abandoned:
            if not sent:
                _unlink(path)
            raise
        except (OSError, EOFError, ValueError, msgpack.UnpackException) as e:
            _unlink(path)
            why = compiled._state["helper_gone"] = f"the compile helper failed: {e}"
            _stop()
            raise RuntimeError(why) from e


_serial = iter(range(1, 1 << 62))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def started() -> bool:
    """This process's helper was started (and has not been found gone)."""
    return bool(_proc) and not compiled._state.get("helper_gone")


def _started() -> subprocess.Popen:
    if not _proc:
        _proc.append(_start())
    return _proc[0]


def _stop() -> None:
    if _proc:
        p = _proc.pop()
        try:
            p.stdin.close()
        except OSError:
            pass
        try:
            p.kill()
        except OSError:
            pass


def stop() -> None:
    """End the helper (a new one starts with the next request); what it was doing is dropped."""
    with _lock:
        _stop()
        compiled._state.pop("helper_gone", None)


# ---------------------------------------------------------------- the helper's side


def serve(inp, out, region_ir) -> None:
    """Answer requests until the input ends (compile them all: once the asking process is gone, without answering);
    region_ir(description) gives a region's make_ir (runtime.region_ir)."""
    from . import library               # noqa: F401  (what resolves a region's imports)
    while True:
        try:
            req = _recv(inp)
        except EOFError:
            return
        try:
            with open(req["file"], "rb") as f:
                req = msgpack.unpackb(f.read(), raw=False)
            _unlink(f.name)
            for k, v in req["env"].items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            tier, parts = req["tier"], req["parts"]
            key = req.get("key") or compiled.tier_key(req["code"], req["version"], tier)
            make = region_ir(req["region"])
            c = compiled.get(key, req["names"], lambda t, n=None: make(t, n or parts), tier, req["size"])
            path = compiled._path(key, compiled.LINKED)
            if c.linked is None or not path:
                raise LookupError("the region does not link: it is compiled where it runs")
            if not os.path.exists(path):        # (compiled before, for another cache directory)
                compiled.keep_linked(key, c.linked)
            ans = {"ok": True, "key": key, "seconds": c.seconds if c.source == "compiled" else 0.0}
        except Exception as e:          # (the asking process compiles it itself)
            ans = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        if out is None:
            continue
        try:
            _send(out, ans)
        except OSError:                 # (the asking process is gone: what it sent is compiled, on disk for the next)
            out = None
