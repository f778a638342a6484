"""The batch protocol (RocketMQ issue #5516): many child requests of one code in one RPC.

Parent request, code ``BATCH_REQUEST`` (20000), ext ``dispatchCode`` = the request code
every child carries (decimal text). The body is the child frames laid end to end, each a
complete remoting frame (docs/reference/remoting.md §1.2) as :mod:`tidemq.codec.frame` encodes it:

======  =====  ===========  ========================================================
offset  size   field        meaning
======  =====  ===========  ========================================================
0       4      length L_1   bytes of child 1 after this field: 4 + H_1 + B_1
4       4      headerWord   high byte: serialization (0 JSON, 1 ROCKETMQ); low 24
                            bits: H_1
8       H_1    header       child 1's header: code = dispatchCode, its own opaque
8+H_1   B_1    body         child 1's body (a message, a batch, or nothing)
4+L_1   ...    child 2      the same layout, up to the end of the parent body
======  =====  ===========  ========================================================

Every child has its own ``opaque``; two children with one opaque make the parent
malformed. :func:`encode_batch_request` numbers the children 1..n.

Parent response: code 0 ``SUCCESS``, remark ``"merged"``, body = one child *response*
frame per child, same layout, **in the order of the request's children**, each carrying
its child's opaque (0 for a child whose header could not be read). Any other parent code
(remark says why, body empty) refuses the parent as a whole: ``dispatchCode`` missing or
not supported, the body not cut into whole frames, more children or bytes than the
receiver allows, duplicate opaques. A malformed *child* -- an unreadable header, a code
other than ``dispatchCode``, the response flag set -- is reported by
:func:`decode_batch_request` in its :class:`BatchChild` and answered by that child's own
error response; its siblings are served.

Zero copy: :func:`encode_children` returns buffers (each child's head, then its body parts
untouched, e.g. the store's memoryviews of pulled records) and never joins them; decoded
children's bodies are memoryview slices of the parent body.

Shared-header pull form (a negotiated TideMQ extension, docs/protocol.md): pulls that
differ only in ``queueId`` / ``queueOffset`` (one consumer's queues of one topic) can go
as parent ext ``childForm=shared``, whose body is one *template* child frame (as above)
followed by 12 bytes per child; child ``i`` (opaque ``i``, from 1) is the template with
its ext ``queueId`` / ``queueOffset`` replaced:

======  =====  ===========  ========================================================
offset  size   field        meaning
======  =====  ===========  ========================================================
0       4+L    template     a complete child frame: code = dispatchCode, empty body
4+L     4      queueId      child 1's queue (big-endian int32)
8+L     8      queueOffset  child 1's offset (big-endian int64)
16+L    ...    child 2      12 bytes each, up to the end of the parent body
======  =====  ===========  ========================================================

Its merged response carries ext ``childForm=shared`` too, and one *compact* entry per
child in the request's order (opaques implied, 1..n):

======  =====  ===========  ========================================================
offset  size   field        meaning
======  =====  ===========  ========================================================
0       1      kind         0: compact (this table); 1: a standard child response
                            frame follows (any response the table cannot express)
1       1      flags        bit 0: the three offsets below are the child's ext
                            (with ``suggestWhichBrokerId`` 0); bit 1: a remark
2       2      R            remark bytes (UTF-8)
4       4      code         the child's response code (int32)
8       4      B            body bytes
12      8      next         ext ``nextBeginOffset`` (int64)
20      8      min          ext ``minOffset``
28      8      max          ext ``maxOffset``
36      R      remark
36+R    B      body         the pulled records
======  =====  ===========  ========================================================

A client offers it by putting ext ``childForms=shared`` on a standard pull parent; a
broker that reads it answers that parent with the same ext. A peer that never asks
never sees either key.

Sans-IO: bytes in, commands out. Garbage raises only
:class:`~tidemq.errors.ProtocolError` subclasses: :class:`BatchFormatError` (a
:class:`~tidemq.errors.RemoteProtocolError`) when decoding, ``LocalProtocolError`` when
asked to encode something the layout cannot hold.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence

from tidemq.codec.command import FLAG_RESPONSE, RemotingCommand, RequestCode, SerializeType
from tidemq.codec.frame import DEFAULT_MAX_FRAME_SIZE, encode_command
from tidemq.codec.header import decode_header
from tidemq.codec.schema import INT32, INT64, parse_java_int
from tidemq.errors import LocalProtocolError, RemoteProtocolError, ResponseCode

__all__ = [
    "CHILD_FORMS_KEY",
    "CHILD_FORM_KEY",
    "DEFAULT_MAX_CHILDREN",
    "DISPATCH_CODE_KEY",
    "MERGED_REMARK",
    "SEND_SHARED_CODES",
    "SEND_SHARED_FORM",
    "SHARED_CODES",
    "SHARED_FORM",
    "BatchChild",
    "BatchFormatError",
    "BatchRequest",
    "batch_response",
    "child_error_response",
    "decode_batch_request",
    "decode_batch_response",
    "decode_children",
    "dispatch_code_of",
    "encode_batch_request",
    "encode_batch_requests",
    "encode_children",
    "encode_shared_request",
    "plain_int",
    "read_child_frame",
    "read_template",
    "shared_position",
]

#: The parent's ext key naming the children's request code.
DISPATCH_CODE_KEY = "dispatchCode"
#: The remark of a merged parent response.
MERGED_REMARK = "merged"
#: Children per parent a receiver accepts unless configured otherwise.
DEFAULT_MAX_CHILDREN = 1000
#: Parent ext naming a child form other than complete frames (module docstring).
CHILD_FORM_KEY = "childForm"
#: Parent ext offering (request) or accepting (merged response) extra child forms.
CHILD_FORMS_KEY = "childForms"
#: The shared-header pull form.
SHARED_FORM = "shared"
#: Request codes the shared form carries.
SHARED_CODES = frozenset({RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE})
#: The shared-header send form (:mod:`tidemq.codec.shared_send`) and the codes it carries.
SEND_SHARED_FORM = "sharedSend"
SEND_SHARED_CODES = frozenset({RequestCode.SEND_MESSAGE_V2})
_QUEUE_ID, _QUEUE_OFFSET = "queueId", "queueOffset"
_POSITION = struct.Struct(">iq")  # a shared-form child: queueId, queueOffset
_COMPACT = struct.Struct(">BBHiIqqq")  # kind, flags, R, code, B, next, min, max
_FULL = b"\x01"  # kind 1: a standard child response frame follows
_OFFSETS, _REMARK = 0x1, 0x2
_OFFSET_KEYS = ("nextBeginOffset", "minOffset", "maxOffset", "suggestWhichBrokerId")

_LEN_WORD = struct.Struct(">ii")
_HEAD = _LEN_WORD.size

Buffer = bytes | bytearray | memoryview


class BatchFormatError(RemoteProtocolError):
    """A parent the peer sent is malformed as a whole; ``reason`` says how."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"malformed batch request: {reason}")
        self.reason = reason


