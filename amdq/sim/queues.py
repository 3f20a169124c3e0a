"""Hardware queues other than PM4 compute that a CREATE_QUEUE can ask for: AQL compute and SDMA."""
from __future__ import annotations

import errno

from ..hw import kfd as K


def make_queue(gpu, vmid: int, qtype: int, args: dict):
    """The engine for a KFD queue type; `args` are the fields of kfd_ioctl_create_queue_args."""
    if qtype == K.KFD_IOC_QUEUE_TYPE_COMPUTE_AQL:
        from .aql import AQLQueue
        return AQLQueue(gpu, vmid, args)
    if qtype in (K.KFD_IOC_QUEUE_TYPE_SDMA, K.KFD_IOC_QUEUE_TYPE_SDMA_XGMI, K.KFD_IOC_QUEUE_TYPE_SDMA_BY_ENG_ID):
        from .sdma import SDMAQueue
        return SDMAQueue(gpu, vmid, args)
    raise OSError(errno.EINVAL, f"queue type {qtype} is not supported by the simulated driver")
