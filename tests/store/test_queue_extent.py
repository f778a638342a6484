"""The rule that decides how much of a queue's files a start trusts."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tidemq.store.queue_extent import CHECKED_FILES, assess, nonzero_after

SIZE = 100


def _assess(wrote: list[int], dirty_last: bool = False, first: int = 0,
            edges_look_valid: bool = False) -> tuple[str, tuple[int, ...], str]:
    files = [(first + i * SIZE, SIZE) for i in range(len(wrote))]
    ext = assess(files, SIZE, lambda k: wrote[k], keep_one_empty=True,
                 edges_valid=lambda k: edges_look_valid or wrote[k] == SIZE,
                 nonzero_after=lambda k, pos: dirty_last)
    return ext.doubt, ext.wrote, ext.short


@given(st.lists(st.sampled_from([0, 40, SIZE]), min_size=1, max_size=8), st.booleans())
def test_a_queue_is_whole_in_doubt_or_cut_short_never_two_at_once(
        wrote: list[int], dirty: bool) -> None:
    doubt, kept, short = _assess(wrote, dirty, first=SIZE)
    if doubt:
        assert kept == () and short == ""
        return
    # what is kept is a run of full files and then the last one's valid entries
    assert all(w == SIZE for w in kept[:-1])
    assert list(kept) == wrote[: len(kept)]
    if short:
        # the later entries are gone while earlier ones stay
        assert any(kept)
        assert len(kept) < len(wrote) or (dirty and 0 < kept[-1] < SIZE)


def test_trailing_files_without_entries_after_entries_cut_the_queue_short() -> None:
    assert _assess([SIZE, SIZE, 0]) == ("", (SIZE, SIZE), "its last 1 file(s) hold no entry")
    assert _assess([SIZE, 0, 0])[2] == "its last 2 file(s) hold no entry"
    # a lone later file without entries is a queue that rolled over: nothing lost
    assert _assess([0], first=SIZE) == ("", (0,), "")
    # a partly written last file is the normal end, unless entries follow invalid ones
    assert _assess([SIZE, 40]) == ("", (SIZE, 40), "")
    assert _assess([SIZE, 40], dirty_last=True)[2] == (
        "its last file holds entries after invalid ones")


def test_an_earlier_file_with_invalid_edges_is_read_and_puts_the_queue_in_doubt() -> None:
    wrote = [SIZE] * (CHECKED_FILES + 3)
    wrote[1] = 0
    assert _assess(wrote)[0] == "invalid entries before valid ones"
    # not read whole, an earlier file is trusted when its first and last entries are
    # valid (invalid entries between them are left to verify)
    assert _assess(wrote, edges_look_valid=True) == ("", (SIZE,) * len(wrote), "")
    wrote[1] = SIZE
    assert _assess(wrote) == ("", tuple(wrote), "")


def test_nonzero_after_reads_past_holes(tmp_path: Path) -> None:
    path = tmp_path / "f"
    with path.open("wb") as f:
        f.truncate(1 << 20)
        f.seek(4096 * 100 + 7)
        f.write(b"\x01")
    assert nonzero_after(path, 0)
    assert nonzero_after(path, 4096 * 100 + 7)
    assert not nonzero_after(path, 4096 * 100 + 8)
    assert not nonzero_after(path, 1 << 20)
