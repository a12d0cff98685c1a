"""runner.yml's retention and maintain_every: read with their defaults, and a wrong value is
one ConfigError naming the file and the key (no Spark, no database)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.errors import ConfigError
from runner.project import RunnerSettings


def _load(tmp_path: Path, text: str) -> RunnerSettings:
    (tmp_path / "runner.yml").write_text(text)
    return RunnerSettings.load(tmp_path)


def test_retention_is_off_unless_said_and_per_entity_overrides(tmp_path: Path) -> None:
    plain = _load(tmp_path, "landing_roots: [landing]\n")
    assert plain.retention.staged_days_of("customers") is None
    assert (plain.retention.events_days, plain.retention.snapshot_days) == (None, 1.0)
    assert plain.maintain_every is None
    said = _load(
        tmp_path,
        "retention:\n  staged_days: 30\n  events_days: 90\n  snapshot_days: 0\n"
        "  entities:\n    customers: {staged_days: 7}\nmaintain_every: 50\n",
    )
    assert said.retention.staged_days_of("customers") == 7
    assert said.retention.staged_days_of("accounts") == 30
    assert (said.retention.events_days, said.retention.snapshot_days) == (90, 0)
    assert said.maintain_every == 50


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("retention: {staged_days: -1}\n", "retention.staged_days must be a number of days >= 0"),
        ("retention: {staged_days: soon}\n", "retention.staged_days must be a number of days"),
        ("retention: {keep: 3}\n", "retention: unknown keys ['keep']"),
        ("retention: {entities: {customers: {events_days: 1}}}\n", "accepts staged_days only"),
        ("maintain_every: 0\n", "maintain_every must be a number of runs >= 1"),
        ("maintain_every: true\n", "maintain_every must be a number of runs >= 1"),
    ],
)
def test_a_wrong_retention_setting_is_one_clear_error(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _load(tmp_path, text)
    assert says in str(raised.value) and "runner.yml" in str(raised.value)
