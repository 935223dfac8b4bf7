"""The reference docs cover what the code offers, and their links lead somewhere.

README.md and docs/*.md are the reference; docs/history/ keeps past measurements and does not count
as documenting anything. Every setting (an environment variable ``FACTLOOM_<FIELD>``, read by
``factloom.config.Settings``) and every ``factloom`` command (walked from the CLI's own argparse
parser, plus the benchmarks, training targets and evaluations its ``bench``, ``train`` and ``eval``
commands dispatch to) must be named in the reference. No services are needed.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from factloom import learn
from factloom.config import Settings
from factloom.platform.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
REFERENCE = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
LINKED = [*REFERENCE, *sorted((DOCS / "history").glob("*.md"))]

# [text](target) and ![alt](target); a target may carry a "title"
MARKDOWN_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# a repository path written as code: `docs/operations.md`, `bench/results/load.json`,
# `tests/platform/test_recovery.py::test_…` (tests move between folders; the docs must follow)
CODE_PATH = re.compile(r"`((?:docs|bench/results|tests)/[^`\s:]+\.(?:md|json|png|py))(?:::[^`\s]*)?`")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def _reference_text() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in REFERENCE)


def _env_prefix() -> str:
    return str(Settings.model_config.get("env_prefix", ""))


def _subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command path under ``parser``: ("up",), ("keys",), ("keys", "create"), …"""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield (*path, name)
                yield from _subcommands(child, (*path, name))


def _dispatched() -> Iterator[tuple[str, ...]]:
    """Commands whose second word is not a parser but a name the command looks up."""
    for script in sorted((REPO / "bench").glob("*.py")):  # how ``factloom bench NAME`` finds a benchmark
        if not script.stem.startswith("_"):
            yield ("bench", script.stem)
    for name in learn.targets():
        yield ("train", name)
    yield ("eval", "reasoner")  # the one name ``factloom eval`` accepts


def _commands() -> list[tuple[str, ...]]:
    return sorted({*_subcommands(build_parser()), *_dispatched()})


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            slug = _slug(match.group(2))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _links(path: Path) -> Iterator[str]:
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            yield from MARKDOWN_LINK.findall(line)


def _expand_braces(pattern: str) -> list[str]:
    """``continual-{entity,fact}.json`` → both names (one level of braces, as the docs write them)."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        return [pattern]
    return [out for option in match.group(1).split(",")
            for out in _expand_braces(pattern[:match.start()] + option + pattern[match.end():])]


@pytest.mark.parametrize("field", sorted(Settings.model_fields))
def test_every_setting_is_documented(field: str) -> None:
    variable = f"{_env_prefix()}{field}".upper()
    assert re.search(rf"(?<![A-Z0-9_]){re.escape(variable)}(?![A-Z0-9_])", _reference_text()), (
        f"{variable} is a setting (factloom/config.py) that README.md and docs/*.md never name")


@pytest.mark.parametrize("command", [" ".join(c) for c in _commands()])
def test_every_command_is_documented(command: str) -> None:
    pattern = r"\bfactloom\s+" + r"\s+".join(re.escape(word) for word in command.split())
    assert re.search(pattern + r"(?![\w-])", _reference_text()), (
        f"'factloom {command}' is a command that README.md and docs/*.md never show")


def test_the_walk_finds_the_commands() -> None:
    """Guards the walk itself: a CLI rewritten without argparse subparsers would make it find nothing."""
    commands = _commands()
    assert ("up",) in commands and ("keys", "create") in commands and ("models", "rollback") in commands
    assert ("bench", "ingest") in commands and ("train", "scorer") in commands


@pytest.mark.parametrize("page", LINKED, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in _links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        destination = (page.parent / file_part).resolve() if file_part else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif REPO not in destination.parents:
            broken.append(f"{target}: outside the repository")
        elif anchor and destination.suffix == ".md" and anchor not in _anchors(destination):
            broken.append(f"{target}: no heading #{anchor} in {destination.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


@pytest.mark.parametrize("page", REFERENCE, ids=lambda p: str(p.relative_to(REPO)))
def test_named_pages_results_and_tests_exist(page: Path) -> None:
    """A page, result file or test named in code (`docs/learning.md`, `bench/results/load.json`) exists."""
    missing = []
    for name in CODE_PATH.findall(page.read_text(encoding="utf-8")):
        for pattern in _expand_braces(name):
            if not any(REPO.glob(pattern)):
                missing.append(pattern)
    assert not missing, f"{page.relative_to(REPO)} names files that are not there: {', '.join(missing)}"
