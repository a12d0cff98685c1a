"""Landing roots in object storage (docs/landing.md), against a local S3 API (moto's server).

Files as AWS DMS writes them to S3 (the full load in the table's folder, changes in date
folders, `DatePartitionEnabled`), a File uploaded again (the same key and bytes: the same File)
and once more under another key (a DUPLICATE), and a File uploaded in parts that is still open
during the first run and completed before the second: the tables equal the plain-Python oracle
of the completed Files, each File applied once, the open upload never seen; the endpoint comes
from runner.yml, the credentials from the AWS environment. `runner run` as typed, in this
process, on local Spark + Iceberg and on PostgreSQL: the staging Spark (the embedded default's)
reads each object from the spool (runner/spool.py), empty afterwards.

The spool: a File registered by an earlier run is copied when staged, checked against its
content hash (an object rewritten since is refused); a Spark is asked whether it reads a
scheme. An `abfss://` root on Azurite (Azure's storage emulator): listed, hashed and staged,
each File recorded under the root's own spelling (container@account), the credentials from
AZURE_STORAGE_CONNECTION_STRING.

A root that cannot be listed (no such bucket, credentials refused, no endpoint answering) is
one line naming it, from `runner ingest` as typed, and nothing is registered. `--settle` keeps
an object rewritten between its two listings out of the run, even with as many bytes in the
same second (its ETag changed)."""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.project import CHANGES_HISTORY, Cli, audit_rows, make_project, read_table
from helpers.scenario import (
    ROUND_1,
    ROUND_2,
    ROUND_3,
    SAMPLE_SNAPSHOTS,
    current_rows,
    for_table,
    oracle,
    write,
)
from helpers.servers import _free_port, azurite, s3_server

from audit import AuditDB
from runner.destinations import destination_for
from runner.project import Project

pytestmark = [pytest.mark.spark, pytest.mark.dbt]


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with s3_server(tmp_path_factory.mktemp("moto")) as url:
        yield url


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials as the AWS chain finds them (moto takes any); no endpoint in the environment:
    runner.yml gives it."""
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


def remote_landing(root: Path, landing: str, options: dict | None = None) -> None:
    """The project's landing root in object storage (fsspec options in runner.yml),
    customers' globs for DMS's date folders, and only what applies customers (no other
    entity, no dbt test, no snapshot)."""
    settings = yaml.safe_load((root / "runner.yml").read_text()) or {}
    settings["landing_roots"] = [landing]
    if options:
        settings["landing_options"] = options
    (root / "runner.yml").write_text(yaml.safe_dump(settings))
    models = root / "dbt_project" / "models"
    sources = models / "staging" / "cdc_sources.yml"
    doc = yaml.safe_load(sources.read_text())
    customers = next(t for t in doc["sources"][0]["tables"] if t["name"] == "customers")
    customers["meta"]["cdc"]["landing"] = ["customers/*.csv", "customers/*/*/*/*.csv"]
    doc["sources"][0]["tables"] = [customers]  # customers alone, its apply model alone:
    sources.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    (models / "staging" / "stg_accounts.sql").unlink()  # where the Files come from is the point
    (root / "dbt_project" / "snapshots" / "customers_history.yml").unlink()
    conf = yaml.safe_load((models / "customers.yml").read_text())
    for model in conf["models"]:
        model.pop("data_tests", None)
        for column in model.get("columns") or []:
            column.pop("data_tests", None)
    (models / "customers.yml").write_text(yaml.safe_dump(conf, sort_keys=False))


def key_for(name: str) -> str:
    """Where DMS puts a File: the full load in the table's folder, changes by date."""
    if name.startswith("LOAD"):
        return f"dms/customers/{name}"
    return f"dms/customers/{name[:4]}/{name[4:6]}/{name[6:8]}/{name}"


