"""Every command's help reads like a well-made CLI's: words for placeholders, an example, and lines
broken only between words, in a pipe as on a terminal."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from veralith.cli import app
from veralith.cli.command import EXAMPLES

COMMANDS = sorted(typer.main.get_command(app).commands)
NOISE = ["<bool>", "<str>", "<int", "<path>", "{file}", "[[", "<=x", "x<=", "9223372036854775807", "list[str]"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_readable_placeholders_and_an_example(command):
    text = CliRunner().invoke(app, [command, "--help"]).output
    assert not [n for n in NOISE if n in text], text
    assert "Example" in text and all(line in text for line in EXAMPLES[command])


def _words(text: str) -> list[str]:
    return text.split()


@pytest.mark.parametrize("width", ["50", "80"])
def test_help_in_a_pipe_breaks_lines_between_words_only(width):
    """Every help text's words come out whole: a word cut across two lines would show as two words.
    (CliRunner's output is not a terminal, as a pipe is not.)"""
    commands = typer.main.get_command(app).commands
    for name in ["", *COMMANDS]:
        shown = CliRunner().invoke(app, [*([name] if name else []), "--help"], terminal_width=int(width)).output
        sources = [typer.main.get_command(app).help or ""] if not name else \
            [commands[name].help or "", *(getattr(p, "help", None) or "" for p in commands[name].params)]
        shown_words = set(_words(shown))
        for source in sources:
            for word in _words(source):
                assert word in shown_words, (name, width, word)
        for line in shown.splitlines():
            if re.match(r"    ([A-Z_]+=\S+ )*veralith ", line):  # an example (env vars first): copied, never wrapped
                continue
            assert len(line) <= int(width) or " " not in line.strip(), (name, line)
        assert not re.search(r"\w-\n", shown), name  # no break at a hyphen (--dry-\nrun)
