"""What the broker reads from a message's properties to store it: the keys it indexes it
under and whether the producer waits for the flush -- one reading for every send path
(single, walked batch entry, uniform batch, inner batch)."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["index_keys", "user_keys", "wants_flush"]


def user_keys(props: Mapping[str, str]) -> tuple[str, ...]:
    """The KEYS property split on spaces, empty ones dropped."""
    keys = props.get("KEYS")
    return tuple(filter(None, keys.split(" "))) if keys else ()


def index_keys(props: Mapping[str, str]) -> tuple[str, ...]:
    """The index keys of a message: its UNIQ_KEY (when it has one), then its KEYS."""
    uniq = props.get("UNIQ_KEY")
    keys = user_keys(props)
    return (uniq, *keys) if uniq else keys


def wants_flush(props: Mapping[str, str]) -> bool:
    """Whether the producer waits for the flush (WAIT, true unless "false" in any case)."""
    return props.get("WAIT", "true").lower() != "false"
