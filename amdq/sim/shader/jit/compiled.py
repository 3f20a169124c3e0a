"""Host machine code for a region's IR (llvmlite's MCJIT, the host CPU's features), cached in memory and on disk.

Two tiers (TIERS): a region is first compiled cheaply (a short IR pipeline, instruction selection and register
allocation at -O0: a third of the -O2 compile time, code up to 2x slower on loops), and compiled again at -O2 once
it has run long enough in compiled code that the better code pays for the second compile (runtime.py decides).
A large region's first-tier IR comes in parts (block.ModuleGen.text_parts, compile_threads() of them): the parts
are parsed and compiled at once on as many threads, each in its own LLVM context, through llvmlite's C entry points
without its process-wide lock (_emit_unlocked), and loader.py links their objects into one image.

The key is a sha256 over the JIT's version, the tier, LLVM's version, the host CPU name and features, the ISA
family, the wave size, the offsets of the region's blocks and the bytes of every instruction of the region with
its offset from the region's root (the generated code is position independent: PCs are the root's plus
constants), so compiled code is never used for other bytes. On disk: $AMDQ_SIM_JIT_CACHE (default
$AMDQ_CACHE/jit, else ~/.cache/amdq/jit; `0` turns the disk cache off), one file per key, written to a temporary
file and renamed into place: the object as loader.py links it (`.lnk`: placing it is a copy and a few additions), or
the object file itself where only MCJIT maps it (`.o`); a file that does not load is compiled again (records.py
keeps, beside them, which regions were compiled in each code page, and images/ the regions a process ran compiled in
each page as one file: save_image, load_image). Failures to read or write the cache never fail
a dispatch.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import struct
import tempfile
import threading
import time

from . import loader

_IMPORTS: dict = {"names": frozenset(), "resolve": None}   # what a region may call in another placed object


def importable(names: frozenset[str], resolve) -> None:
    """The functions a region's code may leave undefined, and resolve(name): the address of one (LookupError: it
    cannot be had). library.py registers its own when it is imported."""
    _IMPORTS["names"], _IMPORTS["resolve"] = names, resolve


def _resolve(name: str) -> int:
    resolve = _IMPORTS["resolve"]
    if resolve is None:
        raise LookupError(f"{name}: nothing resolves imports")
    return resolve(name)


_lock = threading.Lock()
_stats_lock = threading.Lock()               # stats and MEMORY for loads made outside _lock (_native)
_state: dict = {}
MEMORY: dict[str, "Compiled"] = {}          # key -> compiled region (this process)
stats = {"compiled": 0, "disk_hits": 0, "memory_hits": 0, "compile_seconds": 0.0, "load_seconds": 0.0,
         "compile_cpu_seconds": 0.0, "ir_lines": 0, "recompiled": 0, "recompile_seconds": 0.0,
         "compiled_instructions": 0, "mcjit_loads": 0, "compile_failures": 0, "image_loads": 0, "image_regions": 0,
         "helper_compiles": 0}
# seconds of the compiles by stage (this process, both tiers): IR text, parse, verify, IR passes, machine code, loading
STAGES = ("ir", "parse", "verify", "passes", "emit", "load")
stage_seconds = dict.fromkeys(STAGES, 0.0)

# tier -> (the IR passes, the codegen level): "fast" first, "opt" for the regions that stay hot. The short pipeline
# (inline the block bodies, promote the allocas, simplify the CFG) gives code as fast as the longer one with
# instcombine and GVN (measured on bench/shader.py's kernels, gfx1100/gfx1201/gfx942) for half its time; -O0 codegen
# (fast instruction selection and register allocation) costs a fifth of -O2's, with code up to 2x slower (the fast
# register allocator spills the vector loops: thread CPU time of the matmul 11 -> 25 ms). Before -O0 codegen the short
# pipeline buys nothing (objects within 10%, bench/shader.py's fast tier as fast: matmul x9.7, lds_reduce x3.6 over the
# interpreter either way) and cost a fifth of the compile (matmul 15 of 70 ms, lds_reduce 27 of 120): the fast tier
# runs no IR pass (bench/kernels.py's suite: median compile 55 -> 42-46 ms, max 382 -> 237-259).
FAST, OPT = "fast", "opt"
TIERS = {FAST: ((), 0),
         OPT: (("always_inliner", "sroa", "simplify_cfg"), 2)}

FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32)


def _llvm(tier: str = FAST):
    """(llvmlite.binding, the tier's target machine), initialised once (by whichever thread asks first)."""
    with _init_lock:
        return _llvm_locked(tier)


_init_lock = threading.Lock()


def _llvm_locked(tier: str):
    if "llvm" not in _state:
        import llvmlite.binding as llvm
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _state["target"] = llvm.Target.from_default_triple()
        _state["cpu"] = cpu, feats = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
        _state["id"] = f"{llvm.llvm_version_info}|{cpu}|{feats}"
        _state["llvm"] = llvm
    tm = _state.get(tier)
    if tm is None:
        cpu, feats = _state["cpu"]
        tm = _state[tier] = _state["target"].create_target_machine(cpu=cpu, features=feats, opt=TIERS[tier][1],
                                                                   codemodel="jitdefault", reloc="pic")
    return _state["llvm"], tm


def started() -> bool:
    """LLVM is loaded and initialised in this process (what a first key or compile costs otherwise)."""
    return "llvm" in _state


def host_id() -> str:
    """LLVM's version and the host CPU (name and features): part of every key. Known without starting LLVM when an
    earlier process wrote it down for this host (hosts/ in the disk cache, named by host_fingerprint())."""
    hid = _state.get("known") or _known_host()
    if hid is None:
        _llvm()
        hid = _state["known"] = _state["id"]
        _write_host(hid)
    return hid


def host_features() -> list[str]:
    """LLVM's features of the host CPU (+avx512f, ...), as host_id() knows them."""
    return host_id().split("|", 2)[2].split(",")


def host_known() -> bool:
    """host_id() costs nothing now (LLVM started, or the host written down by an earlier process)."""
    return "known" in _state or _known_host() is not None


def host_fingerprint() -> str | None:
    """What LLVM's host identity depends on, read without LLVM: llvmlite's version (it pins LLVM's) and the CPU as
    /proc/cpuinfo describes its first processor (vendor, family, model, name, stepping, flags: what the kernel
    read from CPUID and enabled); None where there is no /proc/cpuinfo (LLVM is asked then)."""
    fp = _state.get("fingerprint", False)
    if fp is False:
        fp = None
        keep = _cpuinfo()
        try:
            import llvmlite
            if keep:
                text = f"{llvmlite.__version__}|{os.uname().machine}|" + "\n".join(keep)
                fp = hashlib.sha256(text.encode()).hexdigest()[:32]
        except (ImportError, AttributeError):
            fp = None
        _state["fingerprint"] = fp
    return fp


def _cpuinfo() -> list[str]:
    """The lines of /proc/cpuinfo's first processor that name the CPU and its flags ([]: none)."""
    keep = _state.get("cpuinfo")
    if keep is None:
        try:
            with open("/proc/cpuinfo") as f:
                first = f.read().split("\n\n", 1)[0]
        except OSError:
            first = ""
        keep = _state["cpuinfo"] = [line for line in first.splitlines() if line.split(":", 1)[0].strip() in
                                    ("vendor_id", "cpu family", "model", "model name", "stepping", "flags")]
    return keep


def cpu_flags() -> set[str] | None:
    """The CPU flags the kernel enabled (/proc/cpuinfo: avx512f, ...), read without LLVM; None where it does not
    say."""
    for line in _cpuinfo():
        if line.split(":", 1)[0].strip() == "flags":
            return set(line.split(":", 1)[1].split())
    return None


def _host_path() -> str | None:
    d, fp = directory(), host_fingerprint()
    return os.path.join(d, "hosts", fp) if d and fp else None


def _known_host() -> str | None:
    path = _host_path()
    if path is None:
        return None
    try:
        with open(path) as f:
            hid = f.read().strip()
    except OSError:
        return None
    if hid.count("|") < 2:
        return None
    _state["known"] = hid
    return hid


def _write_host(hid: str) -> None:
    path = _host_path()
    if path:
        _store(path, hid.encode())


def directory() -> str | None:
    """The disk cache directory, or None when it is turned off."""
    env = os.environ.get("AMDQ_SIM_JIT_CACHE"), os.environ.get("AMDQ_CACHE")
    got = _dirs.get(env, False)
    if got is False:
        d, cache = env
        if d is not None and d.strip().lower() in ("0", "off", "no", "false", ""):
            got = None
        elif d:
            got = d
        else:
            got = os.path.join(cache or os.path.join(os.path.expanduser("~"), ".cache", "amdq"), "jit")
        _dirs[env] = got
    return got


_dirs: dict[tuple, str | None] = {}         # directory() by the environment it was read from


class Compiled:
    """The functions of one region, by name, callable with ctypes (the call releases the interpreter lock);
    `addresses`: its global functions'; `how`: what mapped the code ("native": loader.py, or "mcjit")."""

    def __init__(self, addresses: dict[str, int], names: list[str], seconds: float, source: str, how: str,
                 linked: "loader.Linked | None" = None, within: tuple | None = None):
        self.addresses, self.seconds, self.source, self.how = addresses, seconds, source, how
        self.fns = {n: FN(addresses[n]) for n in names}
        self._linked = linked           # the code as loader.py linked it (what a page's image keeps: save_image),
        self._within = within           # or (image, key, start, end): where it lies in a page's image (load_image)

    @property
    def linked(self) -> "loader.Linked | None":
        if self._linked is None and self._within is not None:
            self._linked = loader.split(*self._within)
        return self._linked

    def address(self, name: str) -> int:
        return self.addresses[name]


_KEEP: list = []      # engines and the object files added to them: never freed (MCJIT keeps pointing into them)


def _engine(llvm, tm):
    m = llvm.parse_assembly("")
    m.triple = tm.triple
    eng = llvm.create_mcjit_compiler(m, tm)
    _KEEP.append(eng)
    return eng


def _add(llvm, eng, *objs: bytes) -> None:
    """Add the objects to the engine, then finalize it once: a part's references to another part's functions are
    resolved only when all of them are in (finalizing after the first part aborts the process on the others')."""
    for obj in objs:
        ref = llvm.ObjectFileRef.from_data(obj)
        _KEEP.append((ref, obj))
        eng.add_object_file(ref)
    eng.finalize_object()


def _map(obj: bytes | list[bytes], names: list[str], tier: str,
         imports: bool = True) -> tuple[dict[str, int], str, loader.Linked | None]:
    """The object's (or objects', linked together) functions mapped executable: linked and placed by loader.py (no
    LLVM needed), else through MCJIT (an object that needs more than that loader does: raises when neither can); and
    the linked object when loader.py took it (what the disk cache keeps then). `imports`: the objects may call the
    functions registered as importable (a region's may: the JIT library's; the library's own call nothing outside
    them)."""
    objs = obj if isinstance(obj, list) else [obj]
    allowed = _IMPORTS["names"] if imports else frozenset()
    try:
        lk = loader.link(objs, names, allowed)
        return loader.place(lk, _resolve), "native", lk
    except loader.Unsupported as e:
        _state["unsupported"] = str(e)
    if len(objs) > 1:                   # (RuntimeDyld resolves calls between large-code-model objects wrongly)
        raise _OneObject("MCJIT maps one object: the module is compiled whole")
    llvm, tm = _llvm(tier)
    for name in _undefined(objs) & allowed:     # (the library functions the objects call, for MCJIT's resolver)
        llvm.add_symbol(name, _resolve(name))
    eng = _engine(llvm, tm)
    _add(llvm, eng, *objs)
    addresses = {n: eng.get_function_address(n) for n in [*names, "chain"]}
    if not all(addresses[n] for n in names):
        raise ValueError("functions missing")
    stats["mcjit_loads"] += 1
    return {n: a for n, a in addresses.items() if a}, "mcjit", None


class _OneObject(Exception):
    """MCJIT is to map a module compiled in parts: _build compiles it whole instead."""


def _undefined(objs: list[bytes]) -> set[str]:
    """The symbols the objects name that none of them defines (what MCJIT's resolver must be given); empty for what
    is not an ELF object (MCJIT then says what is missing)."""
    import io

    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection
    defined, named = set(), set()
    try:
        for o in objs:
            for sec in ELFFile(io.BytesIO(o)).iter_sections():
                if isinstance(sec, SymbolTableSection):
                    for sym in sec.iter_symbols():
                        (named if sym["st_shndx"] == "SHN_UNDEF" else defined).add(sym.name)
    except (ELFError, ValueError, struct.error):
        return set()
    return named - defined


def compile_threads() -> int:
    """Threads one compile uses (the parts of a large region's IR, ModuleGen.text_parts): two where the process may
    run on two cores or more (LLVM releases the interpreter lock while it works); AMDQ_SIM_JIT_THREADS=1 or 2
    chooses."""
    n = _state.get("threads")
    if n is None:
        v = os.environ.get("AMDQ_SIM_JIT_THREADS", "").strip()
        if v in ("1", "2"):
            n = int(v)
        else:
            n = max(1, min(2, cores()))
        _state["threads"] = n
    return n


def _emit(llvm, tm, ir: str, tier: str, clock=None, context=None) -> bytes:
    """One module's object code: parsed (into `context`, else LLVM's global one), verified, the tier's IR passes,
    machine code (clock: adds each stage's seconds)."""
    mod = llvm.parse_assembly(ir, context=context)
    clock and clock("parse")
    mod.verify()
    clock and clock("verify")
    _optimise(llvm, tm, mod, tier)
    clock and clock("passes")
    mod.triple = tm.triple
    obj = tm.emit_object(mod)
    clock and clock("emit")
    return obj


_aside: dict = {}                   # the threads compiling the other parts of a module, and their LLVM state
_aside_lock = threading.Lock()
_tls = threading.local()


def _aside_pool():
    with _aside_lock:
        pool = _aside.get("pool")
        if pool is None:
            from concurrent.futures import ThreadPoolExecutor
            pool = _aside["pool"] = ThreadPoolExecutor(max_workers=max(1, compile_threads() - 1),
                                                       thread_name_prefix="amdq-jit-part")
        return pool


def _emit_aside(ir: str, tier: str, clock=None) -> tuple[bytes, float]:
    """_emit of one part of a module, in this thread's own LLVM context with its own target machine (nothing another
    thread uses meanwhile), without llvmlite's lock; (the object, its CPU seconds)."""
    t = time.thread_time()
    llvm, _ = _llvm(tier)
    mine = _tls.__dict__
    if "context" not in mine:
        mine["context"] = llvm.create_context()
    got = mine.get(tier)
    if got is None:                     # (the machine, and its triple asked once, with llvmlite's lock)
        cpu, feats = _state["cpu"]
        tm = _state["target"].create_target_machine(cpu=cpu, features=feats, opt=TIERS[tier][1],
                                                    codemodel="jitdefault", reloc="pic")
        got = mine[tier] = tm, tm.triple.encode()
    obj = _emit_unlocked(llvm, *got, ir, tier, mine["context"], clock)
    return obj, time.thread_time() - t


def _emit_unlocked(llvm, tm, triple: bytes, ir: str, tier: str, context, clock=None) -> bytes:
    """_emit without llvmlite's process-wide lock around each LLVM call (it serialises every thread's LLVM work; LLVM
    itself compiles modules of separate contexts with separate target machines at once): the same C entry points,
    called directly. The locked path for a tier with IR passes, or where llvmlite's wrappers are not what this
    expects."""
    from llvmlite.binding import ffi
    lib = ffi.lib
    try:
        parse, verify, settarget, emit, start, size, dispose, free, gone = (
            getattr(lib, f"LLVMPY_{n}")._cfn for n in ("ParseAssembly", "VerifyModule", "SetTarget",
                                                      "TargetMachineEmitToMemory", "GetBufferStart", "GetBufferSize",
                                                      "DisposeMemoryBuffer", "DisposeString", "DisposeModule"))
    except AttributeError:
        return _emit(llvm, tm, ir, tier, clock, context)
    if TIERS[tier][0]:
        return _emit(llvm, tm, ir, tier, clock, context)

    def check(err: ctypes.c_char_p, what: str) -> None:
        if err.value:
            msg = err.value.decode(errors="replace")
            free(err)
            raise RuntimeError(f"{what}\n{msg}")
    err = ctypes.c_char_p(None)
    mod = parse(context, ctypes.c_char_p(ir.encode()), ctypes.byref(err))
    try:
        check(err, "LLVM IR parsing error")
        clock and clock("parse")
        if verify(mod, ctypes.byref(err)):
            check(err, "LLVM IR verification error")
            raise RuntimeError("LLVM IR verification error")
        clock and clock("verify")
        settarget(mod, triple)
        mb = emit(tm, mod, 1, ctypes.byref(err))
        if not mb:
            check(err, "LLVM code generation error")
            raise RuntimeError("LLVM code generation error")
        try:
            obj = ctypes.string_at(start(mb), size(mb))
        finally:
            dispose(mb)
        clock and clock("emit")
        return obj
    finally:
        if mod:
            gone(mod)


def _optimise(llvm, tm, mod, tier: str) -> None:
    """The tier's IR passes (the generated code is already vector code; loop passes have nothing to add)."""
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=1))
    pm = llvm.create_new_module_pass_manager()
    for name in TIERS[tier][0]:
        getattr(pm, f"add_{name}_pass")()
    pm.run(mod, pb)