@dataclasses.dataclass(slots=True)
class BatchChild:
    """One child of a decoded parent: its ``command``, or ``None`` and ``error`` when the
    child itself is malformed (it is answered by its own error response). ``opaque`` is
    what the child's response carries: the child's, or 0 when its header is unreadable."""

    command: RemotingCommand | None
    opaque: int = 0
    error: str = ""


@dataclasses.dataclass(slots=True)
class BatchRequest:
    """A decoded parent: the children's request code and the children, in order; for a
    shared-form parent also each child's ``(queueId, queueOffset)``."""

    dispatch_code: int
    children: list[BatchChild]
    positions: list[tuple[int, int]] | None = None


# ---------------------------------------------------------------------------- decoding


def _read_child(view: memoryview, pos: int, end: int) -> tuple[BatchChild, int]:
    """The child frame at ``pos``; raises :class:`BatchFormatError` only when its length
    field does not delimit it (the children after it could not be found)."""
    if end - pos < _HEAD:
        raise BatchFormatError(f"{end - pos} trailing bytes at {pos} are not a child frame")
    length, word = _LEN_WORD.unpack_from(view, pos)
    if length < 4 or length > end - pos - 4:
        raise BatchFormatError(f"child frame at {pos} claims {length} bytes, "
                               f"{end - pos - 4} remain")
    nxt = pos + 4 + length
    ser, hlen = (word >> 24) & 0xFF, word & 0xFFFFFF
    if hlen > length - 4:
        return BatchChild(None, error=f"child header length {hlen} exceeds its frame"), nxt
    try:
        stype = SerializeType(ser)
    except ValueError:
        return BatchChild(None, error=f"child has unknown serialization type {ser}"), nxt
    hstart = pos + _HEAD
    try:
        cmd = decode_header(bytes(view[hstart:hstart + hlen]), stype)
    except RemoteProtocolError as exc:
        return BatchChild(None, error=f"child header unreadable: {exc}"), nxt
    cmd.body = view[hstart + hlen:nxt]
    return BatchChild(cmd, cmd.opaque), nxt


