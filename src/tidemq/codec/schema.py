"""Command custom headers declared once as schemas; ext-map conversion derived from them.

A header is a frozen dataclass deriving from :class:`Header`. Each field is one ext key
(docs/reference/remoting.md §2): its key is the field name in camelCase unless an
``Annotated[..., Key("key")]`` marker names it. A field without a default is required.
The field's type picks the conversion, following what the Java peer does:

=================  ==================================================  ===================
field type         ``from_ext`` (Java rule)                            ``to_ext``
=================  ==================================================  ===================
``str``            the text as is                                      the text
``int``            ``Integer.parseInt``: ``[+-]digits``, 32-bit range  decimal
                   (at most :data:`MAX_INT_DIGITS` digits)
``I64``            ``Long.parseLong``: ``[+-]digits``, 64-bit range    decimal
                   (at most :data:`MAX_INT_DIGITS` digits)
``bool``           true only for case-insensitive ``"true"``; with     ``"true"``/``"false"``
                   ``Key(accept_one=True)`` also ``"1"`` (§5.3)
``X | None``       absent key gives ``None``                           ``None`` is omitted
=================  ==================================================  ===================

A missing required key or an unparsable value raises :class:`HeaderFieldError` (a
:class:`~tidemq.errors.RemoteProtocolError`: the peer sent it). Unknown keys are ignored.
Java reads a number padded with any count of leading zeros; TideMQ refuses one of more
than :data:`MAX_INT_DIGITS` digits (twenty: a long's nineteen and one zero to spare)
rather than convert text of any length, and says so.

A subclass may re-key inherited fields without redeclaring them, which is how the
one-letter SEND_MESSAGE_V2 form shares the V1 schema::

    class SendMessageRequestHeaderV2(SendMessageRequestHeader, keys={"topic": "b", ...}): ...
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import sys
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self, dataclass_transform

from tidemq.errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "I64",
    "INT32",
    "INT64",
    "MAX_INT_DIGITS",
    "FieldSpec",
    "Header",
    "HeaderFieldError",
    "Key",
    "Kind",
    "camel",
    "int_refusal",
    "parse_java_bool",
    "parse_java_int",
]

#: The most digits a header number may have, leading zeros included.
MAX_INT_DIGITS = 20
_INT_RE = re.compile(rf"[+-]?[0-9]{{1,{MAX_INT_DIGITS}}}")
_DIGITS_RE = re.compile(r"[+-]?[0-9]+")
#: The bounds of a Java int and long.
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


class HeaderFieldError(RemoteProtocolError):
    """A header field the peer sent is missing or unparsable.

    ``header`` is the schema class name, ``field`` the Python field, ``key`` the ext key,
    ``value`` the text received (``None`` when missing).
    """

    def __init__(self, header: str, field: str, key: str, value: str | None, reason: str) -> None:
        super().__init__(f"{header}.{field} (ext key {key!r}): {reason}")
        self.header = header
        self.field = field
        self.key = key
        self.value = value
        self.reason = reason


@dataclasses.dataclass(frozen=True, slots=True)
class Key:
    """Field marker: the ext key (``None``: camelCase of the field name), alternative keys
    accepted when decoding, and whether a boolean also accepts ``"1"``."""

    name: str | None = None
    aliases: tuple[str, ...] = ()
    accept_one: bool = False


class _Long:
    """Marker for 64-bit integer fields (Java ``long``/``Long``)."""


#: A 64-bit integer field (Java ``long``); plain ``int`` fields are 32-bit.
I64 = Annotated[int, _Long()]


class Kind(enum.Enum):
    STR = "str"
    INT = "int"
    LONG = "long"
    BOOL = "bool"


def parse_java_int(text: str, bits: int = 32) -> int | None:
    """``Integer.parseInt`` / ``Long.parseLong``: ``None`` when Java would throw."""
    if _INT_RE.fullmatch(text) is None:
        return None
    value = int(text)
    lo, hi = INT32 if bits == 32 else INT64
    return value if lo <= value <= hi else None


def int_refusal(text: str, bits: int = 32) -> str:
    """Why :func:`parse_java_int` refused ``text`` (a reason for an error's remark; the
    text is cut to 40 characters)."""
    shown = repr(text) if len(text) <= 40 else repr(text[:37]) + "..."
    if _DIGITS_RE.fullmatch(text) is not None:
        digits = len(text.lstrip("+-"))
        if digits > MAX_INT_DIGITS:
            return (f"{shown} has {digits} digits; a number has at most {MAX_INT_DIGITS}, "
                    "leading zeros included")
    return f"{shown} is not a {bits}-bit integer"


def parse_java_bool(text: str, accept_one: bool = False) -> bool:
    """``Boolean.parseBoolean``: true only for case-insensitive ``"true"`` (or ``"1"``)."""
    return text.lower() == "true" or (accept_one and text == "1")


@dataclasses.dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of a header schema, derived from the dataclass declaration."""

    name: str
    key: str
    aliases: tuple[str, ...]
    kind: Kind
    required: bool
    nullable: bool
    accept_one: bool

    def parse(self, header: str, text: str) -> Any:
        kind = self.kind
        if kind is Kind.STR:
            return text
        if kind is Kind.BOOL:
            return parse_java_bool(text, self.accept_one)
        bits = 32 if kind is Kind.INT else 64
        value = parse_java_int(text, bits)
        if value is None:
            raise HeaderFieldError(header, self.name, self.key, text, int_refusal(text, bits))
        return value

    def format(self, header: str, value: Any) -> str:
        kind = self.kind
        if kind is Kind.STR:
            if not isinstance(value, str):
                raise LocalProtocolError(f"{header}.{self.name} must be str, got {value!r}")
            return value
        if kind is Kind.BOOL:
            return "true" if value else "false"
        lo, hi = INT32 if kind is Kind.INT else INT64
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise LocalProtocolError(
                f"{header}.{self.name} must be a {kind.value} in [{lo}, {hi}], got {value!r}"
            )
        return str(value)


