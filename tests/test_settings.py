"""runner.yml's retention and maintain_every: read with their defaults, and a wrong value is
one ConfigError naming the file and the key (no Spark, no database). profiles.yml: the runner's
rendering of a target is dbt's own, with or without importing dbt."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.project import REPO

from runner.errors import ConfigError
from runner.project import RunnerSettings, _env_vars_rendered, load_yaml


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


def test_a_profile_renders_as_dbt_renders_it_without_importing_dbt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every target of profiles.example.yml, with its variables unset and set, and the cases
    around them, rendered without dbt equal dbt's ProfileRenderer's result; any other Jinja, or a
    variable that is not set and has no default, is left to dbt."""
    from dbt.config.renderer import ProfileRenderer
    from dbt_common.context import set_invocation_context

    def dbt_renders(value: object) -> object:
        set_invocation_context(dict(os.environ))
        return ProfileRenderer({}).render_data({"v": value})["v"]

    outputs = load_yaml((REPO / "profiles.example.yml").read_text())["cdc"]["outputs"]
    cases = [
        *outputs.values(),
        "{{env_var(\"CDC_T_SET\",'9')}}:{{ env_var('CDC_T_UNSET', '') }}x",
        "{{ env_var('CDC_T_UNSET', '[1, 2]') }}",
        " {{ env_var('CDC_T_SET') }} ",
        "{{ env_var('CDC_T_UNSET', '5432') | int }}",
        "{{ env_var('CDC_T_UNSET', '2.5') | int }}",
        "{{ env_var('CDC_T_UNSET', 'x') | int }}",
        ["{{ env_var('CDC_T_SET') }}", 3, None, True, 2.5],
    ]
    for setting in ({}, {"CDC_PG_PORT": "5433", "CDC_SCHEMA": "s1", "CDC_T_SET": "7"}):
        for name in ("CDC_PG_PORT", "CDC_SCHEMA", "CDC_T_SET", "CDC_T_UNSET"):
            monkeypatch.delenv(name, raising=False)
        for name, value in setting.items():
            monkeypatch.setenv(name, value)
        for case in cases[:-7] if not setting else cases:
            ok, rendered = _env_vars_rendered(case)
            assert ok, case
            assert rendered == dbt_renders(case), case
    for left_to_dbt in (
        "{{ env_var('CDC_T_UNSET') }}",  # dbt says it is required
        "{{ env_var('CDC_T_SET') | int }}:1",
        "{{ env_var('CDC_T_SET') | float }}",
        "{{ 'a' ~ 'b' }}",
        "{% if true %}x{% endif %}",
        {"nested": ["{{ target.name }}"]},
    ):
        assert _env_vars_rendered(left_to_dbt) == (False, None), left_to_dbt