_pool = None
_pool_lock = threading.Lock()


def submit(key, names: list[str], make_ir, tier: str = FAST, size: int = 0):
    """A future of (key, get(key, names, make_ir, tier, size)), compiled on the JIT's worker thread (LLVM releases the
    interpreter lock while it works, so the dispatch goes on in the interpreter meanwhile); already done when `key`
    is in memory. `key` may be (region code, code version) instead: then it is named on the worker too (naming the
    first key of a process on a host not written down yet starts LLVM, ~70 ms). (helper.submit: the same in the
    compile helper.)"""
    from concurrent.futures import Future
    hit = MEMORY.get(key) if isinstance(key, str) else None
    if hit is not None:
        f = Future()
        f.set_result((key, hit))
        return f

    def job():
        if exiting():                   # (a compile queued when the process ended: its heat is on record)
            raise Abandoned("exiting: not compiled")
        k = key if isinstance(key, str) else tier_key(*key, tier)
        return k, get(k, names, make_ir, tier, size)
    return _worker().submit(job)


class Abandoned(RuntimeError):
    """The process is exiting: a background compile is dropped, or its answer is not waited for."""


def exiting() -> bool:
    """This process is exiting: background compiles are dropped, not waited for (its exit joins the worker thread)."""
    return _exiting.is_set() or not threading.main_thread().is_alive()


