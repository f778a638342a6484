"""A config field's description is the ``#:`` comment right above it; a field declared
again in a subclass takes the subclass's; a field without one has none."""

from __future__ import annotations

import dataclasses

from tidemq.cli.config_docs import field_docs


@dataclasses.dataclass(frozen=True)
class _Base:
    #: The first line
    #: and the second.
    described: int = 1
    # a plain comment is not a description
    plain: str = ""
    #: Said here, replaced below.
    again: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class _Child(_Base):
    #: The subclass's word.
    again: bool = True
    undescribed: float = 0.0


def test_the_comment_lines_above_a_field_are_its_description() -> None:
    assert field_docs(_Base) == {"described": "The first line and the second.",
                                 "plain": "", "again": "Said here, replaced below."}


def test_a_subclass_has_its_bases_fields_and_its_own_word_for_a_field_it_declares_again(
) -> None:
    assert field_docs(_Child) == {"described": "The first line and the second.",
                                  "plain": "", "again": "The subclass's word.",
                                  "undescribed": ""}
