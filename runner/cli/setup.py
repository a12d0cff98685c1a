"""The commands around the pipeline: `init` (a checkout's profiles, jars and Java), `generate`
(sample Files), `audit upgrade`, and the embedded default's catalog (`drop-catalog`,
`migrate-catalog`)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import click
import yaml

from audit import AuditDB, redact_url
from runner.cli.options import Context, global_options
from runner.destinations.spark.catalog import drop_schema, jdbc_catalogs, migrate_derby
from runner.destinations.spark.class_archive import make_archive
from runner.destinations.spark.session import check_java, link_iceberg_jar, link_jdbc_driver
from runner.errors import UsageError
from runner.samples import write_samples
from runner.scaffold import propose, write


@click.command()
@global_options
@click.option("--entity", "entity_name", default="customers", show_default=True)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="Folder to write to (default: <first landing root>/<entity>).",
)
@click.option(
    "--snapshot",
    is_flag=True,
    help="Daily full extracts for a snapshot entity (mode: snapshot) instead of DMS changes.",
)
@click.option(
    "--initial",
    default=1000,
    show_default=True,
    help="Rows of the full load (--snapshot: of the first day's extract).",
)
@click.option(
    "--incremental",
    default=1000,
    show_default=True,
    help="Change rows after it (--snapshot: rows of each later day's extract).",
)
@click.option("--files", default=10, show_default=True, help="Change Files to spread them over.")
@click.option("--days", default=3, show_default=True, help="--snapshot: extracts, one a day.")
@click.option(
    "--start",
    type=click.DateTime(formats=["%Y-%m-%d"]),
    default="2026-03-01",
    show_default=True,
    help="--snapshot: the first extract's date.",
)
@click.option("--delete-share", default=0.2, show_default=True)
@click.option(
    "--update-share",
    default=0.4,
    show_default=True,
    help="The rest are inserts (--snapshot: the rest of the keys are unchanged).",
)
@click.option("--seed", default=7, show_default=True)
@click.option(
    "--key-columns",
    type=int,
    help="A synthetic entity with this many bigint key columns (not a declared one); "
    "its declaration is printed so it can be added to the dbt project.",
)
@click.option(
    "--value-columns",
    type=int,
    default=6,
    show_default=True,
    help="Non-key columns of the synthetic entity.",
)
@click.pass_obj
def generate(obj: Context, entity_name: str, out: str | None, **options: Any) -> None:
    """Write deterministic DMS-style CSV Files for an entity (tests, demos, benchmarks), or
    with --snapshot one full extract a day for a snapshot entity."""
    said = write_samples(obj.project(), entity_name, out, **options)
    for line in said:
        click.echo(line)


@click.group()
def audit() -> None:
    """Manage the Audit DB."""


@audit.command("upgrade")
@global_options
@click.pass_obj
def audit_upgrade(obj: Context) -> None:
    """Create or migrate the Audit DB tables to the newest revision."""
    inv = obj.invocation()
    db = AuditDB(inv.audit_url, schema=inv.audit_schema)
    try:
        db.upgrade()
        click.echo(
            f"Audit DB {redact_url(inv.audit_url)}"
            + (f" (schema {inv.audit_schema})" if inv.audit_schema else "")
            + f" is at revision {db.current_revision()}"
        )
    finally:
        db.dispose()


@click.command("drop-catalog")
@global_options
@click.option("--yes", is_flag=True, help="Really drop it (otherwise: say what would go).")
@click.pass_obj
def drop_catalog(obj: Context, yes: bool) -> None:
    """Drop the target's Spark catalog schema in PostgreSQL (`make clean`, with the warehouse
    folder): every table and view it lists is forgotten."""
    conf = obj.invocation().destination.spark_conf()
    found = jdbc_catalogs(conf)
    if not found:
        click.echo("this target has no JDBC catalog on PostgreSQL; nothing to drop")
        return
    if not yes:
        for c in found:
            click.echo(f"would drop the catalog on {c.where()}")
        raise UsageError("add --yes to drop it")
    for where in drop_schema(conf):
        click.echo(f"dropped the catalog on {where}")


@click.command("migrate-catalog")
@global_options
@click.option(
    "--warehouse",
    type=click.Path(file_okay=False, exists=True),
    help="The Derby-era warehouse folder (default: <state_dir>/<target>/warehouse).",
)
@click.pass_obj
def migrate_catalog(obj: Context, warehouse: str | None) -> None:
    """Register the Iceberg tables of a warehouse made under the former Derby metastore in the
    target's JDBC catalog (views come back with the next `dbt build`)."""
    inv = obj.invocation()
    project = inv.project
    folder = Path(warehouse) if warehouse else project.state_dir / project.target_name / "warehouse"
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such warehouse folder")
    done = migrate_derby(inv.spark, folder)
    for name in done:
        click.echo(f"registered {name}")
    click.echo(f"{len(done)} tables registered from {folder}")


