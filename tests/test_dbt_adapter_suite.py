"""dbt's own adapter test suite (dbt-tests-adapter) for snapshots and incremental models, run on
PostgreSQL with the `cdc` package installed the way a project installs it (packages and the
`dispatch:` entry that lets it override dbt's macros).

What it shows: the package changes nothing for models that are not apply models, and its
snapshot process-id columns change nothing else of dbt's snapshots. Every snapshot here asks for
those columns (`meta: {cdc: {process_ids: true}}` on all snapshots), so the package's snapshot
macros, not dbt's, build them; dbt's comparisons are told to ignore the `_cdc_` columns, the
only difference there is meant to be. dbt's own assertions do the rest.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import dbt.tests.util as dbt_util
import pytest
import yaml
from dbt.tests.adapter.basic.test_base import BaseSimpleMaterializations
from dbt.tests.adapter.basic.test_incremental import (
    BaseIncremental,
    BaseIncrementalBadStrategy,
    BaseIncrementalNotSchemaChange,
)
from dbt.tests.adapter.basic.test_snapshot_check_cols import BaseSnapshotCheckCols
from dbt.tests.adapter.basic.test_snapshot_timestamp import BaseSnapshotTimestamp
from dbt.tests.adapter.incremental.test_incremental_merge_exclude_columns import (
    BaseMergeExcludeColumns,
)
from dbt.tests.adapter.incremental.test_incremental_microbatch import BaseMicrobatch
from dbt.tests.adapter.incremental.test_incremental_on_schema_change import (
    BaseIncrementalOnSchemaChange,
)
from dbt.tests.adapter.incremental.test_incremental_predicates import (
    BaseIncrementalPredicates,
)
from dbt.tests.adapter.incremental.test_incremental_unique_id import (
    BaseIncrementalUniqueKey,
)
from dbt.tests.adapter.simple_snapshot.new_record_check_mode import (
    BaseSnapshotNewRecordCheckMode,
)
from dbt.tests.adapter.simple_snapshot.new_record_dbt_valid_to_current import (
    BaseSnapshotNewRecordDbtValidToCurrent,
)
from dbt.tests.adapter.simple_snapshot.new_record_timestamp_mode import (
    BaseSnapshotNewRecordTimestampMode,
)
from dbt.tests.adapter.simple_snapshot.test_ephemeral_snapshot_hard_deletes import (
    BaseSnapshotEphemeralHardDeletes,
    BaseSnapshotNewColumnSpecificCheckCols,
    BaseSnapshotNewColumnTimestampStrategy,
    BaseSnapshotNewColumnWithDeletes,
)
from dbt.tests.adapter.simple_snapshot.test_snapshot import (
    BaseSimpleSnapshot,
    BaseSnapshotCheck,
)
from dbt.tests.adapter.simple_snapshot.test_various_configs import (
    BaseSnapshotColumnNames,
    BaseSnapshotColumnNamesFromDbtProject,
    BaseSnapshotDbtValidToCurrent,
    BaseSnapshotInvalidColumnNames,
    BaseSnapshotMultiUniqueKey,
)

# dbt's test fixtures (project, adapter, unique_schema, ...), by import: pytest finds fixtures
# in a test module's namespace.
from dbt.tests.fixtures.project import *  # noqa: F403
from helpers.project import PG_URL, REPO

pytestmark = [pytest.mark.postgres, pytest.mark.dbt]

PACKAGE = REPO / "macros"


@pytest.fixture(scope="class")
def dbt_profile_target(pg_url: str) -> dict[str, Any]:
    from sqlalchemy.engine import make_url

    url = make_url(PG_URL)
    return {
        "type": "postgres",
        "threads": 2,
        "host": url.host or "127.0.0.1",
        "port": url.port or 5432,
        "user": url.username or "postgres",
        "pass": url.password or "",
        "dbname": url.database or "test",
    }


@pytest.fixture(scope="class")
def dbt_project_yml(project_root: Any, project_config_update: Any) -> dict[str, Any]:
    """dbt's fixture of the same name, plus what a project installing `cdc` adds: the package
    (as `dbt deps` would put it), the dispatch entry, and process ids on every snapshot."""
    config: dict[str, Any] = {
        "name": "test",
        "profile": "test",
        "flags": {"send_anonymous_usage_stats": False},
    }
    update = project_config_update
    if isinstance(update, str):
        update = yaml.safe_load(update)
    config.update(update or {})
    config["dispatch"] = [{"macro_namespace": "dbt", "search_order": ["test", "cdc", "dbt"]}]
    snapshots = config.setdefault("snapshots", {})
    snapshots["+meta"] = {"cdc": {"process_ids": True}}
    root = Path(str(project_root))
    (root / "dbt_project.yml").write_text(yaml.safe_dump(config))
    shutil.copytree(PACKAGE, root / "dbt_packages" / "cdc", dirs_exist_ok=True)
    return config


@pytest.fixture(autouse=True)
def _ignore_cdc_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """dbt's relation comparisons, minus the package's `_cdc_` snapshot columns."""
    original = dbt_util.check_relations_equal_with_relations

    def compare(adapter: Any, relations: list, compare_snapshot_cols: bool = False) -> None:
        get_columns = adapter.get_columns_in_relation

        def without_cdc(relation: Any) -> list:
            return [c for c in get_columns(relation) if not c.name.lower().startswith("_cdc_")]

        monkeypatch.setattr(adapter, "get_columns_in_relation", without_cdc)
        try:
            original(adapter, relations, compare_snapshot_cols=compare_snapshot_cols)
        finally:
            monkeypatch.setattr(adapter, "get_columns_in_relation", get_columns)

    monkeypatch.setattr(dbt_util, "check_relations_equal_with_relations", compare)


class TestSimpleMaterializations(BaseSimpleMaterializations):
    """dbt's views, tables and their swaps, with the package's PostgreSQL view materialization
    forwarded to as a project's dbt_project/macros/materializations.sql does."""

    @pytest.fixture(scope="class")
    def macros(self) -> dict[str, str]:
        forward = REPO / "dbt_project" / "macros" / "materializations.sql"
        return {"materializations.sql": forward.read_text()}

    def test_the_package_built_the_views(self, project: Any) -> None:
        dbt_util.run_dbt(["seed"])
        _, log = dbt_util.run_dbt_and_capture(["--debug", "run", "--select", "view_model"])
        assert "hashtextextended('cdc view " in log