_exiting = threading.Event()             # (set where the interpreter's exit begins: _worker)


def helper_wanted() -> bool:
    """Background compiles go to the compile helper (helper.py): it is not turned off (AMDQ_SIM_JIT_HELPER=0) nor gone,
    there is a disk cache to hand the code over in, and a core for it besides the interpreter's."""
    if os.environ.get("AMDQ_SIM_JIT_HELPER", "1").strip().lower() in ("0", "off", "no", "false"):
        return False
    return cores() >= 2 and directory() is not None and "helper_gone" not in _state


def cores() -> int:
    """The CPUs this process may run on (asked once)."""
    n = _state.get("cores")
    if n is None:
        try:
            n = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            n = os.cpu_count() or 1
        _state["cores"] = n
    return n


def _native(key: str, names: list[str], counted: bool = True) -> Compiled | None:
    """The linked object of `key` on disk placed by loader.py, or None (no file, or a damaged one: get's locked path
    looks for an object file, maps it through MCJIT or compiles it); counted: a region's (stats)."""
    path = _path(key, LINKED)
    if not path or not os.access(path, os.R_OK):       # (no exception for the common miss: the other tier)
        return None
    t = time.perf_counter()
    try:
        with open(path, "rb") as f:
            lk = loader.unpack(f.read())
        if not set(names) <= lk.entries.keys():
            return None
        addresses = loader.place(lk, _resolve)
    except (OSError, loader.Unsupported):
        return None
    dt = time.perf_counter() - t
    with _stats_lock:
        c = MEMORY.setdefault(key, Compiled(addresses, names, dt, "disk", "native", lk))
        if counted:
            stats["disk_hits"] += 1
            stats["load_seconds"] += dt
    return c


