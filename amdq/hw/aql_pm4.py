"""The AMD vendor-specific AQL packet that carries PM4 work: a PM4 INDIRECT_BUFFER command in an AQL slot.

Source: ROCr's public header amd_aql_pm4_ib_packet.h (aqlprofile): header u16 (type VENDOR_SPECIFIC),
pm4_ib_format u16 = 1 (its low byte is the AmdFormat of hsa_amd_vendor_packet_header_t), pm4_ib_command[4]
= one PM4 INDIRECT_BUFFER packet, dw_count_remain = 10 (dwords of the slot that follow it), reserved[8],
completion_signal. Not recorded in shared/facts/hsa.json, so it lives here rather than in the generated
aql.py.
"""
from __future__ import annotations

from .aql import hsa_signal_t
from .layout import Array, Struct

AMD_AQL_FORMAT_PM4_IB = 1
PM4_IB_DW_COUNT_REMAIN = 10

amd_aql_pm4_ib_packet_t = Struct('amd_aql_pm4_ib_packet_t', 64, [
    ('header', 0, 'u16'),
    ('pm4_ib_format', 2, 'u16'),
    ('pm4_ib_command', 4, Array('u32', 4)),
    ('dw_count_remain', 20, 'u32'),
    ('reserved', 24, Array('u32', 8)),
    ('completion_signal', 56, hsa_signal_t),
])
PM4_IB = amd_aql_pm4_ib_packet_t
