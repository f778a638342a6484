"""Console password hashes: scrypt (:func:`hashlib.scrypt`) with a random salt per user,
kept as one text field in the users file.

=========  ==========================================================
part       what
=========  ==========================================================
``scrypt`` the scheme; nothing else is accepted
``ln=N``   log2 of scrypt's cost ``n`` (10..20)
``r=R``    block size (1..32)
``p=P``    parallelism (1..16)
salt       16 bytes or more, base64 without padding
hash       32 bytes, base64 without padding
=========  ==========================================================

joined as ``$scrypt$ln=15,r=8,p=1$<salt>$<hash>`` (the PHC string format). The cost
travels with each hash, so raising :data:`DEFAULT_COST` affects new passwords only and
old hashes keep verifying. Verification compares in constant time.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import re
import secrets

__all__ = ["DEFAULT_COST", "PasswordHash", "PasswordHashError", "hash_password",
           "verify_password"]

#: log2 n, r, p of new hashes: 32 MiB of memory and a noticeable fraction of a second of
#: CPU per check, which is what makes guessing slow.
DEFAULT_COST = (15, 8, 1)
SALT_BYTES = 16
#: The most memory one check may take (scrypt needs 128 * n * r bytes).
MAX_MEMORY = 256 << 20
HASH_BYTES = 32
_LIMITS = {"ln": (10, 20), "r": (1, 32), "p": (1, 16)}
_FORMAT = re.compile(r"\$scrypt\$ln=(\d+),r=(\d+),p=(\d+)\$([A-Za-z0-9+/]+)\$([A-Za-z0-9+/]+)")


class PasswordHashError(ValueError):
    """A stored hash that is not one this module writes."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"not a console password hash: {reason}")
        self.reason = reason


@dataclasses.dataclass(frozen=True, slots=True)
class PasswordHash:
    log2_n: int
    r: int
    p: int
    salt: bytes
    digest: bytes

    def __post_init__(self) -> None:
        for name, value in (("ln", self.log2_n), ("r", self.r), ("p", self.p)):
            low, high = _LIMITS[name]
            if not low <= value <= high:
                raise PasswordHashError(f"{name}={value} is outside {low}..{high}")
        if 128 * (1 << self.log2_n) * self.r > MAX_MEMORY:
            raise PasswordHashError(f"ln={self.log2_n},r={self.r} needs more than "
                                    f"{MAX_MEMORY >> 20} MiB per check")
        if len(self.salt) < SALT_BYTES:
            raise PasswordHashError(f"the salt has {len(self.salt)} bytes, fewer than "
                                    f"{SALT_BYTES}")
        if len(self.digest) != HASH_BYTES:
            raise PasswordHashError(f"the hash has {len(self.digest)} bytes, not {HASH_BYTES}")

    def encode(self) -> str:
        return (f"$scrypt$ln={self.log2_n},r={self.r},p={self.p}"
                f"${_b64(self.salt)}${_b64(self.digest)}")

    @classmethod
    def parse(cls, text: str) -> PasswordHash:
        match = _FORMAT.fullmatch(text)
        if match is None:
            raise PasswordHashError("expected $scrypt$ln=N,r=R,p=P$<salt>$<hash>")
        ln, r, p, salt, digest = match.groups()
        if max(len(ln), len(r), len(p)) > 2:
            raise PasswordHashError("cost parameters have at most two digits")
        return cls(int(ln), int(r), int(p), _unb64(salt), _unb64(digest))

    def matches(self, password: str) -> bool:
        """Whether ``password`` hashes to this (constant-time compare)."""
        derived = _derive(password, self.salt, self.log2_n, self.r, self.p)
        return hmac.compare_digest(derived, self.digest)


def _derive(password: str, salt: bytes, log2_n: int, r: int, p: int) -> bytes:
    n = 1 << log2_n
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p,
                          maxmem=MAX_MEMORY + (1 << 20), dklen=HASH_BYTES)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except binascii.Error as exc:
        raise PasswordHashError(f"bad base64: {exc}") from None


def hash_password(password: str, cost: tuple[int, int, int] = DEFAULT_COST) -> str:
    """A new hash of ``password`` with a fresh random salt."""
    if not password:
        raise ValueError("the password must not be empty")
    log2_n, r, p = cost
    salt = secrets.token_bytes(SALT_BYTES)
    return PasswordHash(log2_n, r, p, salt, _derive(password, salt, log2_n, r, p)).encode()


def verify_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches the hash ``stored`` (a malformed hash matches nothing)."""
    try:
        parsed = PasswordHash.parse(stored)
    except PasswordHashError:
        return False
    return parsed.matches(password)