def drain(timeout: float | None = None) -> None:
    """Wait until the compiles and loads submitted so far are done (the worker runs them in order): a benchmark's
    measurement does not share the host with a background -O2 compile of code it measured before."""
    if _pool is not None:
        submit_call(lambda: None).result(timeout)


def submit_call(fn):
    """A future of fn(), run on the JIT's worker thread (after the compiles submitted before it)."""
    return _worker().submit(fn)


def _worker():
    """The JIT's worker thread (one: compiles run one after the other)."""
    global _pool
    from concurrent.futures import ThreadPoolExecutor
    with _pool_lock:                 # not _lock: the worker holds that for a whole compilation
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="amdq-jit")
            # the exit's first step: registered after concurrent.futures's hook, which joins the worker (threading
            # calls them last first), so a job sees exiting() before that join waits for it
            getattr(threading, "_register_atexit", lambda fn: None)(_exiting.set)
        return _pool


def start() -> None:
    """Start LLVM on the worker thread, in the background (its libraries, the target machine, a first engine): what
    the first region loaded in a process waits for otherwise (tens of ms for the import, 1-2 ms for the rest)."""
    if not started():
        _worker().submit(_start)


def _start() -> None:
    llvm, tm = _llvm(FAST)
    _engine(llvm, tm).finalize_object()
    host_id()