@pytest.mark.parametrize("target", ["local", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_files_as_dms_writes_them_to_s3_are_applied_once_as_from_local_disk(
    spark: Any, cli_project: Any, tmp_path: Path, s3_endpoint: str, aws: None,
    monkeypatch: pytest.MonkeyPatch, target: str,
) -> None:  # fmt: skip
    import boto3

    cli = cli_project(target, without=SAMPLE_SNAPSHOTS + CHANGES_HISTORY)
    monkeypatch.setenv("CDC_SCHEMA", cli.schema)  # this test's own reads
    bucket = f"landing-{uuid.uuid4().hex[:12]}"
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.create_bucket(Bucket=bucket)
    remote_landing(cli.root, f"s3://{bucket}/dms", {"s3": {"endpoint_url": s3_endpoint}})
    project = Project.load(cli.root, target=target)
    local = tmp_path / "files"
    rounds = (ROUND_1, ROUND_2, ROUND_3)
    files = {n: write(local / n, rows) for r in rounds for n, rows in r.items()}
    in_parts = next(iter(ROUND_2))  # uploaded in parts, below
    for name in [*ROUND_1, *ROUND_2]:
        if name != in_parts:
            s3.upload_file(str(files[name]), bucket, key_for(name))
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key_for(in_parts))
    part = s3.upload_part(
        Bucket=bucket, Key=key_for(in_parts), UploadId=upload["UploadId"], PartNumber=1,
        Body=files[in_parts].read_bytes(),
    )  # fmt: skip

    def run() -> dict:
        return dict(json.loads(cli.runner("run", "--json").stdout.strip().splitlines()[-1]))

    def table() -> dict:
        return current_rows(read_table(target, spark, project, cli.schema, "customers"))

    def the_rest() -> None:
        s3.complete_multipart_upload(
            Bucket=bucket, Key=key_for(in_parts), UploadId=upload["UploadId"],
            MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]},
        )  # fmt: skip
        for name in ROUND_3:
            s3.upload_file(str(files[name]), bucket, key_for(name))
        again = next(iter(ROUND_1))  # a File uploaded again (the same key, the same bytes) ...
        s3.upload_file(str(files[again]), bucket, key_for(again))
        copy = f"dms/customers/2026/03/02/{again}"  # ... and once more under another key
        s3.upload_file(str(files[again]), bucket, copy)

    first = run()  # while one File is still uploading
    done = [files[n] for n in [*ROUND_1, *ROUND_2] if n != in_parts]
    assert first["ingest"]["registered"] == len(done)
    assert table() == oracle(sorted(done, key=lambda p: p.name))
    the_rest()
    second = run()
    counts = (second["ingest"]["registered"], second["ingest"]["duplicates"])
    assert counts == (1 + len(ROUND_3) + 1, 1)
    assert table() == oracle(sorted(files.values(), key=lambda p: p.name))

    # each File applied once, by the name it has in the bucket
    markers = for_table(destination_for(project).markers(spark), "customers")
    assert Counter(m["file_name"] for m in markers) == {n: 1 for n in files}
    states = dict(audit_rows(cli, "select state, count(*) from files group by state"))
    assert states == {"COMMITTED": len(files), "DUPLICATE": 1}, states
    committed = audit_rows(cli, "select path from files where state = 'COMMITTED'")
    assert {p for (p,) in committed} == {f"s3://{bucket}/{key_for(n)}" for n in files}
    spool = project.state_dir / "spool"
    assert not spool.exists() or not any(spool.iterdir())


def test_a_root_that_cannot_be_listed_is_one_line_naming_it(
    tmp_path: Path, s3_endpoint: str, aws: None
) -> None:
    import boto3

    root = make_project(tmp_path / "repo", without=SAMPLE_SNAPSHOTS + CHANGES_HISTORY)
    cli = Cli(root, "local", "cdc_s3_errors", in_process=True)
    cli.env.update(AWS_MAX_ATTEMPTS="1")  # the client's own retries: one attempt
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket="there")

    def said(endpoint: str, landing: str) -> str:
        settings = yaml.safe_load((root / "runner.yml").read_text()) or {}
        settings["landing_options"] = {"s3": {"endpoint_url": endpoint}}
        (root / "runner.yml").write_text(yaml.safe_dump(settings))
        out = cli.runner("ingest", "--landing", landing, ok=(2,))
        lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and landing in lines[0], out.stderr
        return lines[0]

    lines = [said(s3_endpoint, "s3://nobucket/dms")]
    assert "bucket 'nobucket' does not exist" in lines[-1]
    with s3_server(tmp_path / "moto-auth", check_credentials=True) as strict:
        lines.append(said(strict, "s3://there/dms"))
        assert "access denied" in lines[-1]
    lines.append(said(f"http://127.0.0.1:{_free_port()}", "s3://there/dms"))
    assert "cannot be listed" in lines[-1]
    db = AuditDB(f"sqlite:///{root / '.cdc' / 'local' / 'audit.db'}")
    assert db.files() == []
    db.dispose()
    # Each run's record says why it failed, as `runner runs` shows it (newest first).
    runs = json.loads(cli.runner("runs", "--json").stdout)
    assert [(r["outcome"], r["detail"]) for r in runs] == [
        ("error", line.removeprefix("error: ")) for line in reversed(lines)
    ]
    shown = cli.runner("runs").stdout
    assert all(line.removeprefix("error: ")[:40] in shown for line in lines), shown


def test_settle_leaves_out_an_object_rewritten_between_two_listings(
    tmp_path: Path, s3_endpoint: str, aws: None
) -> None:
    import boto3

    from runner.discover import discover, settle
    from runner.entities import load_entities
    from runner.fs import RemoteFile, configure

    bucket = f"settle-{uuid.uuid4().hex[:12]}"
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.create_bucket(Bucket=bucket)
    for name in ("20260301-080500000.csv", "20260301-081000000.csv"):
        s3.put_object(Bucket=bucket, Key=f"customers/{name}", Body=b"Op,x\nI,1\n")
    configure({"s3": {"endpoint_url": s3_endpoint}})
    root = make_project(tmp_path / "repo", without=SAMPLE_SNAPSHOTS + CHANGES_HISTORY)
    entity = load_entities(Project.load(root, target="local"))["customers"]
    listed, _ = discover(entity, [RemoteFile(f"s3://{bucket}")])
    assert [f.name for f in listed] == ["20260301-080500000.csv", "20260301-081000000.csv"]

    def rewrite(_seconds: float) -> None:  # within the window: the same size, other bytes
        s3.put_object(Bucket=bucket, Key="customers/20260301-081000000.csv", Body=b"Op,x\nU,2\n")

    kept, notes = settle(listed, 1.0, sleep=rewrite)
    assert [f.name for f in kept] == ["20260301-080500000.csv"]
    assert "20260301-081000000.csv: size, mtime or ETag changed" in notes[0]


