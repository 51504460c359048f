"""Given the ``stepwise`` command (a click group: the engine's commands, the operator's and
the studio's through the ``stepwise.commands`` entry point), ``stepwise --help`` lists every
command with its help line, each group's ``--help`` lists its own, and every command's
``--help`` works and exits 0.

Not a spec case: Stepped runs in Rails' own processes (issue 12, "Libraries, not
hand-kept copies": the CLI is a click group).
"""

from __future__ import annotations

import click
import pytest

from engine import cli

COMMANDS = {
    "approve",
    "bulk",
    "cancel",
    "clock",
    "complete",
    "db",
    "forget",
    "metrics",
    "reject",
    "retry",
    "schedules",
    "serve",
    "sweep",
    "users",
    "worker",
}
GROUPS = {
    "db": {"upgrade", "current", "stamp"},
    "users": {"create", "list", "delete", "password", "role"},
    "schedules": {"list", "create", "edit", "pause", "resume", "trigger", "delete"},
}


def listed(text: str) -> set[str]:
    """The command names of a help page's Commands section."""
    section = text.split("Commands:\n", 1)[1]
    return {line.split()[0] for line in section.splitlines() if line.startswith("  ") and line[2] != " "}


def test_the_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0

    shown = capsys.readouterr().out
    assert shown.startswith("Usage: stepwise [OPTIONS] COMMAND [ARGS]...")
    assert listed(shown) >= COMMANDS
    assert listed(shown) == set(cli.cli.commands)


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_each_group_lists_its_commands(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([name, "--help"]) == 0

    assert listed(capsys.readouterr().out) == GROUPS[name]


def test_every_command_has_a_help_page(capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["--help"])  # loads the plugins' commands
    paths = [
        [name, *([sub] if sub else [])]
        for name, command in cli.cli.commands.items()
        for sub in (sorted(command.commands) if isinstance(command, click.Group) else [None])
    ]
    for path in paths:
        capsys.readouterr()
        assert cli.main([*path, "--help"]) == 0, path
        page = capsys.readouterr().out
        assert page.startswith(f"Usage: stepwise {' '.join(path)}"), path
        assert "--help" in page


def test_wrong_usage_exits_2_saying_what_is_wrong(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as usage:
        cli.main(["sweep", "--every", "often"])

    assert usage.value.code == 2
    assert "Invalid value for '--every': 'often' is not a valid float" in capsys.readouterr().err


def test_the_version_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("stepwise ")