#: The child frame at ``pos`` of ``view`` (up to ``end``) and the position after it.
read_child_frame = _read_child


def read_template(view: memoryview, code: int) -> tuple[RemotingCommand, int]:
    """The template child that opens a shared-form parent body (a request of ``code``
    without a body) and the position after it; raises :class:`BatchFormatError`."""
    template, pos = _read_child(view, 0, len(view))
    tcmd = template.command
    if tcmd is None:
        raise BatchFormatError(f"template child: {template.error}")
    if tcmd.code != code or tcmd.flag & FLAG_RESPONSE or tcmd.body_length():
        raise BatchFormatError("the template child must be a request of dispatchCode "
                               "without a body")
    return tcmd, pos


def decode_children(body: Buffer, *, max_children: int = DEFAULT_MAX_CHILDREN
                    ) -> list[BatchChild]:
    """Cut a parent body into its child frames (layout only; no code or opaque checks)."""
    view = body if isinstance(body, memoryview) else memoryview(body)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    children: list[BatchChild] = []
    pos, end = 0, len(view)
    while pos < end:
        if len(children) >= max_children:
            raise BatchFormatError(f"more than {max_children} children")
        child, pos = _read_child(view, pos, end)
        children.append(child)
    return children


def dispatch_code_of(cmd: RemotingCommand) -> int:
    """The parent's ``dispatchCode``; :class:`BatchFormatError` when missing or not an int."""
    text = cmd.ext_fields.get(DISPATCH_CODE_KEY)
    if text is None:
        raise BatchFormatError(f"ext {DISPATCH_CODE_KEY!r} is missing")
    code = parse_java_int(text)
    if code is None:
        raise BatchFormatError(f"ext {DISPATCH_CODE_KEY!r} is not an int: {text!r}")
    return code


def decode_batch_request(cmd: RemotingCommand, *, max_children: int = DEFAULT_MAX_CHILDREN,
                         max_bytes: int = DEFAULT_MAX_FRAME_SIZE) -> BatchRequest:
    """Decode a parent request (module docstring).

    Raises :class:`BatchFormatError` for a malformed parent; a malformed child comes back
    as a :class:`BatchChild` without a command.
    """
    code = dispatch_code_of(cmd)
    size = cmd.body_length()
    if size > max_bytes:
        raise BatchFormatError(f"body of {size} bytes exceeds the limit of {max_bytes}")
    body = cmd.body if cmd.body_parts is None else cmd.full_body()
    form = cmd.ext_fields.get(CHILD_FORM_KEY)
    if form is not None:
        if form != SHARED_FORM or code not in SHARED_CODES:
            raise BatchFormatError(f"childForm {form!r} is not supported for dispatchCode "
                                   f"{code}")
        return BatchRequest(code, *_shared_children(code, body, max_children))
    children = decode_children(body, max_children=max_children)
    seen: set[int] = set()
    for child in children:
        sub = child.command
        if sub is None:
            continue
        if sub.opaque in seen:
            raise BatchFormatError(f"two children carry opaque {sub.opaque}")
        seen.add(sub.opaque)
        if sub.code != code:
            child.error = f"child code {sub.code} differs from dispatchCode {code}"
        elif sub.flag & FLAG_RESPONSE:
            child.error = "child has the response flag set"
        if child.error:
            child.command = None
    return BatchRequest(code, children)


