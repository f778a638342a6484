"""Every ``tidemq`` command that README.md and docs/ quote exists, with the options they
give it: in inline code and in code blocks, each subcommand is looked up in the CLI's
command tree and each ``-x`` / ``--name`` among its options."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer
from tests.docs.markdown import ROOT, markdown_files, read

#: ``tidemq`` (or ``.venv/bin/tidemq``) and what follows, up to a comment.
_IN_CODE = re.compile(r"(?:^|(?<=[\s;&|(]))(?:\S*/)?tidemq\s+[^#\n]*")
_SPAN = re.compile(r"`([^`]+)`")
#: Text that starts like a command but is not one: the Spark options' error messages.
_NOT_COMMANDS = ("tidemq option ",)
#: A word standing for any subcommand: ``...``, ``COMMAND``, ``<command>``.
_PLACEHOLDER = re.compile(r"^(\.\.\.|[A-Z][A-Z_]*|<[^>]*>)$")


def quoted_commands(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each ``tidemq`` command of a Markdown file."""
    doc = read(path)
    found = [(number, match.group(0)) for number, line in doc.code
             for match in _IN_CODE.finditer(line)]
    for match in _SPAN.finditer(doc.prose):
        text = " ".join(match.group(1).split())
        if re.match(r"(?:\S*/)?tidemq\s", text):
            found.append((doc.line_of(match.start()), text))
    return [(n, text.strip()) for n, text in found
            if not any(re.sub(r"^\S*/", "", text.strip()).startswith(prefix)
                       for prefix in _NOT_COMMANDS)]


def _options(command: Any) -> set[str]:
    return {name for param in command.params
            for name in [*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ())]}


def _leaves(command: Any) -> list[Any]:
    subs = getattr(command, "commands", None)
    if subs is None:
        return [command]
    return [command] + [leaf for sub in subs.values() for leaf in _leaves(sub)]


def problems(text: str, root: Any) -> list[str]:
    """What is wrong with one quoted command line: an unknown subcommand or option. After
    a placeholder, an option must be one of some subcommand's."""
    words = text.split()
    while words and not re.fullmatch(r"(?:\S*/)?tidemq", words[0]):
        words.pop(0)
    words = words[1:]
    command, path = root, "tidemq"
    candidates = [root]
    while getattr(command, "commands", None) is not None and words \
            and not words[0].startswith("-"):
        word = words.pop(0)
        if word in command.commands:
            command, path = command.commands[word], f"{path} {word}"
            candidates = [command]
        elif _PLACEHOLDER.match(word):
            candidates = _leaves(command)
            break
        else:
            return [f"{path} has no command {word!r}"]
    known = {"--help"}.union(*(_options(c) for c in candidates))
    unknown = []
    for word in words:
        if word == "--":  # the rest is for another program
            break
        for part in re.split(r"[|\[\]\\]", word):
            option = part.strip("(),;.'\"").split("=")[0]
            if re.match(r"--?[A-Za-z]", option) and option not in known:
                unknown.append(option)
    return [f"{path} has no option {option}" for option in unknown]


@pytest.fixture(scope="module")
def cli() -> Any:
    from tidemq.cli.main import build_app

    return typer.main.get_command(build_app())


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_quoted_command_exists(path: Path, cli: Any) -> None:
    name = path.relative_to(ROOT).as_posix()
    wrong = [f"{name}:{line}: {text!r}: {problem}" for line, text in quoted_commands(path)
             for problem in problems(text, cli)]
    assert wrong == []


def test_the_check_finds_what_is_wrong(cli: Any) -> None:
    assert problems("tidemq bench produce --batch 100 [--acl] --replica async|sync", cli) == []
    assert problems("tidemq admin COMMAND --help", cli) == []
    assert problems("tidemq bench ... -n", cli) == []
    assert problems("tidemq pipeline run job.py -- --output out", cli) == []
    assert problems("tidemq bench produce --no-such-flag", cli) == [
        "tidemq bench produce has no option --no-such-flag"]
    assert problems("tidemq admin noSuchCommand -t T", cli) == [
        "tidemq admin has no command 'noSuchCommand'"]
    assert problems("tidemq bench -n", cli) == ["tidemq bench has no option -n"]
