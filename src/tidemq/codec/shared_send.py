"""The batch protocol's shared-header send form (a negotiated TideMQ extension).

A producer's single sends to one broker and topic differ only in their queue, sysflag,
born timestamp, flag, properties and body; as standard children (complete frames,
:mod:`tidemq.codec.batch_protocol`) each repeats the whole SEND_MESSAGE_V2 header as JSON,
encoded and decoded per message. This form sends that header once. Parent: code
``BATCH_REQUEST`` (20000), ext ``dispatchCode=310`` and ``childForm=sharedSend``; body =
one *template* child frame, then one entry per child:

======  =====  ============  ========================================================
offset  size   field         meaning
======  =====  ============  ========================================================
0       4+L    template      a complete child frame (code 310, no body); its ext is
                             every child's header but the five fields below
4+L     ...    child 1       the entry below
...     ...    child 2 ...   entries up to the end of the parent body
======  =====  ============  ========================================================

A child entry (big-endian):

======  =====  ============  ========================================================
offset  size   field         meaning
======  =====  ============  ========================================================
0       4      queueId       ext ``e`` (int32)
4       4      sysFlag       ext ``f`` (int32)
8       8      bornTime      ext ``g``, born timestamp in ms (int64)
16      4      flag          ext ``h`` (int32)
20      2      P             properties bytes (uint16); 0: no ext ``i``
22      4      B             body bytes (uint32)
26      P      properties    ext ``i``: the message properties text, UTF-8
26+P    B      body          the message body
======  =====  ============  ========================================================

Child ``k`` (opaque ``k``, from 1) is the template with ext ``e``..``h`` set and ``i`` set
(or removed) from its entry, its body the entry's. Malformed as a whole: an unreadable
template, a template of another code or with a body, an entry cut short, more children
than the receiver allows. A child whose properties are not UTF-8 is malformed alone.

Merged response: ext ``childForm=sharedSend``; body = one entry per child, in order
(opaques implied):

======  =====  ============  ========================================================
offset  size   field         meaning
======  =====  ============  ========================================================
0       1      kind          0: compact (this table); 1: a standard child response
                             frame (docs/reference/remoting.md §1.2) follows
1       1      M             msgId bytes
2       4      queueId       ext ``queueId`` (int32)
6       8      queueOffset   ext ``queueOffset`` (int64)
14      M      msgId         ext ``msgId`` (ASCII)
======  =====  ============  ========================================================

A compact entry is a code 0 SUCCESS answer without remark whose ext is exactly
``msgId``, ``queueId``, ``queueOffset``, ``MSG_REGION`` and ``TRACE_ON``, the last two
equal to the parent response's ext of the same names. Anything else is a kind-1 entry.

Sans-IO; garbage raises :class:`~tidemq.codec.batch_protocol.BatchFormatError` when
decoding, :class:`~tidemq.errors.LocalProtocolError` when encoding what the layout cannot
hold.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any, NamedTuple

from tidemq.codec.batch_protocol import (
    CHILD_FORM_KEY,
    DISPATCH_CODE_KEY,
    MERGED_REMARK,
    SEND_SHARED_CODES,
    SEND_SHARED_FORM,
    BatchFormatError,
    plain_int,
    read_child_frame,
    read_template,
)
from tidemq.codec.command import FLAG_RESPONSE, RemotingCommand, RequestCode
from tidemq.codec.frame import encode_command
from tidemq.codec.schema import INT32, INT64
from tidemq.errors import LocalProtocolError, ResponseCode

__all__ = [
    "REGION_KEY",
    "SEND_SHARED_CODES",
    "SEND_SHARED_FORM",
    "TRACE_KEY",
    "PlainAnswer",
    "RawEntry",
    "SendAnswer",
    "SendEntry",
    "compact_send_responses",
    "decode_send_answers",
    "decode_shared_send",
    "encode_shared_send",
    "new_answer",
    "new_entry",
    "send_answer_command",
    "shared_send_child",
    "shared_send_entry",
    "shared_send_key",
    "shared_send_response",
]

REGION_KEY, TRACE_KEY = "MSG_REGION", "TRACE_ON"

_ENTRY = struct.Struct(">iiqiHI")  # queueId, sysFlag, bornTime, flag, P, B
_ANSWER = struct.Struct(">BBiq")  # kind, M, queueId, queueOffset
_FULL = b"\x01"
#: A compact entry with its msgId, by msgId length (:func:`_uniform_answers`).
_ANSWERS: dict[int, struct.Struct] = {}
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_PER_CHILD = ("e", "f", "g", "h", "i")
_SHARED_KEYS = ("a", "b", "c", "d", "j", "k", "l", "m", "n")
_V2_KEYS = frozenset(_PER_CHILD + _SHARED_KEYS)
_COMPACT_KEYS = frozenset({"msgId", "queueId", "queueOffset", REGION_KEY, TRACE_KEY})

Buffer = bytes | bytearray | memoryview


class SendEntry(NamedTuple):
    """One child of a shared send parent: what differs from the template."""

    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str | None
    body: Buffer


class SendAnswer(NamedTuple):
    """A compact child answer: SUCCESS with these ext values (and the parent's
    ``MSG_REGION`` / ``TRACE_ON``)."""

    msg_id: str
    queue_id: int
    queue_offset: int


class PlainAnswer(NamedTuple):
    """A child send's SUCCESS before any command is made of it (the broker's send fast
    path): what a compact entry holds, and the ``MSG_REGION`` / ``TRACE_ON`` the
    response's ext would carry. :func:`compact_send_responses` packs it directly."""

    msg_id: str
    queue_id: int
    queue_offset: int
    region: str
    trace: str

    def command(self) -> RemotingCommand:
        """The standard child response it stands for."""
        return RemotingCommand(code=0, flag=FLAG_RESPONSE, ext_fields={
            "msgId": self.msg_id, "queueId": str(self.queue_id),
            "queueOffset": str(self.queue_offset), REGION_KEY: self.region,
            TRACE_KEY: self.trace})