def _shared_children(code: int, body: Buffer, max_children: int
                     ) -> tuple[list[BatchChild], list[tuple[int, int]]]:
    """The children of a shared-form parent body, each a command of its own, and their
    positions."""
    view = body if isinstance(body, memoryview) else memoryview(body)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    if not len(view):
        return [], []
    tcmd, pos = read_template(view, code)
    rest = len(view) - pos
    if rest % _POSITION.size:
        raise BatchFormatError(f"{rest} bytes after the template are not 12-byte children")
    if rest // _POSITION.size > max_children:
        raise BatchFormatError(f"more than {max_children} children")
    ext0, stype, flag = tcmd.ext_fields, tcmd.serialize_type, tcmd.flag
    language, version = tcmd.language, tcmd.version
    children: list[BatchChild] = []
    positions = list(_POSITION.iter_unpack(view[pos:]))
    for i, (queue_id, offset) in enumerate(positions, 1):
        ext = ext0.copy()
        ext[_QUEUE_ID] = str(queue_id)
        ext[_QUEUE_OFFSET] = str(offset)
        children.append(BatchChild(RemotingCommand(
            code=code, opaque=i, flag=flag, language=language, version=version,
            ext_fields=ext, serialize_type=stype), i))
    return children, positions


def shared_position(cmd: RemotingCommand) -> tuple[int, int] | None:
    """``(queueId, queueOffset)`` of a request the shared form can carry, ``None`` when
    it cannot (a body, or a position that is not a plain in-range integer)."""
    if cmd.body_length() or cmd.body_parts:
        return None
    ext = cmd.ext_fields
    queue_id = plain_int(ext.get(_QUEUE_ID), INT32)
    offset = plain_int(ext.get(_QUEUE_OFFSET), INT64)
    if queue_id is None or offset is None:
        return None
    return queue_id, offset


def plain_int(text: str | None, bounds: tuple[int, int]) -> int | None:
    """``text`` as an int when it is the canonical decimal form (what ``str`` gives)."""
    if text is None or len(text) > 20:
        return None
    if len(text) < 10 and text.isdigit() and text.isascii() and (
            text[0] != "0" or len(text) == 1):
        return int(text)  # the usual case: a small non-negative number, in every bound
    try:
        value = int(text)
    except ValueError:
        return None
    if str(value) != text or not bounds[0] <= value <= bounds[1]:
        return None
    return value


def encode_shared_request(dispatch_code: int, template: RemotingCommand,
                          positions: Sequence[tuple[int, int]]) -> RemotingCommand:
    """A shared-form parent: ``template`` (a request of ``dispatch_code`` without a body;
    its own ``queueId`` / ``queueOffset`` are replaced per child) once, then the
    ``(queueId, queueOffset)`` of each child, which get opaques 1..n."""
    if dispatch_code not in SHARED_CODES or template.code != dispatch_code:
        raise LocalProtocolError(f"the shared form carries pulls, not code {template.code}")
    if template.body_length():
        raise LocalProtocolError("a shared-form template has no body")
    template.opaque = 1
    template.flag &= ~FLAG_RESPONSE
    parts: list[Buffer] = encode_command(template)
    pack = _POSITION.pack
    try:
        parts.append(b"".join([pack(q, o) for q, o in positions]))
    except struct.error as exc:
        raise LocalProtocolError(f"a child position does not fit: {exc}") from None
    parent = _parent(dispatch_code, parts, False)
    parent.ext_fields[CHILD_FORM_KEY] = SHARED_FORM
    return parent


def _compact(responses: Sequence[RemotingCommand]) -> list[Buffer]:
    """The compact entries of a shared-form parent's response (module docstring)."""
    out: list[Buffer] = []
    pack = _COMPACT.pack
    for resp in responses:
        ext = resp.ext_fields
        offsets = _offsets(ext) if ext else (0, 0, 0)
        remark = b"" if resp.remark is None else resp.remark.encode()
        code = resp.code
        if offsets is None or len(remark) > 0xFFFF or not INT32[0] <= code <= INT32[1]:
            out.append(_FULL)
            out.extend(encode_command(resp))
            continue
        flags = (_OFFSETS if ext else 0) | (0 if resp.remark is None else _REMARK)
        parts = resp.body_parts if resp.body_parts is not None else (resp.body,)
        size = sum(len(p) for p in parts)
        out.append(pack(0, flags, len(remark), code, size, *offsets) + remark)
        out.extend(p for p in parts if len(p))
    return out


