"""Remote-address patterns of ``plain_acl.yml``: ``*`` (everyone), an exact address, or
four dotted parts each a number, ``*``, a range ``1-5`` or a list ``{1,2,9}``; trailing
parts may be left out after a ``*`` (``192.168.*``). Ports are ignored."""

from __future__ import annotations

__all__ = ["AddressPattern"]


def _part(text: str) -> frozenset[int] | None:
    """The values one part admits (``None``: any)."""
    if text == "*":
        return None
    if text.startswith("{") and text.endswith("}"):
        return frozenset(int(v) for v in text[1:-1].split(","))
    if "-" in text:
        low, high = (int(v) for v in text.split("-", 1))
        return frozenset(range(low, high + 1))
    return frozenset({int(text)})


class AddressPattern:
    """One pattern; raises ``ValueError`` for one it cannot read."""

    __slots__ = ("_exact", "_parts", "text")

    def __init__(self, text: str) -> None:
        self.text = text = text.strip()
        self._exact: str | None = None
        self._parts: list[frozenset[int] | None] | None = None
        if text == "*" or not text:
            self._parts = [None] * 4 if text else None
            return
        parts = text.split(".")
        if len(parts) == 4 and all(p.isdigit() for p in parts):
            self._exact = text
            return
        if len(parts) < 4:
            if parts[-1] != "*":
                raise ValueError(f"address pattern {text!r}: fewer than four parts")
            parts += ["*"] * (4 - len(parts))
        try:
            self._parts = [_part(p) for p in parts[:4]] if len(parts) == 4 else None
        except ValueError:
            raise ValueError(f"address pattern {text!r} is not understood") from None
        if self._parts is None:
            raise ValueError(f"address pattern {text!r} has more than four parts")

    def matches(self, address: str) -> bool:
        """Whether ``address`` (``host`` or ``host:port``) matches."""
        host = address.rsplit(":", 1)[0] if address.count(":") == 1 else address
        if self._exact is not None:
            return host == self._exact
        if self._parts is None:
            return False
        values = host.split(".")
        if len(values) != 4 or not all(v.isdigit() for v in values):
            return False
        return all(allowed is None or int(v) in allowed
                   for allowed, v in zip(self._parts, values, strict=True))
