"""The `amdq` command."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .errors import AmdqError


def kernel_summary(img, k) -> dict:
    d = k.descriptor
    return {"name": k.name, "kernarg_size": d.kernarg_size, "group_segment_size": d.group_segment_fixed_size,
            "private_segment_size": d.private_segment_fixed_size, "wavefront_size": d.wave_size,
            "wave32": d.wave32, "rsrc1": d.compute_pgm_rsrc1, "rsrc2": d.compute_pgm_rsrc2,
            "rsrc3": d.compute_pgm_rsrc3, "entry_offset": k.entry_offset, "kd_offset": k.kd_offset,
            "kernel_code_properties": d.kernel_code_properties,
            "sgpr_count": k.meta.sgpr_count, "vgpr_count": k.meta.vgpr_count,
            "args": [{"offset": a.offset, "size": a.size, "value_kind": a.value_kind,
                      **({"name": a.name} if a.name else {})} for a in k.meta.args]}


def inspect_json(img) -> dict:
    return {"arch": img.arch, "code_object_version": img.cov, "elf_type": img.kind,
            "kernels": [kernel_summary(img, k) for k in img.kernels.values()]}


def print_inspect(img, out=sys.stdout) -> None:
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(f"{img.arch} code object v{img.cov} ({img.kind}, {img.size} bytes, {len(img.fixups)} relocations)")
    for k in img.kernels.values():
        d = k.descriptor
        p(f"\nkernel {k.name}")
        p(f"  descriptor @ {k.kd_offset:#x}, entry @ {k.entry_offset:#x}, code {k.code_size} bytes")
        p(f"  wave{d.wave_size}  kernarg {d.kernarg_size} B  LDS {d.group_segment_fixed_size} B  "
          f"scratch {d.private_segment_fixed_size} B/lane  SGPRs {k.meta.sgpr_count}  VGPRs {k.meta.vgpr_count} "
          f"(alloc {d.vgpr_alloc})")
        p(f"  rsrc1 {d.compute_pgm_rsrc1:#010x}  rsrc2 {d.compute_pgm_rsrc2:#010x}  rsrc3 {d.compute_pgm_rsrc3:#010x}"
          f"  properties {d.kernel_code_properties:#06x}")
        on = lambda bits: " ".join(f"{n}={v}" for n, v in bits.items() if v)  # noqa: E731
        p(f"    rsrc1: {on(d.rsrc1)}")
        p(f"    rsrc2: {on(d.rsrc2)}")
        p(f"    rsrc3: {on(d.rsrc3) or '-'}")
        p(f"    user SGPRs: {', '.join(f'{n} s{i}' + (f':{i + c - 1}' if c > 1 else '') for n, i, c in d.user_sgprs) or '-'}"
          f"; system SGPRs: {', '.join(f'{n} s{i}' for n, i in d.system_sgprs) or '-'}")
        p("  args:")
        for a in k.meta.args:
            p(f"    {a.offset:4d} {a.size:3d}  {a.value_kind:28s} {a.name} {a.type_name}".rstrip())


def cmd_inspect(args) -> int:
    from .codeobj import bundle, load_code_object
    data = Path(args.file).read_bytes()
    if bundle.is_bundle(data) or bundle.is_host_elf(data):      # a fat binary: list its entries
        entries = bundle.unpack(data)
        if args.json:
            print(json.dumps({"bundle": [bundle.entry_summary(e) for e in entries]}))
        else:
            bundle.print_entries(entries)
        return 0
    img = load_code_object(data)
    if args.json:
        print(json.dumps(inspect_json(img)))
    else:
        print_inspect(img)
    return 0


def cmd_disasm(args) -> int:
    from .tools.disasm import disassemble, disassemble_elf, labelled
    data = Path(args.file).read_bytes()
    if args.arch:                               # raw machine code, no ELF
        if args.kernel:
            raise AmdqError("--kernel names a function of a code object; raw code (--arch) has none")
        if len(data) % 4:
            raise AmdqError(f"{args.file}: {len(data)} bytes are not whole instruction dwords")
        listing = {"": disassemble(data, args.arch, int(args.base, 0), True if args.wave64 else None)}
    else:
        listing = {}
        for name, co in _code_objects(data, args.target):
            for fn, lines in disassemble_elf(co).items():
                listing[f"{name}{fn}"] = lines
    if args.kernel and not any(k.rpartition(" ")[2] == args.kernel for k in listing):
        raise AmdqError(f"no function {args.kernel!r} in the code object (have: {', '.join(listing)})")
    for k, (name, lines) in enumerate(listing.items()):
        if args.kernel and name.rpartition(" ")[2] != args.kernel:
            continue
        if name:
            print(f"{name}:")
        for label, pc, text in (labelled(lines, k) if not args.no_labels else [(None, pc, t) for pc, _, t in lines]):
            if label:
                print(f"{label}:")
            print(f"  {pc:08x}  {text}")
    return 0


def _code_objects(data: bytes, target: str | None) -> list[tuple[str, bytes]]:
    """(label prefix, code object) of a file: itself when it is one; of an offload bundle the entry for `target`,
    else every entry holding an AMDGPU code object (labelled with its bundle id)."""
    from .codeobj import bundle
    if not (bundle.is_bundle(data) or bundle.is_host_elf(data)):
        return [("", data)]
    if target:
        return [(f"[{target}] ", bundle.code_object_for(data, target))]
    entries = [e for e in bundle.unpack(data) if e.format == "elf"]
    if not entries:
        raise AmdqError(f"the bundle holds no AMDGPU code object ({bundle.listing(bundle.unpack(data))})")
    return [(f"[{e.id.text}] ", e.data) for e in entries]


def cmd_decode(args) -> int:
    """Decode a dump (rings, IBs, addresses) or raw PM4/SDMA dwords or AQL packets."""
    from .tools import decode as D
    if args.run:
        if args.kind:
            raise AmdqError("--run decodes the queues of the devices a script opens; --kind is for raw files")
        docs = D.run_and_dump(args.run, ([args.file] if args.file else []) + args.script_args)   # all the script's
        for k, doc in enumerate(docs):
            if args.save:
                D.save_dump(doc, args.save if len(docs) == 1 else f"{args.save}.{k}")
            print("\n".join(D.decode_dump(doc)))
        if not docs:
            raise D.DecodeError(f"{args.run} opened no device with queues")
        return 0
    if not args.file:
        raise AmdqError("give a dump or raw file to decode, or --run SCRIPT")
    data = Path(args.file).read_bytes()
    if args.kind is None:
        doc = D.parse_dump(data)
        if doc is None:
            raise D.DecodeError(f"{args.file} is not an amdq dump; for raw dwords give --kind pm4|sdma|aql and "
                                f"--arch ARCH (or --gen N)")
        lines = D.decode_dump(doc)
    else:
        lines = D.decode_raw(data, args.kind, _arch_for(args.kind, args.arch, args.gen))
    print("\n".join(lines))
    return 0


def _arch_for(kind: str, arch: str | None, gen: int | None) -> str:
    """The target to decode raw `kind` with: --arch, or the first target of generation --gen (GFX major for PM4 and
    AQL, SDMA IP major for SDMA)."""
    from .hw.targets import TARGETS, get_target
    if arch is not None:
        return get_target(arch).arch
    if gen is None:
        raise AmdqError(f"raw {kind} needs --arch (e.g. gfx1100) or --gen")
    for t in TARGETS.values():
        if (t.ip["SDMA"][0] if kind == "sdma" else t.gfx_version) == gen:
            return t.arch
    have = sorted({t.ip["SDMA"][0] if kind == "sdma" else t.gfx_version for t in TARGETS.values()})
    raise AmdqError(f"no supported target of {'SDMA' if kind == 'sdma' else 'GFX'} generation {gen} (have: "
                    f"{', '.join(map(str, have))})")


def cmd_run(args) -> int:
    """Run one kernel of a code object with arguments from the command line."""
    from .tools.run import run_kernel
    rec = run_kernel(args.file, args.kernel, args.arg, args.grid, args.block, args.device, args.out)
    if args.json:
        print(json.dumps(rec))
        return 0
    print(f"{rec['kernel']} on {rec['device']}: grid {tuple(rec['grid'])} x block {tuple(rec['block'])}")
    for stage in ("encode", "submit", "gpu", "wait", "download"):
        v = rec["stages"].get(stage)
        if v is not None:
            print(f"  {stage:<9}{v * 1e6:12.1f} us")
    for o in rec["outputs"]:
        print(f"  wrote {o['path']}  ({o['dtype']}, {o['shape']})")
    return 0


def cmd_demo(args) -> int:
    """Run the demo model on the default device (or DEV / --device)."""
    from .demo import run
    return run(args.device, getattr(args, "trace", None), settled=settle_gc)


def settle_gc() -> None:
    """What this command made so far (modules, the device, a simulated GPU's instruction tables) lives until it
    exits: the garbage collector stops scanning it (gc.freeze, a process-wide choice the CLI, an application, may
    make; without a collection first, which would cost what it saves), so a full collection in a timed launch
    costs a fraction of its tens of milliseconds."""
    import gc
    gc.freeze()


def device_entry(dev) -> dict:
    """One `amdq info` object for an open device."""
    info = dev.info()
    iface = dev.name.split("+")[0]
    t = dev.target
    out = {"device": dev.name, "interface": iface, "arch": dev.arch, "family": t.family,
           "ip_versions": info.get("ip_versions") or {k: ".".join(map(str, v)) for k, v in t.ip.items()},
           "compute_units": info["compute_units"], "num_xcc": info["num_xcc"], "wave_size": info["wave_size"],
           "vram_bytes": info.get("vram_bytes", t.vram_bytes), "bars": info.get("bars"),
           "clocks": info.get("clocks"), "firmware": info.get("firmware", []),
           "boot": info.get("boot"), "boot_reason": info.get("boot_reason")}
    for k in ("clock_levels", "power_limit_w", "small_bar", "mode1_reset", "boot_seconds", "vendor", "device_id",
              "queue", "bridge"):
        if k in info:
            out[k] = info[k]
    out.update(board_entry(dev, info))
    return out


def board_entry(dev, info: dict) -> dict:
    """Shader-engine, LDS, clock and memory figures of a device: what its topology reports (KFD properties), else
    its target's reference board (amdq.hw.boards)."""
    from .hw.boards import BOARDS
    t, b = dev.target, BOARDS[dev.arch]
    props = getattr(dev.iface, "props", None) or {}
    return {"board": b.name, "shader_engines": info.get("shader_engines", t.ses), "simds_per_cu": t.simds_per_cu,
            "max_waves_per_cu": t.max_waves_per_cu, "lds_bytes": info.get("lds_bytes", t.lds_bytes),
            "engine_clock_mhz": int(props.get("max_engine_clk_fcompute") or b.engine_mhz),
            "game_clock_mhz": b.game_mhz,
            "memory": {"type": b.memory, "gbps": b.memory_gbps, "bus_bits": b.bus_bits,
                       "bandwidth_gbs": round(b.bandwidth_gbs, 1)}}


def reachable_specs() -> list[str]:
    """Device specs of the GPUs reachable on this machine (KFD, PCI, a USB bridge); the simulated default if none."""
    from .iface.kfd import list_gpus
    from .iface.os_seam import OSSeam
    from .iface import pci, usb
    specs = []
    seam = OSSeam()
    if seam.exists("/dev/kfd") and list_gpus(seam):
        specs.append("KFD+AMD")
    if pci.usable(pci.list_functions()):
        specs.append("PCI+AMD")
    if usb.present():
        specs.append("USB+AMD")
    return specs or ["SIM"]


def cmd_info(args) -> int:
    from .runtime.device import open_device
    entries = []
    for spec in ([args.device] if args.device else reachable_specs()):
        dev = open_device(spec)
        try:
            entries.append(device_entry(dev))
        finally:
            dev.close()
    if args.json:
        print(json.dumps(entries))
        return 0
    for e in entries:
        print(f"{e['device']}  ({e['interface']}, {e['family']})")
        br = e.get("bridge")
        if br:                                          # the USB bridge first: the GPU is behind it
            print(f"  bridge          {br.get('chip') or 'unknown chip'} at {br['name'].split()[-1]}, "
                  f"firmware {br.get('firmware') or '?'} ({br.get('product') or 'no product string'})")
            print(f"  USB link        {br.get('usb_speed') or 'speed unknown'}"
                  + (f", USB {br['usb_version']}" if br.get("usb_version") else ""))
            print(f"  PCIe link       {br.get('pcie_link')}; behind it the GPU {br.get('gpu')}")
        print(f"  arch            {e['arch']}")
        print(f"  board           {e['board']}")
        print(f"  compute units   {e['compute_units']} on {e['num_xcc']} XCC(s), {e['shader_engines']} shader engines, "
              f"{e['simds_per_cu']} SIMDs and {e['max_waves_per_cu']} waves per CU")
        print(f"  wave size       {e['wave_size']}")
        print(f"  LDS             {e['lds_bytes'] >> 10} KiB per workgroup")
        print(f"  engine clock    {e['engine_clock_mhz']} MHz peak"
              + (f", {e['game_clock_mhz']} MHz game" if e.get("game_clock_mhz") else ""))
        m = e["memory"]
        print(f"  VRAM            {e['vram_bytes'] >> 20} MiB {m['type']}, {m['gbps']:g} Gbps x {m['bus_bits']} bits "
              f"= {m['bandwidth_gbs']:g} GB/s")
        if e.get("bars"):
            print("  BARs            " + ", ".join(f"{k} {v >> 10} KiB" for k, v in e["bars"].items())
                  + (" (small BAR)" if e.get("small_bar") else ""))
        print("  IP versions     " + ", ".join(f"{k} {v}" for k, v in e["ip_versions"].items()))
        if e.get("clocks"):
            print("  clocks          " + ", ".join(f"{k} {v} MHz" for k, v in e["clocks"].items()))
        if e.get("power_limit_w") is not None:
            print(f"  power limit     {e['power_limit_w']} W")
        if e.get("boot"):
            print(f"  boot            {e['boot_reason']}" + (" (after a mode1 reset)" if e.get("mode1_reset") else "")
                  + (f", {e['boot_seconds'] * 1000:.1f} ms" if e.get("boot_seconds") is not None else ""))
        for f in e["firmware"]:
            print(f"  firmware        {f['file']} v{f['version']:#x} sha256 {f['sha256'][:16]}…"
                  + (" (stand-in)" if f.get("standin") else ""))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The `amdq` argument parser (every subcommand; every positional argument has help)."""
    from . import __version__
    ap = argparse.ArgumentParser(prog="amdq", description="Userspace driver and runtime for AMD GPUs.")
    ap.add_argument("--version", action="version", version=f"amdq {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("inspect", help="list the kernels of a code object with descriptor fields and arguments")
    p.add_argument("file", help="code object (.o, .hsaco), or an offload bundle or HIP library (lists its entries)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(fn=cmd_inspect)
    p = sub.add_parser("disasm", help="disassemble the kernels of a code object (or raw code with --arch); branch "
                                      "targets as labels")
    p.add_argument("file", help="code object (.o, .hsaco), offload bundle or HIP fat binary, or a raw binary of "
                                "instructions with --arch")
    p.add_argument("--kernel", help="only this kernel")
    p.add_argument("--target", help="of a bundle, only the entry a device of this target runs (default: every entry)")
    p.add_argument("--arch", help="the file is raw machine code of this target (gfx1100) or ISA family (rdna3)")
    p.add_argument("--base", default="0", help="address of the first instruction of raw code (default 0)")
    p.add_argument("--wave64", action="store_true", help="raw code runs in wave64 (default: the target's wave size)")
    p.add_argument("--no-labels", action="store_true", help="branch targets as numbers (llvm-objdump's raw form), not labels")
    p.set_defaults(fn=cmd_disasm)
    p = sub.add_parser("decode", help="decode rings and indirect buffers (PM4, SDMA, AQL) of a dump, or raw dwords")
    p.add_argument("file", nargs="?", help="a dump (amdq.tools.decode.dump_queues(dev, path)), or raw packets with --kind")
    p.add_argument("--run", metavar="SCRIPT", help="run a Python script and decode the queues of every device it opens "
                                                   "(each as it is closed, or at the script's end)")
    p.add_argument("script_args", nargs="*", help="with --run: the script's arguments (after --)")
    p.add_argument("--save", metavar="DUMP", help="with --run: also write the dump(s) (DUMP, or DUMP.<n> for several devices)")
    p.add_argument("--kind", choices=("pm4", "sdma", "aql"), help="the file is raw dwords / AQL packets of this kind")
    p.add_argument("--arch", help="target of raw packets (register names, packet forms), e.g. gfx1100")
    p.add_argument("--gen", type=int, help="instead of --arch: GFX major (pm4, aql: 9, 11, 12) or SDMA major (sdma: 4, 6, 7)")
    p.set_defaults(fn=cmd_decode)
    p = sub.add_parser("run", help="run one kernel of a code object with arguments from the command line")
    p.add_argument("file", help="code object (.o, .hsaco) or LLVM IR (.ll)")
    p.add_argument("--kernel", help="kernel name (default: the only kernel)")
    p.add_argument("--arg", action="append", default=[], metavar="VALUE",
                   help="one per explicit argument, in order: a number (typed by the metadata; TYPE:VALUE as f32:1.5, "
                        "i64:-3), a buffer from FILE.npy, size:NBYTES, zeros:N:DTYPE, or lds:NBYTES")
    p.add_argument("--grid", required=True, help="workgroups: X[,Y[,Z]]")
    p.add_argument("--block", required=True, help="work-items per workgroup: X[,Y[,Z]]")
    p.add_argument("--device", default=None, help="device spec, e.g. SIM:gfx1201 (default: DEV or AMD)")
    p.add_argument("--out", default=None, metavar="DIR", help="write every buffer argument after the run as DIR/<n>_<name>.npy")
    p.add_argument("--json", action="store_true", help="print the launch record as JSON")
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("demo", help="run a small model on the default device, validate it, time every stage")
    p.add_argument("--device", default=None, help="device spec, e.g. SIM:gfx1201 (default: DEV or AMD)")
    p.add_argument("--trace", default=None, metavar="FILE", help="write a Chrome/Perfetto trace of the launches")
    p.set_defaults(fn=cmd_demo)
    p = sub.add_parser("info", help="every reachable GPU (or --device): interface, arch, IP versions, CUs, memory, "
                                    "BARs, firmware, the boot path taken")
    p.add_argument("--device", default=None, help="device spec, e.g. SIMPCI+AMD:gfx1201 (default: every reachable one)")
    p.add_argument("--json", action="store_true", help="print a JSON list of objects")
    p.set_defaults(fn=cmd_info)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except BrokenPipeError:            # output piped into a pager or head that quit early
        sys.stdout = open(os.devnull, "w")
        return 0
    except (AmdqError, OSError, TypeError, ValueError) as e:
        if os.environ.get("AMDQ_DEBUG"):
            raise
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"amdq {args.cmd}: {type(e).__name__}: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