def _offsets(ext: dict[str, str]) -> tuple[int, int, int] | None:
    """The three offsets when ``ext`` is exactly a pull answer's (canonical numbers,
    broker id 0), else ``None``."""
    if len(ext) != 4 or ext.get("suggestWhichBrokerId") != "0":
        return None
    nxt = plain_int(ext.get("nextBeginOffset"), INT64)
    low = plain_int(ext.get("minOffset"), INT64)
    high = plain_int(ext.get("maxOffset"), INT64)
    if nxt is None or low is None or high is None:
        return None
    return nxt, low, high


def _decode_compact(body: Buffer, count: int) -> list[RemotingCommand]:
    """The child responses of a shared-form parent's merged response."""
    view = body if isinstance(body, memoryview) else memoryview(body)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    out: list[RemotingCommand] = []
    pos, end = 0, len(view)
    unpack = _COMPACT.unpack_from
    size = _COMPACT.size
    while pos < end:
        if len(out) >= count:
            raise BatchFormatError(f"more than {count} child responses")
        opaque = len(out) + 1
        if view[pos] == 1:
            child, pos = _read_child(view, pos + 1, end)
            if child.command is None:
                raise BatchFormatError(f"child response {opaque - 1}: {child.error}")
            out.append(child.command)
            continue
        if end - pos < size:
            raise BatchFormatError(f"{end - pos} trailing bytes are not a child response")
        kind, flags, rlen, code, blen, nxt, low, high = unpack(view, pos)
        start = pos + size
        pos = start + rlen + blen
        if kind != 0 or pos > end:
            raise BatchFormatError(f"child response {opaque - 1} is cut short or of kind "
                                   f"{kind}")
        try:
            remark = str(view[start:start + rlen], "utf-8") if flags & _REMARK else None
        except UnicodeDecodeError:
            raise BatchFormatError(f"child response {opaque - 1}: remark not UTF-8") from None
        ext = {"nextBeginOffset": str(nxt), "minOffset": str(low), "maxOffset": str(high),
               "suggestWhichBrokerId": "0"} if flags & _OFFSETS else {}
        out.append(RemotingCommand(code=code, opaque=opaque, flag=FLAG_RESPONSE,
                                   remark=remark, ext_fields=ext,
                                   body=view[start + rlen:pos]))
    return out


def decode_batch_response(response: RemotingCommand,
                          opaques: Sequence[int]) -> list[RemotingCommand]:
    """The child responses of a merged parent ``response`` to a parent whose children
    carried ``opaques`` (:func:`encode_batch_request` numbers them 1..n), in their order;
    :class:`BatchFormatError` unless there is one response per child carrying that
    child's opaque. Check ``response.code`` first: only SUCCESS is merged."""
    body = response.body if response.body_parts is None else response.full_body()
    if response.ext_fields.get(CHILD_FORM_KEY) == SHARED_FORM:
        answers = _decode_compact(body, len(opaques))
        if len(answers) != len(opaques):
            raise BatchFormatError(f"{len(answers)} child responses for {len(opaques)} "
                                   "children")
        for answer, sent in zip(answers, opaques, strict=True):
            answer.opaque = sent
        return answers
    decoded = decode_children(body, max_children=len(opaques) + 1)
    if len(decoded) != len(opaques):
        raise BatchFormatError(f"{len(decoded)} child responses for {len(opaques)} children")
    out: list[RemotingCommand] = []
    for i, (got, sent) in enumerate(zip(decoded, opaques, strict=True)):
        cmd = got.command
        if cmd is None:
            raise BatchFormatError(f"child response {i}: {got.error}")
        if cmd.opaque != sent:
            raise BatchFormatError(f"child response {i} carries opaque {cmd.opaque}, "
                                   f"its request {sent}")
        if not cmd.flag & FLAG_RESPONSE:
            raise BatchFormatError(f"child response {i} lacks the response flag")
        out.append(cmd)
    return out


# ---------------------------------------------------------------------------- encoding


def encode_children(commands: Sequence[RemotingCommand]) -> list[Buffer]:
    """The child frames as buffers for ``writelines``: per child its head, then its body
    parts untouched (never joined)."""
    out: list[Buffer] = []
    for cmd in commands:
        out.extend(encode_command(cmd))
    return out


