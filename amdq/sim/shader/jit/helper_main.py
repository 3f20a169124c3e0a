"""The compile helper's process (helper.py): requests on stdin, answers on stdout.

    python -m amdq.sim.shader.jit.helper_main
"""
import os
import sys

from amdq.sim.shader.jit import helper, runtime

if __name__ == "__main__":
    out = os.fdopen(os.dup(1), "wb")    # (the answers' channel: anything else printed goes where stderr goes)
    os.dup2(2, 1)
    try:
        os.nice(helper.NICE)            # (on a busy machine the process it compiles for goes first)
    except OSError:
        pass
    helper.serve(sys.stdin.buffer, out, runtime.region_ir)
