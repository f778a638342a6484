"""Header serializations (docs/reference/remoting.md §1.3 and §1.4). Sans-IO.

JSON (type 0): a UTF-8 object with ``code``, ``language`` (a name), ``version``,
``opaque``, ``flag``, optional ``remark`` and ``extFields`` (string map; numbers and
booleans from other clients are turned into text). Written with sorted keys, no nulls.

ROCKETMQ (type 1), big-endian:

======  ====  ==================================================
offset  size  field
======  ====  ==================================================
0       2     code (signed short)
2       1     language (LanguageCode ordinal)
3       2     version (short)
5       4     opaque
9       4     flag
13      4     R, remark length (0 = none)
17      R     remark, UTF-8
17+R    4     E, ext block length (0 = none)
21+R    E     entries: key length (short), key, value length (int), value
======  ====  ==================================================
"""

from __future__ import annotations

import struct
from typing import Annotated, Any, cast

import msgspec

from tidemq.codec.command import LanguageCode, PlainText, RemotingCommand, SerializeType
from tidemq.codec.schema import INT32, parse_java_int
from tidemq.errors import LocalProtocolError, RemoteProtocolError
from tidemq.formats.record.native import compiled

__all__ = ["decode_header", "decode_json_header", "encode_header", "py_encode_json"]

_FIXED = struct.Struct(
    ">"
    "h"  # code
    "B"  # language
    "h"  # version
    "i"  # opaque
    "i"  # flag
)
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_FOUR_INTS = struct.Struct("=4i")
_INT32_MIN, _INT32_MAX = INT32
_LANGUAGE_BY_CODE = {int(lang): lang.name for lang in LanguageCode}
#: What a :class:`PlainText` value is put between (``value.join(_QUOTES)``).
_QUOTES = ('"', '"')
# The two serializations read once: an attribute of an enum class goes through the enum
# type's ``__getattr__`` hook (Python 3.11), several times slower than a global.
_JSON, _ROCKETMQ = SerializeType.JSON, SerializeType.ROCKETMQ


def _plain_json(value: object) -> msgspec.Raw:
    """The JSON text of a :class:`PlainText` value: its characters between quotes, none
    of them needing an escape."""
    if type(value) is PlainText:  # one join: a format would copy the str subclass first
        return msgspec.Raw(value.join(_QUOTES))
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")


_json_decoder = msgspec.json.Decoder()
_json_encoder = msgspec.json.Encoder(order="sorted", enc_hook=_plain_json)


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return msgspec.json.encode(value).decode()


def _as_int(obj: dict[str, Any], key: str, default: int = 0) -> int:
    """A 32-bit int member; Java's header parser fails on anything else."""
    value = obj.get(key, default)
    if value is None:
        return default
    if isinstance(value, str):
        parsed = parse_java_int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        parsed = value if _INT32_MIN <= value <= _INT32_MAX else None
    else:
        parsed = None
    if parsed is None:
        raise RemoteProtocolError(f"header field {key!r} is not a 32-bit integer: {value!r}")
    return parsed