LINKED, OBJECT = ".lnk", ".o"       # on disk: a linked object (loader.pack), or an object only MCJIT maps


def _path(key: str, suffix: str) -> str | None:
    d = directory()
    return os.path.join(d, key + suffix) if d else None


def available(key: str) -> bool:
    """`key` is compiled already: in memory, or on disk (a file that may still turn out damaged)."""
    if key in MEMORY:
        return True
    return any(p is not None and os.path.exists(p) for p in (_path(key, LINKED), _path(key, OBJECT)))


def in_memory(key: str) -> Compiled | None:
    """The region of `key` if this process holds it (compiled, loaded, or placed by a page's image), else None: no
    file looked for."""
    hit = MEMORY.get(key)
    if hit is not None:
        with _stats_lock:
            stats["memory_hits"] += 1
    return hit


def _cached(key: str, names: list[str]) -> Compiled | None:
    """The region of `key` from memory, or its linked object on disk placed (no lock), else None."""
    hit = in_memory(key)
    return hit if hit is not None else _native(key, names)


def stored(key: str, names: list[str]) -> Compiled | None:
    """The compiled region of `key` if it is in memory or on disk, else None (nothing compiled): what a load of a
    region an earlier process compiled asks, one file open for the common case (a linked object)."""
    c = _cached(key, names)
    if c is not None:
        return c
    path = _path(key, OBJECT)
    if path is None or not os.access(path, os.R_OK):
        return None
    return get(key, names, None)            # (an object file: MCJIT maps it, never compiling: make_ir is None)