_PLAIN_ONLY = frozenset({PlainAnswer})

#: A :class:`SendEntry` / :class:`PlainAnswer` from a tuple of its fields, without the
#: keyword-argument call (one per child on the broker's send path).
new_entry: Callable[[tuple[Any, ...]], SendEntry] = functools.partial(tuple.__new__, SendEntry)
new_answer: Callable[[tuple[Any, ...]], PlainAnswer] = functools.partial(
    tuple.__new__, PlainAnswer)


# ---------------------------------------------------------------------------- request


#: What :func:`encode_shared_send` takes per child: queueId, sysFlag, bornTimestamp,
#: flag, the properties text as UTF-8 (empty: none) and the body.
RawEntry = tuple[int, int, int, int, bytes, Buffer]


def encode_shared_send(template: RemotingCommand, entries: Sequence[RawEntry]
                       ) -> RemotingCommand:
    """The parent of ``entries`` under ``template``'s header (a SEND_MESSAGE_V2; its ext
    ``e``..``i`` and its body are left out, each child's come from its entry). The children
    get opaques 1..n; the bodies go out as they are (never joined)."""
    if template.code not in SEND_SHARED_CODES:
        raise LocalProtocolError(f"the shared send form carries code 310, not {template.code}")
    ext = template.ext_fields
    shared = RemotingCommand(code=template.code, opaque=1, flag=template.flag & ~FLAG_RESPONSE,
                             language=template.language, version=template.version,
                             ext_fields={k: v for k, v in ext.items() if k not in _PER_CHILD},
                             serialize_type=template.serialize_type)
    parts: list[Buffer] = encode_command(shared)
    pack = _ENTRY.pack
    append = parts.append
    try:
        for qid, sys_flag, born, flag, props, body in entries:
            append(pack(qid, sys_flag, born, flag, len(props), len(body)) + props)
            if len(body):
                append(body)
    except struct.error as exc:
        raise LocalProtocolError(f"a child does not fit the shared send form: {exc}") from None
    parent = RemotingCommand.request(RequestCode.BATCH_REQUEST, {
        DISPATCH_CODE_KEY: str(int(template.code)), CHILD_FORM_KEY: SEND_SHARED_FORM})
    parent.body_parts = parts
    return parent