def _language_name(value: Any) -> str:
    """The sender's language name; ordinals are mapped, anything unknown is OTHER."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and value in _LANGUAGE_BY_CODE:
        return _LANGUAGE_BY_CODE[value]
    return "OTHER"


_Int32 = Annotated[int, msgspec.Meta(ge=_INT32_MIN, le=_INT32_MAX)]


class _TypedJsonHeader(msgspec.Struct):
    """The shape nearly every peer sends: decoded and range-checked by msgspec in one C
    pass."""

    code: _Int32
    opaque: _Int32 = 0
    flag: _Int32 = 0
    language: str = "JAVA"
    version: _Int32 = 0
    remark: str | None = None
    extFields: dict[str, str] | None = None  # noqa: N815 - the wire name


_typed_decoder = msgspec.json.Decoder(_TypedJsonHeader)


def decode_json_header(data: bytes | memoryview) -> RemotingCommand:
    """A JSON header (``data`` may be a view: nothing decoded refers to it). Typed fast
    path first; anything unusual (numbers as ext values, ordinals for the language,
    strings for ints) goes through the lenient generic path below."""
    try:
        h = _typed_decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # and out of range
        return _decode_json_lenient(data)
    # Positional: a dataclass's __init__ matches keywords at a cost each.
    return RemotingCommand(h.code, h.opaque, h.flag, h.language, h.version, h.remark,
                           h.extFields or {}, b"", None, _JSON)


def _decode_json_lenient(data: bytes | memoryview) -> RemotingCommand:
    try:
        obj = _json_decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise RemoteProtocolError(f"undecodable JSON header: {exc}") from None
    except RecursionError:
        raise RemoteProtocolError("JSON header nests too deeply") from None
    if not isinstance(obj, dict):
        raise RemoteProtocolError("JSON header is not an object")
    if "code" not in obj:
        raise RemoteProtocolError("JSON header has no 'code'")
    ext_raw = obj.get("extFields") or {}
    if not isinstance(ext_raw, dict):
        raise RemoteProtocolError("'extFields' is not an object")
    ext: dict[str, str] = {}
    for k, v in ext_raw.items():
        text = _as_text(v)
        if text is not None:
            ext[str(k)] = text
    language = _language_name(obj.get("language", "JAVA"))
    remark = obj.get("remark")
    return RemotingCommand(
        code=_as_int(obj, "code"),
        opaque=_as_int(obj, "opaque"),
        flag=_as_int(obj, "flag"),
        language=language,
        version=_as_int(obj, "version"),
        remark=None if remark is None else str(remark),
        ext_fields=ext,
        serialize_type=_JSON,
    )


def _decode_binary(data: bytes) -> RemotingCommand:
    try:
        code, lang, version, opaque, flag = _FIXED.unpack_from(data, 0)
        pos = _FIXED.size
        (rlen,) = _I32.unpack_from(data, pos)
        pos += 4
        if rlen < 0 or pos + rlen > len(data):
            raise RemoteProtocolError(f"remark length {rlen} overruns the header")
        remark = data[pos : pos + rlen].decode("utf-8") if rlen else None
        pos += rlen
        (elen,) = _I32.unpack_from(data, pos)
        pos += 4
        if elen < 0 or pos + elen != len(data):
            raise RemoteProtocolError(f"ext block length {elen} does not match the header")
        ext: dict[str, str] = {}
        end = pos + elen
        while pos < end:
            (klen,) = _I16.unpack_from(data, pos)
            pos += 2
            if klen < 0 or pos + klen > end:
                raise RemoteProtocolError("ext key overruns the header")
            key = data[pos : pos + klen].decode("utf-8")
            pos += klen
            (vlen,) = _I32.unpack_from(data, pos)
            pos += 4
            if vlen < 0 or pos + vlen > end:
                raise RemoteProtocolError("ext value overruns the header")
            if klen and vlen:  # a zero-length string decodes as absent (§1.4)
                ext[key] = data[pos : pos + vlen].decode("utf-8")
            pos += vlen
    except struct.error:
        raise RemoteProtocolError("truncated ROCKETMQ header") from None
    except UnicodeDecodeError:
        raise RemoteProtocolError("ROCKETMQ header text is not UTF-8") from None
    language = _language_name(lang)
    return RemotingCommand(
        code=code, opaque=opaque, flag=flag, language=language, version=version,
        remark=remark, ext_fields=ext, serialize_type=_ROCKETMQ,
    )


def decode_header(data: bytes, stype: SerializeType) -> RemotingCommand:
    """Decode a header; the returned command has an empty body."""
    if stype is _JSON:
        return decode_json_header(data)
    return _decode_binary(data)


def _check_ints(cmd: RemotingCommand) -> None:
    try:  # one C call range-checks the four (struct refuses what does not fit)
        _FOUR_INTS.pack(cmd.code, cmd.opaque, cmd.flag, cmd.version)
        return
    except struct.error:
        pass
    for name in ("code", "opaque", "flag", "version"):
        value = getattr(cmd, name)
        if not _INT32_MIN <= value <= _INT32_MAX:
            raise LocalProtocolError(f"{name} {value} does not fit a 32-bit int")


def _encode_binary(cmd: RemotingCommand) -> bytes:
    if not -0x8000 <= cmd.code <= 0x7FFF:
        raise LocalProtocolError(f"code {cmd.code} does not fit the ROCKETMQ header")
    try:
        lang = LanguageCode[cmd.language]
    except KeyError:
        lang = LanguageCode.OTHER
    remark = (cmd.remark or "").encode("utf-8")
    parts = [
        _FIXED.pack(cmd.code, int(lang), cmd.version & 0x7FFF, cmd.opaque, cmd.flag),
        _I32.pack(len(remark)),
        remark,
    ]
    ext = bytearray()
    for key, value in cmd.ext_fields.items():
        k = key.encode("utf-8")
        v = value.encode("utf-8")
        if len(k) > 0x7FFF:
            raise LocalProtocolError(f"ext key of {len(k)} bytes does not fit a short length")
        ext += _I16.pack(len(k)) + k + _I32.pack(len(v)) + v
    parts.append(_I32.pack(len(ext)))
    parts.append(bytes(ext))
    return b"".join(parts)


_compiled_json = compiled("json_header")


def encode_header(cmd: RemotingCommand) -> bytes:
    """Encode the header in ``cmd.serialize_type`` (the request's, for responses).

    A JSON header is written by the compiled module when it is built and the command
    holds what it writes (ints within 32 bits, ``str`` texts, a ``dict`` of them);
    :func:`py_encode_json` is its twin, and encodes (or refuses) everything else."""
    if _compiled_json is not None and cmd.serialize_type is not _ROCKETMQ:
        head = _compiled_json(cmd.code, cmd.opaque, cmd.flag, cmd.language, cmd.version,
                              cmd.remark, cmd.ext_fields, PlainText)
        if head is not None:
            return cast("bytes", head)
    _check_ints(cmd)
    try:
        if cmd.serialize_type is _ROCKETMQ:
            return _encode_binary(cmd)
        return py_encode_json(cmd)
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(f"header text is not encodable as UTF-8: {exc}") from None


def py_encode_json(cmd: RemotingCommand) -> bytes:
    """The JSON header of ``cmd``: sorted members, no nulls (ints not checked here)."""
    obj: dict[str, Any] = {
        "code": cmd.code,
        "flag": cmd.flag,
        "language": cmd.language,
        "opaque": cmd.opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": cmd.version,
    }
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    if cmd.ext_fields:
        obj["extFields"] = cmd.ext_fields
    return _json_encoder.encode(obj)
