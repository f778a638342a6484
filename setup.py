"""Only the compiled part of the build; everything else is in pyproject.toml.

``tidemq.formats._crecords`` (the per-message loops of uniform batches) is optional: where
it cannot be compiled (no C compiler, no zlib headers), the install goes on and TideMQ
uses the equivalent numpy code (``tidemq.formats.record.loops``).

The module carries the digest of the source it was built from
(``tidemq.formats.record.native.source_digest``): a checkout whose source moved on since
its last build uses the twins and says how to rebuild, rather than stale compiled code.
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "src/tidemq/formats/_crecords.c"
DIGEST = hashlib.sha256(Path(SOURCE).read_bytes()).hexdigest()[:16]

setup(ext_modules=[
    Extension("tidemq.formats._crecords", [SOURCE], libraries=["z"],
              define_macros=[("TIDEMQ_SOURCE_DIGEST", f'"{DIGEST}"')],
              extra_compile_args=["-O2"], optional=True),
])
