"""The one reading of index keys and WAIT against the rule it replaced in every send path:
UNIQ_KEY (when non-empty) then the non-empty KEYS split on single spaces; WAIT is true
unless it says "false" in any case."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidemq.formats.properties import index_keys, user_keys, wants_flush

_TEXT = st.text(st.sampled_from("ab \t\u00e9Xfalse"), max_size=12)
_PROPS = st.dictionaries(st.sampled_from(["UNIQ_KEY", "KEYS", "WAIT", "TAGS"]), _TEXT)


@given(_PROPS)
def test_index_keys_are_uniq_then_keys(props: dict[str, str]) -> None:
    uniq = props.get("UNIQ_KEY")
    split = [k for k in props.get("KEYS", "").split(" ") if k]
    assert user_keys(props) == tuple(split)
    assert index_keys(props) == ((uniq,) if uniq else ()) + tuple(split)


@given(_PROPS)
def test_wait_is_true_unless_false(props: dict[str, str]) -> None:
    assert wants_flush(props) is (props.get("WAIT", "true").lower() != "false")


def test_examples() -> None:
    assert index_keys({"UNIQ_KEY": "U", "KEYS": " a  b "}) == ("U", "a", "b")
    assert index_keys({"UNIQ_KEY": "", "KEYS": "a"}) == ("a",)
    assert wants_flush({"WAIT": "FALSE"}) is False and wants_flush({}) is True
