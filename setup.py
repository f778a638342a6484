"""Only the compiled part of the build; everything else is in pyproject.toml.

``tidemq.formats._crecords`` (the per-message loops of uniform batches) is optional: where
it cannot be compiled (no C compiler, no zlib headers), the install goes on and TideMQ
uses the equivalent numpy code (``tidemq.formats.record.loops``).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("tidemq.formats._crecords", ["src/tidemq/formats/_crecords.c"],
              libraries=["z"], extra_compile_args=["-O2"], optional=True),
])
