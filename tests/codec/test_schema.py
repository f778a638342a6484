"""The header schema's classes behave as ``dataclasses.dataclass(frozen=True, kw_only=True)``
would make them: every header class is held to a dataclass made from its own fields (its
twin), on generated values."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import pickle
import typing
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.codec.test_headers import field_values

from tidemq.codec import controller, headers
from tidemq.codec.schema import Header, Kind, _call_text, _hints


def _all_headers() -> list[type[Header]]:
    found: list[type[Header]] = []
    todo = list(Header.__subclasses__())
    while todo:
        cls = todo.pop()
        if cls.__module__ in (headers.__name__, controller.__name__):
            found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(set(found), key=lambda c: (c.__module__, c.__qualname__))


ALL = _all_headers()


@functools.cache
def _twin(cls: type[Header]) -> type:
    """The dataclass the standard library would make of ``cls``'s fields."""
    hints = typing.get_type_hints(cls, include_extras=True)
    namespace: dict[str, Any] = {"__annotations__": {}, "__qualname__": cls.__qualname__}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        namespace["__annotations__"][f.name] = hints[f.name]
        if f.default is not dataclasses.MISSING:
            namespace[f.name] = f.default
    return dataclasses.dataclass(frozen=True, kw_only=True)(type(cls.__name__, (), namespace))


@st.composite
def kwargs_of(draw: st.DrawFn, cls: type[Header]) -> dict[str, Any]:
    return {spec.name: draw(field_values(spec)) for spec in cls.__schema__
            if spec.required or draw(st.booleans())}


def test_every_header_module_class_is_found() -> None:
    assert headers.SendMessageRequestHeaderV2 in ALL and len(ALL) >= 60


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_field_types_are_what_typing_resolves(cls: type[Header]) -> None:
    assert _hints(cls) == typing.get_type_hints(cls, include_extras=True)


@settings(deadline=None, max_examples=300)
@given(data=st.data(), cls=st.sampled_from(ALL))
def test_a_header_behaves_as_its_dataclass_twin(data: st.DataObject, cls: type[Header]) -> None:
    twin = _twin(cls)
    kwargs = data.draw(kwargs_of(cls), label="kwargs")
    other = data.draw(kwargs_of(cls), label="other")
    h, t = cls(**kwargs), twin(**kwargs)
    assert repr(h) == repr(t)
    assert hash(h) == hash(t)
    assert (h == cls(**other)) == (t == twin(**other))
    assert h == cls(**kwargs) and h != t and h.__eq__(t) is NotImplemented
    assert cls.from_ext(h.to_ext()) == h
    assert dataclasses.replace(h) == h
    assert [f.name for f in dataclasses.fields(h)] == [f.name for f in dataclasses.fields(t)]
    assert cls.__match_args__ == twin.__match_args__  # type: ignore[attr-defined]
    assert pickle.loads(pickle.dumps(h)) == h
    for f in dataclasses.fields(t):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(h, f.name, 1)
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(h, f.name)
        assert getattr(h, f.name) == getattr(t, f.name)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_construction_is_refused_as_the_twin_refuses_it(cls: type[Header]) -> None:
    twin = _twin(cls)
    required = {s.name: "1" if s.kind is Kind.STR else 1 for s in cls.__schema__ if s.required}
    for bad_args, bad_kwargs in (((1,), required), ((), {**required, "no_such_field": 1})):
        with pytest.raises(TypeError):
            twin(*bad_args, **bad_kwargs)
        with pytest.raises(TypeError):
            cls(*bad_args, **bad_kwargs)
    for name in required:
        missing = {k: v for k, v in required.items() if k != name}
        with pytest.raises(TypeError, match=name):
            twin(**missing)
        with pytest.raises(TypeError, match=name):
            cls(**missing)


def test_a_schema_with_more_than_plain_fields_is_refused() -> None:
    with pytest.raises(TypeError, match="plain defaults"):

        class Listed(Header):
            names: str = dataclasses.field(default_factory=str)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_the_call_text_is_the_generated_inits_signature(cls: type[Header]) -> None:
    """What documents a class without a docstring is what ``inspect.signature`` shows of
    its generated ``__init__``."""
    cls(**{s.name: "1" if s.kind is Kind.STR else 1 for s in cls.__schema__ if s.required})
    defaults = {f.name: f.default for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                if f.default is not dataclasses.MISSING}
    assert _call_text(cls.__schema__, defaults) == str(inspect.signature(cls))


@pytest.mark.parametrize("first", ["init", "from_ext"])
def test_a_classs_code_is_generated_by_its_first_use(first: str) -> None:
    class Fresh(Header):
        topic: str
        queue_id: int = 0

    assert Fresh.__doc__ == "Fresh(*, topic, queue_id=0)"
    assert Fresh.__init__.__code__.co_filename != "<string>"  # not generated yet
    if first == "init":
        assert Fresh(topic="t", queue_id=3).to_ext() == {"topic": "t", "queueId": "3"}
    else:
        assert Fresh.from_ext({"topic": "t", "queueId": "3"}) == Fresh(topic="t", queue_id=3)
    assert Fresh.__init__.__code__.co_filename == "<string>"
    assert Fresh.from_ext({"topic": "u"}) == Fresh(topic="u")
    with pytest.raises(TypeError, match="topic"):
        Fresh()  # type: ignore[call-arg]