@click.command("new-entity")
@global_options
@click.argument("name")
@click.option(
    "--from",
    "sample",
    required=True,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="One sample File: CSV with a header, JSON lines, Parquet, or Debezium JSON lines.",
)
@click.option("--keys", multiple=True, help="The column(s) identifying a row (repeatable).")
@click.option(
    "--format", "fmt", type=click.Choice(["csv", "json", "parquet", "debezium"]),
    help="The sample's format (default: from its name; Debezium from its events).",
)  # fmt: skip
@click.option("--sequence", help="The column ordering the changes (default: DMS's).")
@click.option("--yes", is_flag=True, help="Write without asking.")
@click.pass_obj
def new_entity(
    obj: Context,
    name: str,
    sample: Path,
    keys: tuple[str, ...],
    fmt: str | None,
    sequence: str | None,
    yes: bool,
) -> None:
    """Propose a new entity from one sample File and write its four files into the dbt
    project (declaration, staging view, apply model and its config), never overwriting one."""
    project = obj.project()
    proposal = propose(name, sample, keys=list(keys), fmt=fmt, sequence=sequence)
    click.echo(proposal.source_yaml().rstrip())
    for note in proposal.notes:
        click.echo(f"note: {note}")
    if not yes and not click.confirm("write the declaration, staging view and apply model?"):
        click.echo("nothing written")  # the user's answer, not an error: exit 0
        return
    for path in write(proposal, project.dbt_project_dir):
        click.echo(f"wrote {path}")
    roots = project.settings.landing_roots
    click.echo(
        f"next: land the Files in {roots[0] if roots else '<a landing root>'}/{name}/, then "
        "`runner run`"
    )


@click.command()
@global_options
@click.pass_obj
def init(obj: Context) -> None:
    """Prepare a checkout: ./profiles.yml from the example, the Iceberg jar link, Java check,
    and the environment's Spark class archive (a faster start for every Spark session)."""
    root = Path(obj.project_dir or ".").resolve()
    profiles = root / "profiles.yml"
    example = root / "profiles.example.yml"
    if not profiles.exists():
        if not example.exists():
            raise UsageError(f"{example} is missing; is {root} the repository root?")
        profiles.write_text(own_home(own_catalog(example.read_text(), root), root))
        click.echo(f"wrote {profiles} from {example.name}")
    else:
        click.echo(f"kept existing {profiles}")
        text = profiles.read_text()
        if DEFAULT_HOME in text:  # written by an earlier setup: its paths relative to the cwd
            profiles.write_text(own_home(text, root))
            click.echo(f"{profiles.name}: the project's paths made absolute (CDC_HOME's default)")
        if example.exists():

            def targets(path: Path) -> set[str]:
                data = yaml.safe_load(path.read_text()) or {}
                return set((data.get("cdc") or {}).get("outputs") or {})

            missing = sorted(targets(example) - targets(profiles))
            local = ((yaml.safe_load(profiles.read_text()) or {}).get("cdc") or {}).get(
                "outputs", {}
            ).get("local") or {}
            params = local.get("server_side_parameters") or {}
            if str(params.get("spark.sql.catalog.spark_catalog.type", "")).lower() == "hive":
                click.echo(
                    f"note: {profiles.name}'s local target keeps the Derby metastore (one process "
                    f"at a time); copy the local target of {example.name} over it and run "
                    "`runner migrate-catalog` (docs/destinations.md: The embedded default)"
                )
            if missing:
                click.echo(
                    f"note: {profiles.name} lacks the target(s) {', '.join(missing)} of "
                    f"{example.name}; copy them over to use them"
                )
    click.echo(f"Iceberg runtime: {link_iceberg_jar(root)}")
    click.echo(f"PostgreSQL JDBC driver (Spark catalog): {link_jdbc_driver(root)}")
    click.echo(f"Java: {check_java()}")
    made = make_archive(
        on_start=lambda: click.echo(
            "writing the Spark class archive: one Spark session's start and a few small jobs, "
            "once per environment (usually 30 to 90 s)"
        )
    )
    if made is not None:
        path, seconds = made
        click.echo(
            f"Spark class archive: {path}" + (f" (written in {seconds:.0f} s)" if seconds else "")
        )


DEFAULT_CATALOG = "env_var('CDC_CATALOG_SCHEMA', 'cdc_catalog')"
DEFAULT_HOME = "env_var('CDC_HOME', '.')"


def own_home(profiles: str, root: Path) -> str:
    """``profiles`` with this checkout's absolute path as CDC_HOME's default, so that the
    profile's jars and warehouse are found whichever folder `dbt` runs from (inside
    dbt_project/, as dbt users do). The path is written as a Jinja string inside a YAML
    double-quoted string: quotes and backslashes escaped for both."""
    jinja = str(root.resolve()).replace("\\", "\\\\").replace("'", "\\'")
    text = jinja.replace("\\", "\\\\").replace('"', '\\"')
    return profiles.replace(DEFAULT_HOME, f"env_var('CDC_HOME', '{text}')")


def own_catalog(profiles: str, root: Path) -> str:
    """``profiles`` (the example's text) with a catalog schema of this checkout's own as the
    default: two clones on one PostgreSQL server never see each other's tables."""
    name = "cdc_catalog_" + hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:10]
    return profiles.replace(DEFAULT_CATALOG, f"env_var('CDC_CATALOG_SCHEMA', '{name}')")
