"""RocketMQ ACL 1.0 signatures: a vector computed outside Python (``openssl dgst -sha1
-hmac``), the content rule, and sign/verify over arbitrary requests."""

from __future__ import annotations

import hashlib
import hmac
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.codec import signature
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.signature import (
    LEGACY_SKIPPED_KEY,
    Credentials,
    SigningKey,
    content_of,
    sign,
    signature_of,
    verify,
)


def test_vector_from_openssl() -> None:
    # printf 'akGThi' | openssl dgst -sha1 -hmac 'secret12' -binary | base64
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "T", "a": "G"}, b"hi")
    sign(cmd, "ak", "secret12")
    assert cmd.ext_fields["AccessKey"] == "ak"
    assert cmd.ext_fields["Signature"] == "Y44Jv8lmMj35eGAON8gSBnWQcG8="


def test_content_is_values_by_key_then_body_without_the_signature() -> None:
    # Keys in Java String order: upper case before lower case.
    fields = {"b": "2", "Signature": "x", "a": "1", "AccessKey": "K", "Z": "0"}
    assert content_of(fields, b"body") == b"K012body"


def test_legacy_clients_left_the_unique_key_query_out() -> None:
    fields = {"topic": "T", LEGACY_SKIPPED_KEY: "false", "AccessKey": "ak"}
    legacy = RemotingCommand.request(RequestCode.QUERY_MESSAGE, dict(fields))
    content = content_of(fields, b"", skip=frozenset({LEGACY_SKIPPED_KEY}))
    legacy.ext_fields["Signature"] = signature_of(content, "secret12")
    assert verify(legacy, "secret12")
    assert not verify(legacy, "secret13")


def test_credentials_never_show_their_secret() -> None:
    assert "secret12" not in repr(Credentials("ak", "secret12"))


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@given(st.dictionaries(_text, _text, max_size=6), st.binary(max_size=64),
       _text.filter(bool), st.data())
def test_signed_requests_verify_and_any_change_fails(
        fields: dict[str, str], body: bytes, secret: str, data: st.DataObject) -> None:
    fields.pop("Signature", None)
    fields.pop(LEGACY_SKIPPED_KEY, None)
    cmd = sign(RemotingCommand.request(10, dict(fields), body), "ak", secret)
    assert verify(cmd, secret)
    assert not verify(cmd, secret + "x")
    tampered = RemotingCommand.request(10, dict(cmd.ext_fields), body + b"!")
    assert not verify(tampered, secret)
    key = data.draw(st.sampled_from(sorted(cmd.ext_fields)))
    if key != "Signature":
        changed = dict(cmd.ext_fields)
        changed[key] += "!"
        assert not verify(RemotingCommand.request(10, changed, body), secret)


@given(st.dictionaries(_text, _text, max_size=4), st.lists(st.binary(max_size=16), max_size=5))
def test_a_body_in_parts_signs_as_its_content(fields: dict[str, str], parts: list[bytes]
                                              ) -> None:
    fields.pop("Signature", None)
    cmd = RemotingCommand.request(10, dict(fields))
    cmd.body_parts = [memoryview(p) for p in parts]
    sign(cmd, "ak", "secret12")
    whole = b"".join(parts)
    assert cmd.ext_fields["Signature"] == signature_of(content_of(cmd.ext_fields, whole),
                                                       "secret12")
    assert verify(RemotingCommand.request(10, dict(cmd.ext_fields), whole), "secret12")


def test_keys_sort_as_java_strings_beyond_ascii() -> None:
    # U+FF21 sorts before U+1F600 by code point, after it in UTF-16 (whose surrogate
    # pair starts with 0xD83D), which is Java's order.
    fields = {"\U0001F600": "emoji", "\uFF21": "fullwidth", "a": "ascii"}
    assert content_of(fields, b"") == b"asciiemojifullwidth"


@given(st.dictionaries(_text, _text, max_size=8), st.lists(st.binary(max_size=300), max_size=4),
       st.text(max_size=80).filter(bool), st.booleans())
def test_the_fast_signature_is_the_plain_hmac_of_the_content(
        fields: dict[str, str], parts: list[bytes], secret: str, legacy: bool) -> None:
    # SigningKey keys the HMAC once, feeds the content in pieces and copies no body; the
    # wire bytes must be exactly the one-shot HMAC over content_of (keys longer than
    # SHA-1's block are hashed first by HMAC: the secrets drawn go past 64 bytes).
    skip = frozenset({LEGACY_SKIPPED_KEY}) if legacy else frozenset()
    cmd = RemotingCommand.request(10, dict(fields))
    cmd.body_parts = parts
    whole = RemotingCommand.request(10, dict(fields), b"".join(parts))
    key = SigningKey(secret)
    plain = signature_of(content_of(fields, b"".join(parts), skip=skip), secret)
    assert key.signature(cmd, skip).decode() == plain
    assert key.signature(whole, skip).decode() == plain
    assert key.signature(whole, skip) == key.signature(whole, skip)  # the key is reusable


@given(st.lists(st.tuples(_text, _text), max_size=8, unique_by=lambda kv: kv[0]),
       st.randoms(use_true_random=False), st.booleans())
def test_the_values_in_a_remembered_key_order_are_the_sorted_ones(
        items: list[tuple[str, str]], rng: random.Random, full: bool) -> None:
    # The signing order is remembered per key set in its dict's order: the same keys in
    # another order, with other values, or with the memory full, still give the plain bytes.
    if full:
        for i in range(signature.MAX_KEY_ORDERS):
            signature._signed_values({f"k{i}": ""})
    first = dict(items)
    assert signature._signed_values(first) == signature._values(first, frozenset())
    rng.shuffle(items)
    again = {k: v + "!" for k, v in items}
    assert signature._signed_values(again) == signature._values(again, frozenset())
    assert signature._signed_values(first) == signature._values(first, frozenset())
    assert len(signature._orders) <= signature.MAX_KEY_ORDERS


def test_without_openssls_hmac_object_the_wrapper_signs_the_same(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A digest given as a Python function makes hmac compute in Python: no OpenSSL
    # object behind the wrapper, which SigningKey then uses itself.
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "T", "a": "G"}, b"hi")
    fast = SigningKey("secret12").signature(cmd)
    assert fast.decode() == signature_of(content_of(cmd.ext_fields, cmd.body), "secret12")
    monkeypatch.setattr(signature.hmac, "new", lambda key, digestmod: hmac.HMAC(
        key, digestmod=lambda data=b"": hashlib.sha1(data)))
    plain = SigningKey("secret12")
    assert isinstance(plain._mac, hmac.HMAC)
    assert plain.signature(cmd) == fast


def test_a_key_set_no_client_sends_is_signed_right_and_not_kept() -> None:
    fields = {f"key{i}-" + "x" * 200: str(i) for i in range(20)}
    assert signature._signed_values(fields) == signature._values(fields, frozenset())
    assert tuple(fields) not in signature._orders