def shared_send_entry(cmd: RemotingCommand) -> RawEntry | None:
    """``cmd`` (a SEND_MESSAGE_V2 request) as an entry of a parent whose template is
    ``cmd`` without ``e``..``i``, or ``None`` when the form cannot carry it unchanged
    (a field that is not a canonical in-range integer, empty properties text, a body
    in parts)."""
    if cmd.code not in SEND_SHARED_CODES or cmd.body_parts is not None:
        return None
    ext = cmd.ext_fields
    qid = plain_int(ext.get("e"), INT32)
    sys_flag = plain_int(ext.get("f"), INT32)
    born = plain_int(ext.get("g"), INT64)
    flag = plain_int(ext.get("h"), INT32)
    if qid is None or sys_flag is None or born is None or flag is None:
        return None
    text = ext.get("i")
    props = b""
    if text is not None:
        if not text:
            return None  # the form would drop the key
        try:
            props = text.encode("utf-8")
        except UnicodeEncodeError:
            return None
        if len(props) > 0xFFFF:
            return None
    return qid, sys_flag, born, flag, props, cmd.body


def shared_send_key(cmd: RemotingCommand) -> tuple[object, ...]:
    """What must be equal for requests to share a template: everything but the entry's
    fields and the opaque."""
    ext = cmd.ext_fields
    head = (cmd.code, cmd.flag, cmd.language, cmd.version, cmd.serialize_type)
    if ext.keys() <= _V2_KEYS:  # the usual header: its shared fields, in a fixed order
        return (*head, *map(ext.get, _SHARED_KEYS))
    return (*head, None, *sorted((k, v) for k, v in ext.items() if k not in _PER_CHILD))


def decode_shared_send(code: int, body: Buffer, max_children: int
                       ) -> tuple[RemotingCommand, list[SendEntry | str]]:
    """The template and the entries of a shared send parent's body; an entry whose
    properties are not UTF-8 is the reason it is malformed (a ``str``)."""
    view = body if isinstance(body, memoryview) else memoryview(body)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    end = len(view)
    if not end:
        raise BatchFormatError("a shared send parent needs a template")
    tcmd, pos = read_template(view, code)
    out: list[SendEntry | str] = []
    add = out.append
    unpack, size = _ENTRY.unpack_from, _ENTRY.size
    # Every entry takes at least ``size`` bytes: a body too short to hold more than
    # max_children entries needs no count of them.
    counted = (end - pos) // size > max_children
    while pos < end:
        if counted and len(out) >= max_children:
            raise BatchFormatError(f"more than {max_children} children")
        if end - pos < size:
            raise BatchFormatError(f"{end - pos} trailing bytes at {pos} are not a child entry")
        qid, sys_flag, born, flag, plen, blen = unpack(view, pos)
        start = pos + size
        cut = start + plen
        pos = cut + blen
        if pos > end:
            raise BatchFormatError(f"child entry {len(out)} is cut short")
        if not plen:
            add(new_entry((qid, sys_flag, born, flag, None, view[cut:pos])))
            continue
        try:
            add(new_entry((qid, sys_flag, born, flag, str(view[start:cut], "utf-8"),
                           view[cut:pos])))
        except UnicodeDecodeError:
            add("the child's properties are not UTF-8")
    return tcmd, out