def camel(name: str) -> str:
    """``default_topic_queue_nums`` -> ``defaultTopicQueueNums``."""
    first, *rest = name.split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


def _unwrap(tp: Any) -> tuple[Any, list[Any], bool]:
    """Strip ``Annotated`` and ``| None`` layers: (base type, metadata, nullable)."""
    meta: list[Any] = []
    nullable = False
    while True:
        if typing.get_origin(tp) is Annotated:
            meta.extend(tp.__metadata__)
            tp = tp.__origin__
            continue
        if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                raise TypeError(f"unsupported union in header schema: {tp!r}")
            nullable = True
            tp = args[0]
            continue
        return tp, meta, nullable


def _kind(base: Any, meta: list[Any]) -> Kind:
    if base is str:
        return Kind.STR
    if base is bool:
        return Kind.BOOL
    if base is int:
        return Kind.LONG if any(isinstance(m, _Long) for m in meta) else Kind.INT
    raise TypeError(f"unsupported header field type {base!r}")


#: Evaluated annotation texts, by the globals of the module that declared them and the
#: text: most headers repeat a handful of field types, and each is evaluated once.
_EVALUATED: dict[tuple[int, str], Any] = {}


def _own_hints(cls: type) -> dict[str, Any]:
    """The annotations ``cls`` itself declares, evaluated in its module's globals (what
    :func:`typing.get_type_hints` gives for them, which the tests hold it to)."""
    own = inspect.get_annotations(cls)
    namespace = sys.modules[cls.__module__].__dict__
    hints: dict[str, Any] = {}
    for name, text in own.items():
        if not isinstance(text, str):
            hints[name] = text
            continue
        key = (id(namespace), text)
        if key not in _EVALUATED:
            _EVALUATED[key] = eval(text, namespace)
        hints[name] = _EVALUATED[key]
    return hints


def _hints(cls: type) -> dict[str, Any]:
    """Every field's type, the bases' first, as :func:`typing.get_type_hints` would give
    them with ``include_extras``."""
    hints: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        hints.update(_own_hints(klass))
    return hints


def _build_schema(cls: type[Header], overrides: Mapping[str, str | tuple[str, ...]]) -> tuple[
    FieldSpec, ...
]:
    hints = _hints(cls)
    specs: list[FieldSpec] = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        base, meta, nullable = _unwrap(hints[f.name])
        marker = next((m for m in meta if isinstance(m, Key)), Key())
        key, aliases = marker.name or camel(f.name), marker.aliases
        if f.name in overrides:
            override = overrides[f.name]
            names = (override,) if isinstance(override, str) else override
            key, aliases = names[0], names[1:]
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        specs.append(
            FieldSpec(f.name, key, aliases, _kind(base, meta), required, nullable,
                      marker.accept_one)
        )
    keys = [s.key for s in specs]
    if len(set(keys)) != len(keys):
        raise TypeError(f"{cls.__name__}: duplicate ext keys {keys}")
    return tuple(specs)


