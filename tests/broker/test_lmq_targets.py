"""Deciding a batch's LMQ names together gives each message's own answer."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.broker.lmq import batch_lmq_targets, parse_lmq_targets
from tidemq.formats.properties import parse_property_text, property_text_error

MAX_TARGETS = 4

# Names good and bad: the prefix, the character set, the length, repeats and empties.
name = st.one_of(
    st.sampled_from(["%LMQ%a", "%LMQ%b", "%LMQ%c-1", "%LMQ%x|y", "%LMQ%", "plain", "",
                     "%LMQ%a/b", "%LMQ%a b", "%LMQ%" + "n" * 250, "%LMQ%" + "n" * 251]),
    st.text(alphabet="aZ9_|%-", min_size=1, max_size=4).map("%LMQ%".__add__))
value = st.lists(name, min_size=1, max_size=MAX_TARGETS + 1).map(",".join)
other = st.sampled_from(["UNIQ_KEY\x01AB12\x02", "TAGS\x01t\x02", "WAIT\x01true\x02", "",
                         "INNER_MULTI_QUEUE_OFFSET\x017\x02", "XINNER_MULTI_DISPATCH\x01q\x02"])


@st.composite
def fan_out_text(draw: st.DrawFn) -> str:
    """A well-formed property string naming LMQs, its pairs in any order, sometimes the
    dispatch pair twice or only under a longer name, or without its last separator."""
    pairs = [draw(other), f"INNER_MULTI_DISPATCH\x01{draw(value)}\x02", draw(other)]
    if draw(st.integers(0, 9)) == 0:  # only a longer name ending in the key
        pairs[1] = f"XINNER_MULTI_DISPATCH\x01{draw(value)}\x02"
    elif draw(st.booleans()):
        pairs.append(f"INNER_MULTI_DISPATCH\x01{draw(value)}\x02")
    text = "".join(draw(st.permutations(pairs)))
    return text[:-1] if draw(st.booleans()) else text


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(st.one_of(st.none(), fan_out_text()), min_size=1, max_size=6))
def test_batch_answer_is_each_messages_answer(texts: list[str | None]) -> None:
    assert all(t is None or property_text_error(t) is None for t in texts)
    one_by_one = [[] if t is None else _single(t) for t in texts]
    together = batch_lmq_targets(texts, MAX_TARGETS)
    if any(isinstance(answer, str) for answer in one_by_one):
        assert together is None  # a refusal is left to the message's own check
    elif together is not None:
        assert together == one_by_one


def _single(text: str) -> list[str] | str:
    """The send processor's check of one message: the full parse, then the names."""
    props = parse_property_text(text)
    if "INNER_MULTI_QUEUE_OFFSET" in props:
        return "assigned by the broker"
    return parse_lmq_targets(props.get("INNER_MULTI_DISPATCH", ""), "Parent", MAX_TARGETS)


def test_the_usual_batch_is_decided_together() -> None:
    texts: list[str | None] = ["UNIQ_KEY\x01A\x02INNER_MULTI_DISPATCH\x01%LMQ%a,%LMQ%b\x02",
                               None, "INNER_MULTI_DISPATCH\x01%LMQ%a\x02WAIT\x01true\x02"]
    assert batch_lmq_targets(texts, MAX_TARGETS) == [["%LMQ%a", "%LMQ%b"], [], ["%LMQ%a"]]