def shared_send_child(template: RemotingCommand, index: int, entry: SendEntry
                      ) -> RemotingCommand:
    """Child ``index`` (from 1) as the standard child it stands for."""
    ext = template.ext_fields.copy()
    ext["e"] = str(entry.queue_id)
    ext["f"] = str(entry.sys_flag)
    ext["g"] = str(entry.born_timestamp)
    ext["h"] = str(entry.flag)
    if entry.properties:
        ext["i"] = entry.properties
    else:
        ext.pop("i", None)
    return RemotingCommand(code=template.code, opaque=index, flag=template.flag,
                           language=template.language, version=template.version,
                           ext_fields=ext, serialize_type=template.serialize_type,
                           body=entry.body)


# ---------------------------------------------------------------------------- response


def compact_send_responses(responses: Sequence[RemotingCommand | PlainAnswer]
                           ) -> tuple[dict[str, str], list[Buffer]]:
    """The parent response's ext (``MSG_REGION`` / ``TRACE_ON`` of the first success)
    and body entries for ``responses`` (module docstring). A :class:`PlainAnswer` gives
    the bytes its :meth:`~PlainAnswer.command` would."""
    uniform = _uniform_answers(responses)
    if uniform is not None:
        return uniform
    shared: dict[str, str] = {}
    out: list[Buffer] = []
    add = out.append
    pack = _ANSWER.pack
    for item in responses:
        answer: tuple[str, int, int] | None
        if type(item) is PlainAnswer:  # the common case, packed here: _pack_answer's bytes
            msg_id, queue_id, queue_offset, region, trace = item
            if not shared:
                shared = {REGION_KEY: region, TRACE_KEY: trace}
            if (region == shared[REGION_KEY] and trace == shared[TRACE_KEY]
                    and len(msg_id) <= 255 and msg_id.isascii()):
                try:
                    add(pack(0, len(msg_id), queue_id, queue_offset) + msg_id.encode("ascii"))
                    continue
                except struct.error:
                    pass
            add(_FULL)
            out.extend(encode_command(item.command()))
            continue
        if isinstance(item, PlainAnswer):
            answer = item.msg_id, item.queue_id, item.queue_offset
            region, trace = item.region, item.trace
        else:
            ext = item.ext_fields
            if not (item.code == 0 and item.remark is None and not item.body_length()
                    and ext.keys() == _COMPACT_KEYS):
                out.append(_FULL)
                out.extend(encode_command(item))
                continue
            answer = _numbers(ext)
            region, trace = ext[REGION_KEY], ext[TRACE_KEY]
        if not shared:
            shared = {REGION_KEY: region, TRACE_KEY: trace}
        if (answer is not None and region == shared[REGION_KEY]
                and trace == shared[TRACE_KEY]):
            entry = _pack_answer(*answer)
            if entry is not None:
                out.append(entry)
                continue
        out.append(_FULL)
        out.extend(encode_command(item.command() if isinstance(item, PlainAnswer) else item))
    return shared, out


def _uniform_answers(responses: Sequence[RemotingCommand | PlainAnswer]
                     ) -> tuple[dict[str, str], list[Buffer]] | None:
    """:func:`compact_send_responses` of the usual merged answer -- plain answers only,
    one region and trace, ASCII message ids of one length, numbers that fit -- packed
    by column, without a Python step per answer; ``None`` for anything else."""
    if not responses or set(map(type, responses)) != _PLAIN_ONLY:
        return None
    msg_ids, qids, offsets, regions, traces = zip(*responses, strict=True)
    lengths = set(map(len, msg_ids))
    if len(lengths) != 1 or len(set(regions)) != 1 or len(set(traces)) != 1:
        return None
    (size,) = lengths
    if (size > 255 or not "".join(msg_ids).isascii() or min(qids) < _INT32_MIN
            or max(qids) > _INT32_MAX or min(offsets) < _INT64_MIN
            or max(offsets) > _INT64_MAX):
        return None
    packer = _ANSWERS.get(size)
    if packer is None:
        packer = _ANSWERS[size] = struct.Struct(f"{_ANSWER.format}{size}s")
    n = len(msg_ids)
    return ({REGION_KEY: regions[0], TRACE_KEY: traces[0]},
            list(map(packer.pack, repeat(0, n), repeat(size, n), qids, offsets,
                     map(str.encode, msg_ids))))


