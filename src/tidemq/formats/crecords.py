"""The per-message loops of uniform batches, under their former name: they live in
:mod:`tidemq.formats.record.loops` now; import them from there."""

from tidemq.formats.record.loops import (
    NATIVE,
    Buffer,
    fill_records,
    joined_offset_ids,
    offset_ids,
    patch_records,
    py_fill_records,
    py_offset_ids,
    py_patch_records,
    py_uniform_entries,
    uniform_entries,
)

__all__ = [
    "NATIVE",
    "Buffer",
    "fill_records",
    "joined_offset_ids",
    "offset_ids",
    "patch_records",
    "py_fill_records",
    "py_offset_ids",
    "py_patch_records",
    "py_uniform_entries",
    "uniform_entries",
]
