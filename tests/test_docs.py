"""The documentation: the site builds with no broken link (mkdocs --strict), and the commands
it names exist (a `runner` subcommand, a `make` target): docs cannot drift from the code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from helpers.project import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), REPO / "macros" / "README.md"]


def test_the_site_builds_with_no_broken_link(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    home = (tmp_path / "site" / "index.html").read_text()
    assert "Your own entity in four files" in home  # the home page is the README


def test_the_commands_the_docs_name_exist() -> None:
    from runner.cli import main

    commands = set(main.commands)
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", (REPO / "Makefile").read_text(), re.M))
    wrong = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for code in re.findall(r"`([^`\n]+)`|```\w*\n(.*?)```", text, re.S):
            snippet = code[0] or code[1]
            for name in re.findall(r"(?:^|[\s(`|])runner ([a-z][a-z-]+)", snippet):
                if name not in commands:
                    wrong.append(f"{page.relative_to(REPO)}: runner {name}")
            for name in re.findall(r"(?:^|[\s(`|&])make ([a-z][a-z0-9-]+)", snippet):
                if name not in targets:
                    wrong.append(f"{page.relative_to(REPO)}: make {name}")
    assert not wrong, wrong


def test_the_cli_reference_is_what_click_says() -> None:
    sys.path.insert(0, str(REPO / "tools"))
    import cli_reference

    page = cli_reference.PAGE.read_text(encoding="utf-8")
    assert cli_reference.written(page) == page, (
        "docs/cli.md is stale: run .venv/bin/python tools/cli_reference.py"
    )


def test_every_declaration_key_the_validation_accepts_is_documented() -> None:
    """Each key of meta.cdc that runner/entities.py accepts is named in the reference page (as
    `key` or `key:` in code), so the reference cannot fall behind the code."""
    from runner import entities as e

    keys = {
        "meta.cdc": e.COMMON_KEYS | e.CHANGE_KEYS | e.DEBEZIUM_KEYS | e.PARTIAL_KEYS
        | e.SNAPSHOT_KEYS | e.TRANSACTION_KEYS,
        "meta.cdc.csv": e.CSV_KEYS,
        "meta.cdc.operation": e.OPERATION_KEYS,
        "meta.cdc.sequence": e.SEQUENCE_KEYS,
        "meta.cdc.debezium": e.DEBEZIUM_CONF_KEYS,
    }  # fmt: skip
    docs = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    code = " ".join(a or b for a, b in re.findall(r"`([^`\n]+)`|```\w*\n(.*?)```", docs, re.S))
    # Each key of meta.cdc is a row of a table (its first cell); each key of a mapping is named
    # in its parent's row, and so is every Debezium preset.
    rows: dict[str, str] = {}
    for line in docs.splitlines():
        if found := re.match(r"\| `([\w.]+)`", line):
            rows[found[1]] = rows.get(found[1], "") + line
    nested = {where.removeprefix("meta.cdc."): names for where, names in keys.items()}
    nested["debezium"] = nested["debezium"] | set(e.DEBEZIUM_POSITIONS)
    missing = [f"meta.cdc.{key}" for key in sorted(nested.pop("meta.cdc")) if key not in rows]
    missing += [
        f"meta.cdc.{parent}.{key}"
        for parent, names in nested.items()
        for key in sorted(names)
        if not re.search(rf"(?<![\w.-]){re.escape(key)}(?=[:\s`,}}.=/]|$)", rows.get(parent, ""))
    ]
    assert not missing, f"declaration keys the reference's tables never name: {missing}"
    # The keys the macros read from a model's or snapshot's meta.cdc (apply, history, ...).
    read = set()
    for path in (REPO / "macros").rglob("*.sql"):
        text = path.read_text(encoding="utf-8")
        read |= set(re.findall(r"get\('cdc'\) or \{\}\)\.get\('(\w+)'|\bmeta\.get\('(\w+)'", text))
    names = {a or b for a, b in read}
    assert {"apply", "history", "hard_deletes"} <= names, names  # the pattern still finds them
    undocumented = sorted(
        n for n in names if not re.search(rf"(?<![\w.-]){n}(?=[:\s`,}}.=]|$)", code)
    )
    assert not undocumented, (
        f"meta.cdc keys the macros read that the docs never name: {undocumented}"
    )


# Functions the docs name that belong to Spark, dbt or SQL, not to this project.
NOT_OURS = {"getOrCreate", "enableHiveSupport", "input_file_name", "snapshot_get_time", "count"}
CODE_ROOTS = ("runner", "audit", "macros", "dbt_project", "tools", "bench", "tests")


def _code_text() -> str:
    """The repository's own code (the files git tracks: no scratch or work folders)."""
    parts = [(REPO / n).read_text(encoding="utf-8") for n in ("Makefile", "profiles.example.yml")]
    tracked = subprocess.run(
        ["git", "ls-files", "--", *CODE_ROOTS], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in tracked:
        path = REPO / name
        if path.suffix in {".py", ".sql", ".yml", ".yaml"} and path.is_file():
            parts.append(path.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(parts)


def test_the_names_the_docs_use_exist() -> None:
    """Environment variables, macros, functions and files named in the docs are in the code:
    a rename in the code fails here until the docs follow."""
    code = _code_text()
    defined = set(re.findall(r"(?:\bdef|\bmacro)\s+(\w+)\s*\(", code))
    wrong = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        where = page.relative_to(REPO)
        for var in set(re.findall(r"\b(CDC_[A-Z][A-Z_]*[A-Z])\b", text)):
            if var not in code:
                wrong.append(f"{where}: environment variable {var}")
        for snippet in re.findall(r"`([^`\n]+)`", text):
            for name in re.findall(r"\bcdc\.(\w+)\(", snippet):
                if name not in defined:
                    wrong.append(f"{where}: macro cdc.{name}")
            for name in re.findall(r"^(\w+)\(\)$", snippet):
                if name not in defined and name not in NOT_OURS:
                    wrong.append(f"{where}: function {name}()")
            # the code's own files (the docs also name files a user writes and outputs)
            code_path = re.fullmatch(r"(?:runner|audit|macros|tools|tests)/[\w./-]*", snippet)
            if code_path and not (REPO / snippet).exists():
                wrong.append(f"{where}: path {snippet}")
            for name in re.findall(r"\bvar\('(\w+)'", snippet):
                if f"var('{name}'" not in code:
                    wrong.append(f"{where}: dbt var {name}")
    assert not wrong, wrong
