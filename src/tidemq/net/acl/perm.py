"""Resource permissions of RocketMQ's ACL 1.0: the bits and their text form
(``PUB``, ``SUB``, ``PUB|SUB``, ``SUB|PUB``, ``DENY``)."""

from __future__ import annotations

import enum

__all__ = ["Perm", "allows", "parse_perm"]


class Perm(enum.IntFlag):
    NONE = 0
    DENY = 1
    ANY = 2
    PUB = 4
    SUB = 8


def parse_perm(text: str | None) -> Perm:
    """``text`` as a permission; ``None`` or empty is DENY (as upstream). Raises
    ``ValueError`` naming the word it does not know."""
    if not text:
        return Perm.DENY
    perm = Perm.NONE
    for raw in str(text).split("|"):
        word = raw.strip().upper()
        if word not in ("DENY", "ANY", "PUB", "SUB"):
            raise ValueError(f"unknown permission {word!r} (PUB, SUB, PUB|SUB or DENY)")
        perm |= Perm[word]
    return perm


def allows(owned: Perm, needed: Perm) -> bool:
    """Whether ``owned`` grants ``needed``: DENY grants nothing; ANY is PUB or SUB."""
    if owned & Perm.DENY:
        return False
    if needed & Perm.ANY:
        return bool(owned & (Perm.PUB | Perm.SUB))
    return (owned & needed) == needed
