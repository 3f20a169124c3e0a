"""Interrupt-handler (IH) facts: the interrupt-vector (IV) ring entry and the ring-size encoding.

Sources: Linux amdgpu `amdgpu_ih.c` (`amdgpu_ih_decode_iv_helper`: a 32-byte entry of 8 dwords, the
pointers in bytes), `amdgpu_irq.h` (`struct amdgpu_iv_entry`, `AMDGPU_IRQ_SRC_DATA_MAX_SIZE_DW`),
`ih_v6_0.c` / `vega20_ih.c` (IH_RB_CNTL.RB_SIZE = log2 of the ring size in dwords, IH_RB_BASE = address >> 8,
IH_RB_BASE_HI = address >> 40, RB_OVERFLOW in IH_RB_WPTR and the restart at wptr + one entry). Client and
source ids are in amdq.hw.am (`soc15_ih_clientid.h`, `soc21_ih_clientid.h`, the ivsrcid headers).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from .layout import Bits

ENTRY_BYTES = 32                   # one IV entry (8 dwords); IH_RB_RPTR/WPTR count bytes
ENTRY_DWORDS = ENTRY_BYTES // 4
SRC_DATA_DWORDS = 4                # AMDGPU_IRQ_SRC_DATA_MAX_SIZE_DW
RB_BASE_SHIFT, RB_BASE_HI_SHIFT = 8, 40

DW0 = Bits("IV_DW0", {"CLIENT_ID": (0, 7), "SOURCE_ID": (8, 15), "RING_ID": (16, 23), "VMID": (24, 27),
                      "VMID_SRC": (31, 31)})
DW2 = Bits("IV_DW2", {"TIMESTAMP_HI": (0, 15), "TIMESTAMP_SRC": (31, 31)})
DW3 = Bits("IV_DW3", {"PASID": (0, 15), "NODE_ID": (16, 23)})
TIMESTAMP_BITS = 48
# (shift, mask) of the fields IVEntry.decode reads, in its order (every interrupt is decoded)
_DECODE = tuple(tuple((b[n].lo, (1 << (b[n].hi - b[n].lo + 1)) - 1) for n in names)
                for b, names in ((DW0, ("CLIENT_ID", "SOURCE_ID", "RING_ID", "VMID", "VMID_SRC")),
                                 (DW2, ("TIMESTAMP_HI", "TIMESTAMP_SRC")), (DW3, ("PASID", "NODE_ID"))))


@dataclass(frozen=True)
class IVEntry:
    """One decoded interrupt vector."""
    client_id: int
    src_id: int
    src_data: tuple[int, ...] = field(default=(0, 0, 0, 0))
    ring_id: int = 0
    vmid: int = 0
    vmid_src: int = 0
    timestamp: int = 0
    timestamp_src: int = 0
    pasid: int = 0
    node_id: int = 0

    def encode(self) -> bytes:
        """The 32 bytes the IH writes into the ring."""
        return pack(self.client_id, self.src_id, self.src_data, self.ring_id, self.vmid, self.vmid_src,
                    self.timestamp, self.timestamp_src, self.pasid, self.node_id)

    @classmethod
    def decode(cls, raw: bytes) -> "IVEntry":
        if len(raw) != ENTRY_BYTES:
            raise ValueError(f"an IV entry is {ENTRY_BYTES} bytes, not {len(raw)}")
        w = struct.unpack("<8I", raw)
        (cl, so, ri, vm, vs), (th, ts), (pa, no) = _DECODE  # the fields of DW0/DW2/DW3, as (shift, mask)
        d0, d2, d3 = w[0], w[2], w[3]
        return cls(d0 >> cl[0] & cl[1], d0 >> so[0] & so[1], w[4:8], d0 >> ri[0] & ri[1], d0 >> vm[0] & vm[1],
                   d0 >> vs[0] & vs[1], w[1] | (d2 >> th[0] & th[1]) << 32, d2 >> ts[0] & ts[1], d3 >> pa[0] & pa[1],
                   d3 >> no[0] & no[1])


def pack(client_id: int, src_id: int, src_data: tuple[int, ...] = (), ring_id: int = 0, vmid: int = 0,
         vmid_src: int = 0, timestamp: int = 0, timestamp_src: int = 0, pasid: int = 0, node_id: int = 0) -> bytes:
    """The 32 bytes of one IV entry (IVEntry.encode; the simulated IH packs its vectors without the record)."""
    data = tuple(src_data) + (0,) * (SRC_DATA_DWORDS - len(src_data))
    if len(data) != SRC_DATA_DWORDS:
        raise ValueError(f"an IV entry carries {SRC_DATA_DWORDS} source-data dwords, not {len(src_data)}")
    ts = timestamp & ((1 << TIMESTAMP_BITS) - 1)
    (cl, so, ri, vm, vs), (th, tsrc), (pa, no) = _DECODE
    if (0 <= client_id <= cl[1] and 0 <= src_id <= so[1] and 0 <= ring_id <= ri[1] and 0 <= vmid <= vm[1]
            and 0 <= vmid_src <= vs[1] and 0 <= timestamp_src <= tsrc[1] and 0 <= pasid <= pa[1]
            and 0 <= node_id <= no[1]):             # every field fits: the words at once
        return struct.pack("<8I", client_id << cl[0] | src_id << so[0] | ring_id << ri[0] | vmid << vm[0]
                           | vmid_src << vs[0], ts & 0xFFFFFFFF, ts >> 32 << th[0] | timestamp_src << tsrc[0],
                           pasid << pa[0] | node_id << no[0], *(d & 0xFFFFFFFF for d in data))
    words = (DW0.encode(CLIENT_ID=client_id, SOURCE_ID=src_id, RING_ID=ring_id, VMID=vmid, VMID_SRC=vmid_src),
             ts & 0xFFFFFFFF,
             DW2.encode(TIMESTAMP_HI=ts >> 32, TIMESTAMP_SRC=timestamp_src),
             DW3.encode(PASID=pasid, NODE_ID=node_id)) + tuple(d & 0xFFFFFFFF for d in data)
    return struct.pack("<8I", *words)


def ids(dword0: int) -> tuple[int, int]:
    """(client id, source id) of an entry from its first dword (what a reader looks at before decoding it)."""
    cl, so = _DECODE[0][0], _DECODE[0][1]
    return dword0 >> cl[0] & cl[1], dword0 >> so[0] & so[1]


def rb_size_field(ring_bytes: int) -> int:
    """IH_RB_CNTL.RB_SIZE for a ring of `ring_bytes` (a power of two): log2 of its size in dwords."""
    dwords = ring_bytes // 4
    if ring_bytes < ENTRY_BYTES * 2 or dwords & (dwords - 1) or ring_bytes % 4:
        raise ValueError(f"an IH ring is a power of two of at least {2 * ENTRY_BYTES} bytes, not {ring_bytes}")
    return dwords.bit_length() - 1


def ring_bytes(rb_size: int) -> int:
    """The ring size (bytes) IH_RB_CNTL.RB_SIZE encodes."""
    return 4 << rb_size
