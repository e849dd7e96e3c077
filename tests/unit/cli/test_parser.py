"""The CLI's parser as a whole (producers/cli/main.py ``build_parser``): every verb's error lines name it in full
(``agent-signal outbox dead: …``), and every argument and flag says what it is in ``--help``."""

from __future__ import annotations

import argparse
import re
import subprocess
from collections.abc import Iterator

import pytest

from producers.cli.main import _verb, build_parser
from tests.conftest import ROOT


def _parsers(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser of the CLI, the top one included, with the words that reach it."""
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*words, name))


def _leaves(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = (), chosen: dict[str, str] | None = None
) -> Iterator[tuple[tuple[str, ...], dict[str, str]]]:
    """Every leaf verb, as its words and the attributes its sub-command dests set (``{"command": "dlq",
    "dlq_command": "list"}``); a sub-command without a dest sets ``"?"``, which no verb line can name."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield words, dict(chosen or {})
    for action in subs:
        for name, sub in action.choices.items():
            dest = action.dest if action.dest != argparse.SUPPRESS else "?"
            yield from _leaves(sub, (*words, name), {**(chosen or {}), dest: name})


class TestVerbNames:
    def test_every_verb_is_named_in_full(self) -> None:
        """Each leaf verb's error prefix is all its words: a sub-command dest ``_verb`` leaves out fails here."""
        wrong = [
            f"{' '.join(words)!r} named {named!r}"
            for words, chosen in _leaves(build_parser())
            if (named := _verb(argparse.Namespace(**chosen))) != " ".join(words)
        ]
        assert not wrong, wrong

    def test_the_walk_reaches_the_outbox(self) -> None:
        """The walk sees two-word verbs, ``outbox dead`` among them (the one the audit found unnamed)."""
        assert ("outbox", "dead") in {words for words, _ in _leaves(build_parser())}


class TestHelp:
    def test_every_argument_and_flag_has_help(self) -> None:
        """Every action but argparse's own ``-h`` has help text, and so has every sub-command's choice."""
        missing: list[str] = []
        for words, parser in _parsers(build_parser()):
            for action in parser._actions:
                if isinstance(action, argparse._HelpAction):
                    continue
                if isinstance(action, argparse._SubParsersAction):
                    missing += [
                        f"{' '.join((*words, choice.dest))}"
                        for choice in action._choices_actions
                        if not (choice.help or "").strip()
                    ]
                    continue
                if not (action.help or "").strip():
                    missing.append(f"{' '.join(words)} {'/'.join(action.option_strings) or action.dest}")
        assert not missing, f"without help: {missing}"

    def test_positionals_show_a_metavar(self) -> None:
        """A positional shows a metavar (``FILE.jsonl``, ``CHAIN_ID``, ``ID``), not its Python name."""
        bare = [
            f"{' '.join(words)} {action.dest}"
            for words, parser in _parsers(build_parser())
            for action in parser._actions
            if not action.option_strings
            and not isinstance(action, argparse._SubParsersAction | argparse._HelpAction)
            and action.metavar is None
        ]
        assert not bare, f"positionals without a metavar: {bare}"


def test_every_command_says_what_it_does_in_its_own_help() -> None:
    """An audit: ``agent-signal web --help`` (and run, worker, enqueue, route, inspect, status, drain, pseudonym)
    said only its usage and options; each parser below the top one has a description now."""
    silent = [
        " ".join(words) for words, parser in _parsers(build_parser()) if words and not parser.description
    ]
    assert silent == []


def test_version_names_the_code_an_operator_runs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--version`` exits 0 with the package's version and the revision: the image's ``AGENT_SIGNAL_REVISION``
    (which the settings check does not refuse), else this checkout's commit; the upgrade notes name commits, and
    the version alone (0.1.0 since the start) told an operator nothing (an upgrade walk)."""
    from producers.cli.version import version_text
    from worker.settings import OTHER_ENV_NAMES

    monkeypatch.setenv("AGENT_SIGNAL_REVISION", "commit 1a2b3c4 of 2026-12-07")
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == "agent-signal 0.1.0 (commit 1a2b3c4 of 2026-12-07)\n"
    assert "AGENT_SIGNAL_REVISION" in OTHER_ENV_NAMES
    head = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%h"], capture_output=True, text=True
    )
    if (ROOT / ".git").exists() and head.returncode == 0:
        assert re.fullmatch(
            rf"agent-signal 0\.1\.0 \(commit {head.stdout.strip()} of \d{{4}}-\d\d-\d\d( \+ changes)?\)",
            version_text({}),
        )