def get(key: str, names: list[str], make_ir, tier: str = FAST, size: int = 0) -> Compiled:
    """The compiled region of `key`: from memory, from disk, or compiled from make_ir(tier) at `tier` (and stored;
    make_ir None: never compiled, LookupError instead);
    `size`: its instructions (stats["compiled_instructions"]: what the compile seconds were spent on).

    An object on disk that loader.py maps is loaded without LLVM's lock: not behind a compile the worker is running
    (an -O2 recompile holds it for hundreds of ms). Anything else (MCJIT, a compile) takes the lock."""
    c = _cached(key, names)
    if c is not None:
        return c
    with _lock:
        hit = MEMORY.get(key)
        if hit is not None:
            with _stats_lock:
                stats["memory_hits"] += 1
            return hit
        t, tc = time.perf_counter(), time.thread_time()
        path = _path(key, OBJECT)
        obj = None
        if path:
            try:
                with open(path, "rb") as f:
                    obj = f.read()
            except OSError:
                obj = None
        source = "disk"
        if obj:
            try:
                addresses, how, linked = _map(obj, names, tier)
                with _stats_lock:
                    stats["disk_hits"] += 1
                if linked is not None:          # (an object file of an earlier version: linked from now on)
                    keep_linked(key, linked)
            except Exception:        # a damaged file: compile again (and replace it)
                obj = None
        if not obj:
            if make_ir is None:
                raise LookupError(f"region {key[:16]}: no object on disk that loads")
            source = "compiled"
            try:
                objs, addresses, how, linked, cpu = _build(make_ir, names, tier)
            except Exception:        # (the caller leaves the region to the interpreter; counted for the tests)
                with _stats_lock:
                    stats["compile_failures"] += 1
                raise
            tc -= cpu
            with _stats_lock:
                stats["compiled" if tier == FAST else "recompiled"] += 1
            if linked is not None:
                keep_linked(key, linked)
            elif path and len(objs) == 1:
                _store(path, objs[0])
        dt = time.perf_counter() - t
        with _stats_lock:
            if source != "compiled":
                stats["load_seconds"] += dt
            elif tier == FAST:
                stats["compile_seconds"] += dt
                stats["compiled_instructions"] += size
                stats["compile_cpu_seconds"] += time.thread_time() - tc
            else:
                stats["recompile_seconds"] += dt
            c = MEMORY[key] = Compiled(addresses, names, dt, source, how, linked)
        return c