class TestSnapshotCheckCols(BaseSnapshotCheckCols):
    pass


class TestSnapshotTimestamp(BaseSnapshotTimestamp):
    pass


class TestIncremental(BaseIncremental):
    pass


class TestIncrementalNotSchemaChange(BaseIncrementalNotSchemaChange):
    pass


class TestIncrementalBadStrategy(BaseIncrementalBadStrategy):
    pass


class TestMergeExcludeColumns(BaseMergeExcludeColumns):
    pass


class TestIncrementalOnSchemaChange(BaseIncrementalOnSchemaChange):
    pass


class TestIncrementalPredicatesDeleteInsert(BaseIncrementalPredicates):
    pass


class TestIncrementalUniqueKey(BaseIncrementalUniqueKey):
    pass


class TestSimpleSnapshot(BaseSimpleSnapshot):
    def test_the_package_built_this_snapshot(self, project: Any) -> None:
        """The comparisons above ran on a snapshot the package's macros built (not dbt's alone)."""
        relation = dbt_util.relation_from_name(project.adapter, "snapshot")
        with dbt_util.get_connection(project.adapter):
            names = {c.name for c in project.adapter.get_columns_in_relation(relation)}
        assert {"_cdc_insert_process_id", "_cdc_update_process_id"} <= names, names


class TestSnapshotCheck(BaseSnapshotCheck):
    pass


class TestSnapshotColumnNames(BaseSnapshotColumnNames):
    pass


class TestSnapshotColumnNamesFromDbtProject(BaseSnapshotColumnNamesFromDbtProject):
    pass


class TestSnapshotInvalidColumnNames(BaseSnapshotInvalidColumnNames):
    pass


class TestSnapshotDbtValidToCurrent(BaseSnapshotDbtValidToCurrent):
    pass


class TestSnapshotMultiUniqueKey(BaseSnapshotMultiUniqueKey):
    pass


class TestSnapshotNewRecordTimestampMode(BaseSnapshotNewRecordTimestampMode):
    pass


class TestSnapshotNewRecordCheckMode(BaseSnapshotNewRecordCheckMode):
    pass


class TestSnapshotNewRecordDbtValidToCurrent(BaseSnapshotNewRecordDbtValidToCurrent):
    pass


class TestSnapshotEphemeralHardDeletes(BaseSnapshotEphemeralHardDeletes):
    pass


class TestSnapshotNewColumnTimestampStrategy(BaseSnapshotNewColumnTimestampStrategy):
    pass


class TestSnapshotNewColumnSpecificCheckCols(BaseSnapshotNewColumnSpecificCheckCols):
    pass


class TestSnapshotNewColumnWithDeletes(BaseSnapshotNewColumnWithDeletes):
    pass


class TestMicrobatch(BaseMicrobatch):
    pass
