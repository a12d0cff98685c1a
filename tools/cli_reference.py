"""Write the `runner` CLI reference into docs/cli.md, from click itself (every command's
`--help`, between the two marker comments). `make test-fast` fails when the page is stale:

    .venv/bin/python tools/cli_reference.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

PAGE = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
START = "<!-- cli-reference:start (written by tools/cli_reference.py from the click commands) -->"
END = "<!-- cli-reference:end -->"


def _helps(
    command: click.Command, path: list[str], parent: click.Context | None = None
) -> list[tuple[str, str]]:
    """Each command's help as the CLI prints it: in its parent's context, which passes down
    the group's settings (`-h` as well as `--help`)."""
    settings = dict(command.context_settings) if parent is None else {}
    ctx = click.Context(command, info_name=path[-1], parent=parent, terminal_width=100,
                        max_content_width=100, **settings)  # fmt: skip
    out = [(" ".join(path), command.get_help(ctx))]
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            out += _helps(command.commands[name], [*path, name], ctx)
    return out


def reference() -> str:
    """The reference section: one block per command, its help as `runner CMD --help` prints."""
    from runner.cli import main

    parts = [START, ""]
    for name, text in _helps(main, ["runner"])[1:]:  # the group's own help is the list above
        parts += [f"### `{name}`", "", "```text", text.rstrip(), "```", ""]
    parts.append(END)
    return "\n".join(parts)


def written(page: str) -> str:
    """``page`` with its reference section replaced by the current one."""
    if START not in page:
        return page.rstrip() + "\n\n## Every command\n\n" + reference() + "\n"
    head, rest = page.split(START, 1)
    tail = rest.split(END, 1)[1]
    return head + reference() + tail


if __name__ == "__main__":
    text = PAGE.read_text(encoding="utf-8")
    PAGE.write_text(written(text), encoding="utf-8")
    sys.exit(0)