def _numbered(dispatch_code: int, children: Sequence[RemotingCommand]) -> None:
    for i, child in enumerate(children, 1):
        if child.code != dispatch_code:
            raise LocalProtocolError(f"child {i} has code {child.code}, "
                                     f"not dispatchCode {dispatch_code}")
        child.opaque = i
        child.flag &= ~FLAG_RESPONSE


def _parent(dispatch_code: int, parts: list[Buffer], oneway: bool) -> RemotingCommand:
    cmd = RemotingCommand.request(RequestCode.BATCH_REQUEST,
                                  {DISPATCH_CODE_KEY: str(int(dispatch_code))}, oneway=oneway)
    cmd.body_parts = parts
    return cmd


def encode_batch_request(dispatch_code: int, children: Sequence[RemotingCommand], *,
                         oneway: bool = False) -> RemotingCommand:
    """The parent of ``children`` (all with code ``dispatch_code``). The children get
    opaques 1..n here; the parent's body is their frames as buffers (``body_parts``)."""
    _numbered(dispatch_code, children)
    return _parent(dispatch_code, encode_children(children), oneway)


def encode_batch_requests(dispatch_code: int, children: Sequence[RemotingCommand], *,
                          max_children: int = DEFAULT_MAX_CHILDREN,
                          max_bytes: int = DEFAULT_MAX_FRAME_SIZE // 2,
                          ) -> list[tuple[RemotingCommand, list[RemotingCommand]]]:
    """``children`` split into as few parents as the limits allow, in order: each parent
    with the children it carries (numbered 1..k within it). Each child is encoded once. A
    child alone above ``max_bytes`` still gets a parent of its own (the peer decides)."""
    if max_children < 1:
        raise LocalProtocolError(f"max_children must be positive, got {max_children}")
    out: list[tuple[RemotingCommand, list[RemotingCommand]]] = []
    parts: list[Buffer] = []
    members: list[RemotingCommand] = []
    size = 0
    for child in children:
        if child.code != dispatch_code:
            raise LocalProtocolError(f"child has code {child.code}, "
                                     f"not dispatchCode {dispatch_code}")
        child.flag &= ~FLAG_RESPONSE
        child.opaque = len(members) + 1
        encoded = encode_command(child)
        frame_size = sum(len(p) for p in encoded)
        if members and (len(members) >= max_children or size + frame_size > max_bytes):
            out.append((_parent(dispatch_code, parts, False), members))
            parts, members, size = [], [], 0
            child.opaque = 1
            encoded = encode_command(child)
            frame_size = sum(len(p) for p in encoded)
        parts.extend(encoded)
        members.append(child)
        size += frame_size
    if members:
        out.append((_parent(dispatch_code, parts, False), members))
    return out


def batch_response(request: RemotingCommand, responses: Sequence[RemotingCommand]
                   ) -> RemotingCommand:
    """The merged parent response: code 0, remark ``"merged"``, body = the child response
    frames as buffers, in the order given (the request's)."""
    resp = request.response(ResponseCode.SUCCESS, MERGED_REMARK)
    ext = request.ext_fields
    if ext.get(CHILD_FORM_KEY) == SHARED_FORM:
        resp.ext_fields[CHILD_FORM_KEY] = SHARED_FORM
        resp.body_parts = _compact(responses)
        return resp
    offered = ext.get(CHILD_FORMS_KEY)
    if offered:
        forms = offered.split(",")
        accepted = [SHARED_FORM] if SHARED_FORM in forms else []
        if SEND_SHARED_FORM in forms and parse_java_int(
                ext.get(DISPATCH_CODE_KEY, "")) in SEND_SHARED_CODES:
            accepted.append(SEND_SHARED_FORM)
        if accepted:
            resp.ext_fields[CHILD_FORMS_KEY] = ",".join(accepted)
    resp.body_parts = encode_children(responses)
    return resp


def child_error_response(child: BatchChild, code: int, remark: str) -> RemotingCommand:
    """An error response for ``child``: its opaque (0 if unreadable), the response flag."""
    return RemotingCommand(code=int(code), opaque=child.opaque, flag=FLAG_RESPONSE,
                           remark=remark)