@dataclass_transform(frozen_default=True, kw_only_default=True)
class Header:
    """Base of every custom header schema. Subclasses are frozen, keyword-only dataclasses
    whose fields hold plain defaults; their schema is made once, when the class is
    created, their ``__init__`` and ``from_ext`` once, when either is first called (a
    process that never builds or decodes a header of a class does not generate its code),
    and equality, hashing, ``repr`` and the refusal to assign are this class's, over the
    schema's fields in declaration order (what
    ``dataclasses.dataclass(frozen=True, kw_only=True)`` would generate per class)."""

    __schema__: ClassVar[tuple[FieldSpec, ...]] = ()
    __keys__: ClassVar[Mapping[str, str | tuple[str, ...]]] = {}

    def __init_subclass__(cls, *, keys: Mapping[str, str | tuple[str, ...]] | None = None) -> None:
        super().__init_subclass__()
        documented = cls.__doc__ is not None
        if not documented:  # set below; the decorator would read a signature for its own
            cls.__doc__ = cls.__name__
        dataclasses.dataclass(init=False, repr=False, eq=False, kw_only=True)(cls)
        cls.__keys__ = {**cls.__keys__, **(keys or {})}
        cls.__schema__ = _build_schema(cls, cls.__keys__)
        defaults = _plain_defaults(cls)
        init, from_ext = _compiled_on_first_use(cls)
        cls.__init__ = init  # type: ignore[method-assign]
        cls.__from_ext__ = staticmethod(from_ext)  # type: ignore[attr-defined]
        if not documented:  # as the dataclass decorator documents a class without a docstring
            cls.__doc__ = cls.__name__ + _call_text(cls.__schema__, defaults)

    def _values(self) -> tuple[Any, ...]:
        return tuple([getattr(self, f.name) for f in self.__schema__])

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in self.__schema__)
        return f"{type(self).__qualname__}({shown})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    @classmethod
    def ext_keys(cls) -> dict[str, str]:
        """The schema's mapping field name -> ext key."""
        return {f.name: f.key for f in cls.__schema__}

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        """Parse a command's ext fields; raises :class:`HeaderFieldError`.

        The body is generated per schema when the class is first used (see
        :func:`_compile_methods`), so decoding a header costs one straight-line function
        instead of a loop over field specs -- headers are decoded on every request.
        """
        return cls.__from_ext__(ext)  # type: ignore[attr-defined,no-any-return]

    def to_ext(self) -> dict[str, str]:
        """The ext fields for a command; ``None`` fields are left out."""
        name = type(self).__name__
        out: dict[str, str] = {}
        for f in self.__schema__:
            value = getattr(self, f.name)
            if value is not None:
                out[f.key] = f.format(name, value)
        return out

    def convert(self, cls: type[_H]) -> _H:
        """The same values under another schema sharing the field names (V1 <-> V2)."""
        return typing.cast(Any, cls)(  # type: ignore[no-any-return]
            **{f.name: getattr(self, f.name) for f in cls.__schema__}
        )


_H = typing.TypeVar("_H", bound=Header)


def _parse_slow(header: str, spec: FieldSpec, text: str) -> Any:
    return spec.parse(header, text)


def _parse_int(text: str, lo: int, hi: int) -> int | None:
    """:func:`parse_java_int`, fast path for plain ASCII digits (its twin: the same
    answer for every text, the digit limit included)."""
    if text.isascii() and ((text.isdigit() and len(text) <= MAX_INT_DIGITS) or (
            text[:1] in "+-" and text[1:].isdigit() and len(text) <= MAX_INT_DIGITS + 1)):
        value = int(text)
        if lo <= value <= hi:
            return value
    return None


