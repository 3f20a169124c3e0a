"""Session-wide test settings: the shader JIT's disk cache goes to a temporary directory, never ~/.cache."""
from __future__ import annotations

import os
import tempfile

os.environ.setdefault("AMDQ_SIM_JIT_CACHE", tempfile.mkdtemp(prefix="amdq-jit-test-"))
