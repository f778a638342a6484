"""Console password hashes: the stored format round-trips, checks are exact, and a
malformed hash is a clear error (never a match)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.console.passwords import (
    HASH_BYTES,
    SALT_BYTES,
    PasswordHash,
    PasswordHashError,
    hash_password,
    verify_password,
)

CHEAP = (10, 1, 1)  # tests only: the format and the checks do not depend on the cost


def test_a_hash_checks_its_own_password_only() -> None:
    stored = hash_password("correct horse", CHEAP)
    assert stored.startswith("$scrypt$ln=10,r=1,p=1$")
    assert verify_password("correct horse", stored)
    for wrong in ("correct hors", "correct horse ", "Correct horse", ""):
        assert not verify_password(wrong, stored)
    assert hash_password("correct horse", CHEAP) != stored  # a fresh salt each time


def test_the_default_cost_is_the_strong_one() -> None:
    parsed = PasswordHash.parse(hash_password("pw"))
    assert (parsed.log2_n, parsed.r, parsed.p) == (15, 8, 1)


@pytest.mark.parametrize(("text", "reason"), [
    ("", "expected $scrypt$"),
    ("$pbkdf2$ln=10,r=1,p=1$AAAAAAAAAAAAAAAAAAAAAA$" + "A" * 43, "expected $scrypt$"),
    ("$scrypt$ln=9,r=1,p=1$AAAAAAAAAAAAAAAAAAAAAA$" + "A" * 43, "ln=9 is outside"),
    ("$scrypt$ln=20,r=32,p=1$AAAAAAAAAAAAAAAAAAAAAA$" + "A" * 43, "MiB per check"),
    ("$scrypt$ln=10,r=1,p=1$AAAA$" + "A" * 43, "the salt has 3 bytes"),
    ("$scrypt$ln=10,r=1,p=1$AAAAAAAAAAAAAAAAAAAAAA$AAAA", "the hash has 3 bytes"),
    ("$scrypt$ln=10,r=1,p=1$AAAAAAAAAAAAAAAAAAAAA$" + "A" * 43, "bad base64"),
    ("$scrypt$ln=010,r=1,p=1$AAAAAAAAAAAAAAAAAAAAAA$" + "A" * 43, "at most two digits"),
])
def test_malformed_hashes_say_what_is_wrong(text: str, reason: str) -> None:
    with pytest.raises(PasswordHashError, match=reason.replace("$", r"\$")):
        PasswordHash.parse(text)
    assert not verify_password("anything", text)


hashes = st.builds(
    PasswordHash, st.integers(10, 17), st.integers(1, 8), st.integers(1, 16),
    st.binary(min_size=SALT_BYTES, max_size=64), st.binary(min_size=HASH_BYTES,
                                                           max_size=HASH_BYTES))


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hashes)
def test_the_format_round_trips(h: PasswordHash) -> None:
    assert PasswordHash.parse(h.encode()) == h


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=120))
def test_any_text_parses_or_is_refused_with_the_error(text: str) -> None:
    try:
        parsed = PasswordHash.parse(text)
    except PasswordHashError as exc:
        assert exc.reason
    else:
        assert PasswordHash.parse(parsed.encode()) == parsed


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(min_size=1, max_size=30), st.text(max_size=30))
def test_verification_is_exact(password: str, other: str) -> None:
    stored = hash_password(password, CHEAP)
    assert verify_password(password, stored)
    assert verify_password(other, stored) == (other == password)