def get_library(key: str, names: list[str], make_parts) -> tuple[Compiled, bool]:
    """The JIT library's module of `key` (library.py): from memory, from its linked object on disk, or compiled now
    from make_parts(parts) (and stored; parts None: as many as compile threads); (it, whether it was compiled now).
    Without _lock: a region's compile holding it places its code, which binds the library's functions (this
    compile's LLVM work is its threads' own)."""
    c = MEMORY.get(key) or _native(key, names, counted=False)
    if c is not None:
        return c, False
    t = time.perf_counter()
    objs, addresses, how, linked, _ = _build(lambda tier, parts=None: make_parts(parts), names, FAST, imports=False)
    if linked is not None:
        keep_linked(key, linked)
    with _stats_lock:
        c = MEMORY.setdefault(key, Compiled(addresses, [], time.perf_counter() - t, "compiled", how, linked))
    return c, True


# ---------------------------------------------------------------- a code page's image
#
# What a process ran compiled from one code page (the regions of its record's candidates) is also kept as one file,
# images/<page key>.img, written at exit when it changed: every region's linked code combined into one object
# (loader.pack_image), each under the region's key. The next process that reads that page's record places the whole
# image at once (one file read, one copy into one mapping) and its
# regions join MEMORY, where the record's loads then find them (a region is still used only under the key its bytes in
# memory give, so an image never serves other code): a process that runs a page's kernels once each, as the demo
# does, saves a file read, unpack and mapping per region (~0.2 ms each).
def image_path(page_key: str) -> str | None:
    d = directory()
    return os.path.join(d, "images", page_key + ".img") if d else None


def save_image(page_key: str, regions: dict[str, "loader.Linked"]) -> None:
    """Write the image of a page: these regions (key -> linked code), replacing the one there."""
    path = image_path(page_key)
    if path is not None and regions:
        _store(path, loader.pack_image(regions))