def _plain_defaults(cls: type[Header]) -> dict[str, Any]:
    """The defaults of ``cls``'s fields; a schema whose instance is more than its fields
    (a ``__post_init__``, default factories, fields outside ``__init__``, slots) is
    refused."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if (hasattr(cls, "__post_init__") or "__slots__" in cls.__dict__
            or any(f.default_factory is not dataclasses.MISSING or not f.init for f in fields)):
        raise TypeError(f"{cls.__name__}: a header schema holds fields with plain defaults "
                        "only (no __post_init__, factories, init=False fields or slots)")
    return {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}


def _call_text(schema: tuple[FieldSpec, ...], defaults: Mapping[str, Any]) -> str:
    """The parameters of a schema's ``__init__`` as :func:`inspect.signature` shows them:
    ``(*, topic, queue_id=0)``."""
    params = [f"{f.name}={defaults[f.name]!r}" if f.name in defaults else f.name
              for f in schema]
    return f"(*, {', '.join(params)})" if params else "()"


def _compiled_on_first_use(cls: type[Header]) -> tuple[Any, Any]:
    """Stand-ins for ``cls``'s ``__init__`` and ``from_ext``: the first call of either
    generates both (:func:`_compile_methods`), puts them on the class in their place and
    runs the one called; every later call is the generated code's."""

    def compile_methods() -> None:
        init, from_ext = _compile_methods(cls)
        cls.__init__ = init  # type: ignore[method-assign]
        cls.__from_ext__ = staticmethod(from_ext)  # type: ignore[attr-defined]

    def first_init(self: Header, **fields: Any) -> None:
        compile_methods()
        cls.__init__(self, **fields)

    def first_from_ext(ext: Mapping[str, str]) -> Any:
        compile_methods()
        return cls.__from_ext__(ext)  # type: ignore[attr-defined]

    first_init.__qualname__ = f"{cls.__qualname__}.__init__"
    return first_init, first_from_ext


def _compile_methods(cls: type[Header]) -> tuple[Any, Any]:
    """Generate ``__init__`` and ``from_ext`` for one schema, in one piece of source.

    ``__init__`` takes every field by keyword and fills the instance's ``__dict__``, as
    the frozen dataclass ``__init__`` would through ``object.__setattr__``.
    ``from_ext`` is straight-line code, one block per field: the instance is made empty and
    its ``__dict__`` filled from the defaults and the keys present. Plain ASCII digits short
    enough to be in range are converted inline; anything else goes through
    :func:`_parse_int`."""
    name = cls.__name__
    defaults = _plain_defaults(cls)
    env: dict[str, Any] = {"cls": cls, "HeaderFieldError": HeaderFieldError,
                           "_parse_int": _parse_int, "_parse_slow": _parse_slow,
                           "_name": name, "_new": object.__new__, "_defaults": defaults}
    params = []
    for i, f in enumerate(cls.__schema__):
        if f.name in defaults:
            env[f"_default{i}"] = defaults[f.name]
            params.append(f"{f.name}=_default{i}")
        else:
            params.append(f.name)
    lines = [f"def __init__(self{', *, ' if params else ''}{', '.join(params)}):",
             "    d = self.__dict__"]
    lines += [f"    d[{f.name!r}] = {f.name}" for f in cls.__schema__]
    lines += ["def from_ext(ext):", "    get = ext.get", "    obj = _new(cls)",
              "    kw = obj.__dict__", "    kw.update(_defaults)"]
    for i, f in enumerate(cls.__schema__):
        env[f"_spec{i}"] = f
        lines.append(f"    t = get({f.key!r})")
        for alias in f.aliases:
            lines.append(f"    if t is None: t = get({alias!r})")
        lines.append("    if t is None:")
        if f.required:
            lines.append(f"        raise HeaderFieldError(_name, {f.name!r}, {f.key!r}, None, "
                         "'missing required field')")
        else:
            lines.append("        pass")
        lines.append("    else:")
        if f.kind is Kind.STR:
            lines.append(f"        kw[{f.name!r}] = t")
        elif f.kind is Kind.BOOL:
            one = " or t == '1'" if f.accept_one else ""
            lines.append(f"        kw[{f.name!r}] = t.lower() == 'true'{one}")
        else:
            lo, hi = INT32 if f.kind is Kind.INT else INT64
            safe = len(str(hi)) - 1  # this many digits are always in range
            lines.append(f"        if len(t) <= {safe} and t.isascii() and t.isdigit():")
            lines.append(f"            kw[{f.name!r}] = int(t)")
            lines.append("        else:")
            lines.append(f"            v = _parse_int(t, {lo}, {hi})")
            lines.append(f"            kw[{f.name!r}] = v if v is not None else "
                         f"_parse_slow(_name, _spec{i}, t)")
    lines.append("    return obj")
    exec("\n".join(lines), env)
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init, env["from_ext"]
