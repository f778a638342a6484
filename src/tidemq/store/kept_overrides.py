"""A server's file of the keys changed at run time, ``runtimeOverrides.properties``: read
at start after the user's properties file, merged into and replaced whole on a change.

The broker, the name server and the controller each keep one
(:mod:`tidemq.broker.config_overrides`, :mod:`tidemq.namesrv.config_overrides`,
:mod:`tidemq.namesrv.controller.config_overrides` say where and who reads it); the text is
:mod:`~tidemq.formats.kept_properties`'. An update merges its keys into what the file
holds and replaces it atomically (a temporary file, fsync, rename, fsync of the
directory), so a process killed at any moment leaves the old file or the new one.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from tidemq.errors import ConfigError
from tidemq.formats.javaprops import config_keys, env_values, load_config, primary_keys
from tidemq.formats.kept_properties import kept_text, read_kept
from tidemq.store.checkpoint import atomic_write

__all__ = ["FILE_NAME", "KeptOverrides", "load_with_kept", "shown_keys", "shown_of"]

log = logging.getLogger(__name__)

T = TypeVar("T")

FILE_NAME = "runtimeOverrides.properties"


@dataclasses.dataclass(frozen=True, slots=True)
class KeptOverrides:
    """One server's kind of file: ``first_line`` (the comment that announces its end
    line), ``header`` (comment lines after it) and ``key`` (the setting that places the
    file, named by the error of a file that does not read)."""

    first_line: str
    header: str
    key: str

    def read(self, path: Path) -> dict[str, str]:
        """The keys the file holds (none when there is no file); a
        :class:`~tidemq.errors.ConfigError` naming the file when it does not read or
        was cut short."""
        return read_kept(path, self.first_line, key=self.key)

    def write(self, path: Path, changes: Mapping[str, str],
              classes: tuple[type[Any], ...] = ()) -> dict[str, str]:
        """Merge ``changes`` into the file (created if missing); what it holds now. With
        the config ``classes`` the keys belong to, each key is written as they show it,
        in place of any other name the file gave it (:func:`shown_keys`)."""
        merged = {**shown_keys(classes, path, self.read(path)),
                  **shown_keys(classes, path, changes)}
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, kept_text(self.first_line, self.header,
                                     dict(sorted(merged.items()))).encode())
        return merged


def shown_of(classes: tuple[type[Any], ...], key: str) -> str:
    """The key config dataclasses ``classes`` show for ``key`` (one of their keys, an
    alias or a field name); ``key`` itself when none of them knows it."""
    for cls in classes:
        field = config_keys(cls).get(key) or next(
            (f.name for f in dataclasses.fields(cls) if f.name == key), None)
        if field is not None:
            return next(shown for shown, name in primary_keys(cls).items() if name == field)
    return key


def shown_keys(classes: tuple[type[Any], ...], kept_path: Path, kept: Mapping[str, str]
               ) -> dict[str, str]:
    """``kept`` with each key as ``classes`` show it, so that a hand-edited alias
    (``enableSlaveActingMaster``) is read as its key (``slaveActingMaster``) wherever the
    key is compared or merged; a :class:`~tidemq.errors.ConfigError` naming the file when
    it gives one key under two names. Keys no class knows stay as they are."""
    out: dict[str, str] = {}
    named: dict[str, str] = {}
    for key, value in kept.items():
        shown = shown_of(classes, key)
        if shown in named:
            raise ConfigError(f"{kept_path}: {named[shown]} and {key} are the same key "
                              f"{shown}: keep one of them", key=shown)
        named[shown] = key
        out[shown] = value
    return out


def load_with_kept(cls: type[T], path: str | Path | None, loaded: tuple[T, list[str]],
                   kept_path: Path, kept: Mapping[str, str], *,
                   overrides: Mapping[str, Any] | None, env: Mapping[str, str] | None
                   ) -> tuple[T, list[str]]:
    """``loaded`` (:func:`~tidemq.formats.javaprops.load_config` of ``cls`` from ``path``,
    ``env`` and ``overrides``) with the keys ``kept`` in ``kept_path`` read after the
    properties file: a key the environment or ``overrides`` give again, under any of its
    names, wins (a warning says so). A key ``cls`` does not know, or a value it does not
    take, is a :class:`~tidemq.errors.ConfigError` naming the file."""
    if not kept:
        return loaded
    kept = shown_keys((cls,), kept_path, kept)
    keys = config_keys(cls)
    for key in kept:
        if key not in keys:
            raise ConfigError(f"{kept_path}: unknown config key {key!r}", key=key)
    later = {keys.get(k, k) for k in env_values(cls, os.environ if env is None else env)}
    later |= {keys.get(k, k) for k in overrides or {}}
    shadowed = sorted(k for k in kept if keys[k] in later)
    if shadowed:
        log.warning("%s: %s changed at run time, but the environment or --set gives %s "
                    "again, and wins", kept_path, ", ".join(shadowed),
                    "it" if len(shadowed) == 1 else "them")
    effective = {k: v for k, v in kept.items() if keys[k] not in later}
    try:
        return load_config(cls, path, overrides={**effective, **(overrides or {})}, env=env)
    except ConfigError as exc:
        if exc.key in effective:
            raise ConfigError(f"{kept_path}: {exc}", key=exc.key) from None
        raise