def test_the_spool_is_used_where_spark_cannot_read_the_scheme(
    spark: Any, tmp_path: Path, s3_endpoint: str, aws: None
) -> None:
    import boto3

    from runner.errors import TerminalError
    from runner.fs import RemoteFile, configure
    from runner.hashing import content_hash
    from runner.spool import Spool, spark_reads

    root = make_project(tmp_path / "repo")
    spooled = {t: destination_for(Project.load(root, target=t)).spools_remote_files
               for t in ("local", "postgres", "cluster")}  # fmt: skip
    assert spooled == {"local": True, "postgres": True, "cluster": False}
    assert not spark_reads(spark, "s3://bucket/x.csv")  # no connector in the embedded default
    assert spark_reads(spark, f"file://{tmp_path}/x.csv")

    bucket = f"spool-{uuid.uuid4().hex[:12]}"
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="customers/a.csv", Body=b"Op,x\nI,1\n")
    configure({"s3": {"endpoint_url": s3_endpoint}})
    remote = RemoteFile(f"s3://{bucket}/customers/a.csv")
    registered = content_hash(remote)
    spool = Spool(tmp_path / "spool", "run-1", eager=False)
    copy = spool.local_copy(remote, registered)  # staged by a later run: fetched now
    assert copy.read_bytes() == b"Op,x\nI,1\n" and copy.name == "a.csv"
    spool.release([registered])
    assert not copy.exists()
    s3.put_object(Bucket=bucket, Key="customers/a.csv", Body=b"Op,x\nU,2\n")
    with pytest.raises(TerminalError, match="a.csv: its bytes changed since the File was"):
        spool.local_copy(remote, registered)
    spool.close()
    assert not (tmp_path / "spool" / "run-1").exists()


@pytest.mark.postgres
def test_an_abfss_root_on_azurite_is_staged_as_a_local_one(
    spark: Any, cli_project: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.storage.blob import BlobServiceClient

    with azurite(tmp_path / "azurite") as connection:
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", connection)
        cli = cli_project("postgres", without=SAMPLE_SNAPSHOTS + CHANGES_HISTORY)
        landing = "abfss://landing@devstoreaccount1.dfs.core.windows.net/dms"
        remote_landing(cli.root, landing)
        service = BlobServiceClient.from_connection_string(connection)
        service.create_container("landing")
        files = {n: write(tmp_path / "files" / n, rows) for n, rows in ROUND_1.items()}
        for name, path in files.items():
            blob = service.get_blob_client("landing", key_for(name))
            blob.upload_blob(path.read_bytes())
        out = json.loads(cli.runner("ingest", "--json").stdout.strip().splitlines()[-1])
        assert (out["staged"], out["rows"]) == (len(files), sum(map(len, ROUND_1.values())))
        paths = {p for (p,) in audit_rows(cli, "select path from files")}
        prefix = landing.removesuffix("/dms")
        assert paths == {f"{prefix}/{key_for(n)}" for n in files}


def test_a_watch_whose_bucket_does_not_answer_says_so_and_polls_again(
    tmp_path: Path, aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from runner.invocation import Invocation
    from runner.watch import Stop, watch

    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    root = make_project(tmp_path / "repo", without=SAMPLE_SNAPSHOTS + CHANGES_HISTORY)
    dead = f"http://127.0.0.1:{_free_port()}"
    remote_landing(root, "s3://there/dms", {"s3": {"endpoint_url": dead}})
    inv = Invocation.of(Project.load(root, target="local"))
    stop = Stop()

    said: list[str] = []

    class StopAfterTwo(logging.Handler):  # the watch is stopped once it has said so twice
        def emit(self, record: logging.LogRecord) -> None:
            if "polling again" in record.getMessage():
                said.append(record.getMessage())
                if len(said) >= 2:
                    stop.event.set()

    handler = StopAfterTwo(logging.WARNING)
    logging.getLogger("runner").addHandler(handler)
    deadline = threading.Timer(120.0, stop.event.set)  # a watch that never says it again
    deadline.start()
    try:
        batches = watch(inv, interval=0.2, stop=stop, report=lambda _batch: None)
    finally:
        deadline.cancel()
        logging.getLogger("runner").removeHandler(handler)
        inv.close()
    assert batches == []  # nothing to do, and still watching until stopped
    assert len(said) >= 2, said
    assert said[0].startswith("landing root s3://there/dms cannot be listed"), said[0]
