"""AQL packets: the header encoder, the packet-type lookup and per-generation bit unions, over the
generated tables in amdq.hw.aql_tables (HSA packet structs, amd_queue_t, amd_signal_t, descriptors).
Everything in aql_tables is available from here too."""
from __future__ import annotations

import struct

from .aql_tables import *  # noqa: F401,F403
from .aql_tables import (AGENT_DISPATCH, BARRIER_AND, BARRIER_OR, BARRIER_VALUE, HEADER,
                         HSA_AMD_PACKET_TYPE_BARRIER_VALUE, HSA_FENCE_SCOPE_NONE, HSA_PACKET_TYPE_AGENT_DISPATCH, HSA_PACKET_TYPE_BARRIER_AND,
                         HSA_PACKET_TYPE_BARRIER_OR, HSA_PACKET_TYPE_KERNEL_DISPATCH, HSA_PACKET_TYPE_VENDOR_SPECIFIC,
                         KERNEL_DISPATCH)
from .layout import Bits, Struct

PACKET_TYPES: dict[int, Struct] = {
    HSA_PACKET_TYPE_KERNEL_DISPATCH: KERNEL_DISPATCH, HSA_PACKET_TYPE_AGENT_DISPATCH: AGENT_DISPATCH,
    HSA_PACKET_TYPE_BARRIER_AND: BARRIER_AND, HSA_PACKET_TYPE_BARRIER_OR: BARRIER_OR,
}


def bits_for(table: dict[int, Bits], gfx: int) -> Bits:
    """The entry of a per-generation table (COMPUTE_TMPRING_SIZE, SQ_BUF_RSRC_WORD*) for a GFX major version."""
    return table[max(g for g in table if g <= max(gfx, 9))]


def header(type: int, barrier: int = 0, acquire: int = HSA_FENCE_SCOPE_NONE,
           release: int = HSA_FENCE_SCOPE_NONE) -> int:
    """The 16-bit packet header word."""
    return HEADER.encode(TYPE=type, BARRIER=barrier, ACQUIRE_FENCE_SCOPE=acquire, RELEASE_FENCE_SCOPE=release)


def packet_struct(buf: bytes | bytearray | memoryview, offset: int = 0) -> Struct | None:
    """The Struct of the 64-byte packet at `offset`, by its header type (AMD vendor packets by AmdFormat);
    None for INVALID and unknown types."""
    hdr = int.from_bytes(bytes(buf[offset:offset + 4]), "little")
    t = HEADER.decode(hdr & 0xFFFF)["TYPE"]
    if t == HSA_PACKET_TYPE_VENDOR_SPECIFIC:
        return BARRIER_VALUE if (hdr >> 16) & 0xFF == HSA_AMD_PACKET_TYPE_BARRIER_VALUE else None
    return PACKET_TYPES.get(t)


# The simulated packet processor's read of a dispatch packet and the runtime's kernarg patch, from the same layout.
DISPATCH_READ = KERNEL_DISPATCH.reader("full_header", "workgroup_size_x", "workgroup_size_y", "workgroup_size_z",
                                       "grid_size_x", "grid_size_y", "grid_size_z", "private_segment_size",
                                       "group_segment_size", "kernel_object", "kernarg_address")
KERNARG_ADDRESS = KERNEL_DISPATCH.offsetof("kernarg_address")
COMPLETION_SIGNAL = struct.Struct(f"<{KERNEL_DISPATCH.offsetof('completion_signal')}xQ")   # every packet type
_deps = BARRIER_AND.fields["dep_signal"]
BARRIER_DEPS = struct.Struct(f"<{_deps[0]}x{_deps[1].count}Q")          # BARRIER_AND and BARRIER_OR alike
assert BARRIER_OR.fields["dep_signal"][0] == _deps[0]


def dispatch_packet(block: tuple[int, int, int], grid: tuple[int, int, int], private: int, group: int,
                    kernel_object: int, kernarg: int = 0, hdr: int = 0) -> bytearray:
    """A kernel-dispatch packet for `grid` workgroups of `block` work-items (the packet counts work-items);
    `setup` is the number of dimensions used. The one layout the PM4 dispatch pointer, the AQL queue and
    the simulated packet processor share."""
    items = [g * b for g, b in zip(grid, block)]
    dims = 3 if items[2] > 1 else 2 if items[1] > 1 else 1
    return bytearray(KERNEL_DISPATCH.pack(
        header=hdr, setup=dims, workgroup_size_x=block[0], workgroup_size_y=block[1], workgroup_size_z=block[2],
        grid_size_x=items[0], grid_size_y=items[1], grid_size_z=items[2], private_segment_size=private,
        group_segment_size=group, kernel_object=kernel_object, kernarg_address=kernarg))