def _numbers(ext: dict[str, str]) -> tuple[str, int, int] | None:
    """``(msgId, queueId, queueOffset)`` of a success's ext when its numbers are in their
    canonical decimal form (a compact entry restores that text)."""
    qid, qoff = ext["queueId"], ext["queueOffset"]
    try:
        q, o = int(qid), int(qoff)
    except ValueError:
        return None
    return (ext["msgId"], q, o) if str(q) == qid and str(o) == qoff else None


def _pack_answer(msg_id: str, queue_id: int, queue_offset: int) -> bytes | None:
    """A compact entry, or ``None`` when the values do not fit one."""
    if len(msg_id) > 255 or not msg_id.isascii():
        return None
    try:
        return _ANSWER.pack(0, len(msg_id), queue_id, queue_offset) + msg_id.encode("ascii")
    except struct.error:
        return None


def shared_send_response(request: RemotingCommand,
                         responses: Sequence[RemotingCommand | PlainAnswer]
                         ) -> RemotingCommand:
    """The merged response to a shared send parent: code 0, remark ``"merged"``, ext
    ``childForm=sharedSend`` (and the compact entries' ``MSG_REGION`` / ``TRACE_ON``),
    one entry per child in the request's order."""
    resp = request.response(ResponseCode.SUCCESS, MERGED_REMARK)
    shared, parts = compact_send_responses(responses)
    resp.body = b"".join(parts)  # small entries: one buffer writes faster than many
    resp.ext_fields.update(shared)
    resp.ext_fields[CHILD_FORM_KEY] = SEND_SHARED_FORM
    return resp


def decode_send_answers(body: Buffer, count: int) -> list[SendAnswer | RemotingCommand]:
    """The child answers of a shared send parent's merged response: compact ones as
    :class:`SendAnswer`, the others as commands (opaques 1..n)."""
    view = body if isinstance(body, memoryview) else memoryview(body)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    out: list[SendAnswer | RemotingCommand] = []
    pos, end = 0, len(view)
    unpack, size = _ANSWER.unpack_from, _ANSWER.size
    while pos < end:
        if len(out) >= count:
            raise BatchFormatError(f"more than {count} child responses")
        if view[pos] == 1:
            child, pos = read_child_frame(view, pos + 1, end)
            cmd = child.command
            if cmd is None:
                raise BatchFormatError(f"child response {len(out)}: {child.error}")
            cmd.opaque = len(out) + 1
            out.append(cmd)
            continue
        if end - pos < size:
            raise BatchFormatError(f"{end - pos} trailing bytes are not a child response")
        kind, mlen, qid, qoff = unpack(view, pos)
        start = pos + size
        pos = start + mlen
        if kind != 0 or pos > end:
            raise BatchFormatError(f"child response {len(out)} is cut short or of kind {kind}")
        try:
            msg_id = str(view[start:pos], "ascii")
        except UnicodeDecodeError:
            raise BatchFormatError(f"child response {len(out)}: msgId not ASCII") from None
        out.append(SendAnswer(msg_id, qid, qoff))
    if len(out) != count:
        raise BatchFormatError(f"{len(out)} child responses for {count} children")
    return out


def send_answer_command(answer: SendAnswer | RemotingCommand, index: int,
                        parent_ext: dict[str, str]) -> RemotingCommand:
    """Child ``index``'s (from 1) answer as the standard child response it stands for."""
    if isinstance(answer, RemotingCommand):
        return answer
    return RemotingCommand(code=0, opaque=index, flag=FLAG_RESPONSE, ext_fields={
        "msgId": answer.msg_id, "queueId": str(answer.queue_id),
        "queueOffset": str(answer.queue_offset), REGION_KEY: parent_ext.get(REGION_KEY, ""),
        TRACE_KEY: parent_ext.get(TRACE_KEY, "")})