def load_image(page_key: str) -> set[str]:
    """Place every region the image of this page holds, as one mapping, into MEMORY (those not there already); the
    keys it holds (none: no image, or a damaged one)."""
    path = image_path(page_key)
    if path is None or not os.access(path, os.R_OK):     # (no exception for the common miss)
        return set()
    t = time.perf_counter()
    try:
        with open(path, "rb") as f:
            image, spans = loader.unpack_image(f.read())
        placed = loader.place(image, _resolve)
    except (OSError, loader.Unsupported):
        return set()
    regions: dict[str, dict[str, int]] = {}
    for full, addr in placed.items():
        key, _, name = full.partition("/")
        regions.setdefault(key, {})[name] = addr
    dt = time.perf_counter() - t
    with _stats_lock:
        for key, addresses in regions.items():
            MEMORY.setdefault(key, Compiled(addresses, list(addresses), dt / len(regions), "disk", "native",
                                            within=(image, key, *spans[key])))
        stats["image_loads"] += 1
        stats["image_regions"] += len(regions)
        stats["load_seconds"] += dt
    return set(regions)


def _build(make_ir, names: list[str], tier: str, imports: bool = True) -> tuple[list[bytes], dict[str, int], str,
                                                                             "loader.Linked | None", float]:
    """Compile make_ir(tier) and map it (`imports`: as _map): (its objects, get's _map results, the CPU seconds its
    other threads spent). make_ir(tier, 1): the module in one part (what MCJIT maps when the loader refuses it)."""
    llvm, tm = _llvm(tier)
    clock = _Stages()
    ir = make_ir(tier)
    parts = ir if isinstance(ir, list) else [ir]
    clock("ir")
    with _stats_lock:
        stats["ir_lines"] += sum(x.count("\n") for x in parts)
    aside = [_aside_pool().submit(_emit_aside, x, tier) for x in parts[1:]]
    objs = [_emit_aside(parts[0], tier, clock)[0] if aside else _emit(llvm, tm, parts[0], tier, clock)]
    cpu = 0.0
    for job in aside:                   # (the other parts, compiled meanwhile on their own threads)
        obj, t = job.result()
        objs.append(obj)
        cpu += t
    clock("emit")
    try:
        addresses, how, linked = _map(objs, names, tier, imports)
    except _OneObject:                  # (the loader refused the parts: MCJIT takes the module as one object)
        whole = make_ir(tier, 1)
        objs = [_emit(llvm, tm, whole[0] if isinstance(whole, list) else whole, tier, clock)]
        addresses, how, linked = _map(objs, names, tier, imports)
    clock("load")
    return objs, addresses, how, linked, cpu


class _Stages:
    """Adds the seconds since the last call to stage_seconds[stage]."""

    def __init__(self):
        self.t = time.perf_counter()

    def __call__(self, stage: str) -> None:
        t = time.perf_counter()
        with _stats_lock:               # (a region's compile and the library's may run at once)
            stage_seconds[stage] += t - self.t
        self.t = t


def keep_linked(key: str, linked: "loader.Linked") -> None:
    """Store the linked object of `key` in the disk cache (when there is one), where _native finds it."""
    path = _path(key, LINKED)
    if path:
        _store(path, loader.pack(linked))


def _store(path: str, obj: bytes) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(obj)
        os.replace(tmp, path)
    except OSError:
        pass


def region_key(family: str, wave64: bool, root: int, insts: list, version: int, starts: list[int] = (),
               tier: str = FAST) -> str:
    """sha256 over what the region's code depends on (see the module docstring); `starts`: its blocks' PCs."""
    return tier_key(region_code(family, wave64, root, insts, starts), version, tier)


def region_code(family: str, wave64: bool, root: int, insts: list, starts: list[int] = ()) -> str:
    """The part of a region's key its code gives (the ISA family, the wave size, its blocks' and instructions'
    offsets from the root, the instructions' bytes): the same for both tiers."""
    parts = [f"{family}|{int(wave64)}|{','.join(str(p - root) for p in sorted(starts))}|".encode()]
    for i in insts:
        parts.append(b"%d:%d:%d|" % (i.pc - root, len(i.raw), bool(i.dead_sdst)))
        parts.append(bytes(i.raw))
    return hashlib.sha256(b"".join(parts)).hexdigest()


def tier_key(code: str, version: int, tier: str) -> str:
    """The key of a region's code (region_code) compiled at `tier` by this JIT version, LLVM and host."""
    return hashlib.sha256(f"amdq-jit|{version}|{tier}|{host_id()}|{code}".encode()).hexdigest()
