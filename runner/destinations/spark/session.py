"""The one place a SparkSession is built, for staging and for dbt run in-process.

Which settings: the destination says (``runner/destinations``). For a Spark target they are the
target's ``server_side_parameters`` in profiles.yml, read through dbt-spark's own credentials
class, so the runner's session and a standalone ``dbt build`` get the same settings from the
same source. For other targets Spark only stages Files, with ``DEFAULT_STAGING_CONF`` plus
runner.yml's ``staging_spark_conf``.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from runner.destinations.spark.catalog import ensure_schema
from runner.destinations.spark.class_archive import with_archive
from runner.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from runner.project import Project

ICEBERG_RUNTIME_JAR = "iceberg-spark-runtime-3.5_2.12-1.9.2.jar"
ICEBERG_WHEEL = "snowpark_connect_deps_iceberg"
# Where `make setup` links the jar; profiles.example.yml points spark.jars here.
LINKED_JAR_DIR = "jars"

DEFAULT_STAGING_CONF: dict[str, str] = {
    "spark.master": "local[2]",
    "spark.driver.memory": os.environ.get("CDC_SPARK_MEMORY", "4g"),
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.codegen.cache.maxEntries": "2000",  # as in profiles.example.yml
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.ansi.enabled": "false",
}


def installed_iceberg_jar() -> Path:
    """The Iceberg Spark runtime jar shipped in the installed wheel."""
    spec = importlib.util.find_spec(ICEBERG_WHEEL)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"the Iceberg runtime wheel ({ICEBERG_WHEEL}) is not installed; run `make setup`, "
            "or set spark.jars.packages in the profile where Maven is reachable"
        )
    jar = Path(next(iter(spec.submodule_search_locations))) / "jars" / ICEBERG_RUNTIME_JAR
    if not jar.exists():
        raise ConfigError(f"{jar} is missing from the installed {ICEBERG_WHEEL} wheel")
    return jar


def link_iceberg_jar(root: Path) -> Path:
    """Make ``<root>/jars/<runtime jar>`` point at the installed wheel's jar."""
    target = installed_iceberg_jar()
    link = root / LINKED_JAR_DIR / ICEBERG_RUNTIME_JAR
    link.parent.mkdir(parents=True, exist_ok=True)
    if (link.is_symlink() or link.exists()) and link.resolve() == target.resolve():
        return link
    try:
        _replace_with_link(link, target)
    except OSError:
        shutil.copyfile(target, link)
    return link


def _replace_with_link(link: Path, target: Path) -> None:
    """``link`` -> ``target``, atomically: two processes starting at once may both do it."""
    temporary = link.with_name(f".{link.name}.{os.getpid()}")
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(target)
    os.replace(temporary, link)


# The JDBC driver of the local target's catalog (Debian: libpostgresql-jdbc-java).
JDBC_DRIVER_JAR = "postgresql.jar"
JDBC_DRIVER_SOURCES = (Path("/usr/share/java/postgresql.jar"),)
JDBC_DRIVER_HINT = (
    "apt-get install -y libpostgresql-jdbc-java (Debian/Ubuntu), or copy PostgreSQL's JDBC "
    "driver to jars/postgresql.jar"
)


def link_jdbc_driver(root: Path) -> Path:
    """Make ``<root>/jars/postgresql.jar`` point at the system's PostgreSQL JDBC driver."""
    link = root / LINKED_JAR_DIR / JDBC_DRIVER_JAR
    if link.exists() and not link.is_symlink():
        return link  # a copy the user put there
    source = next((p for p in JDBC_DRIVER_SOURCES if p.exists()), None)
    if source is None:
        if link.exists():
            return link
        raise ConfigError(
            f"the PostgreSQL JDBC driver (for the Spark catalog) is missing: {JDBC_DRIVER_HINT}"
        )
    link.parent.mkdir(parents=True, exist_ok=True)
    if not (link.is_symlink() and link.resolve() == source.resolve()):
        _replace_with_link(link, source)
    return link


def _ensure_runtime(conf: dict[str, str], project: Project) -> None:
    """Check the Iceberg runtime is reachable; re-link the wheel's jar when that is the gap."""
    if "iceberg" in conf.get("spark.jars.packages", ""):
        return
    jars = [j for j in conf.get("spark.jars", "").split(",") if j]
    for jar in jars:
        path = Path(jar.removeprefix("file:"))
        if path.exists():
            continue
        linked = path.parent.resolve() == (project.root / LINKED_JAR_DIR).resolve()
        if linked and path.name == ICEBERG_RUNTIME_JAR:
            link_iceberg_jar(project.root)
        elif linked and path.name == JDBC_DRIVER_JAR:
            link_jdbc_driver(project.root)
        else:
            raise ConfigError(f"spark.jars names {path}, which does not exist")


def check_java() -> str:
    """Return the Java version line, or raise with what to install."""
    java = shutil.which(
        "java", path=os.environ.get("JAVA_HOME", "") + "/bin:" + os.environ.get("PATH", "")
    )
    if java is None:
        raise ConfigError(
            "Java 17 or newer is needed for Spark and was not found on PATH; on Debian/Ubuntu: "
            "apt-get install -y openjdk-17-jre-headless"
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    first = out.splitlines()[0] if out else ""
    try:
        version = first.split('"')[1]
        major = int(version.split(".")[0]) if not version.startswith("1.") else 8
    except (IndexError, ValueError):
        return first
    if major < 17:
        raise ConfigError(f"Java 17 or newer is needed for Spark; found {first!r}")
    return first


def build_session(
    project: Project,
    conf: dict[str, str],
    app_name: str,
    *,
    hive_support: bool,
    small_work: bool = False,
) -> SparkSession:
    """Build (or return the running) SparkSession with ``conf``; ``small_work``: the session
    will only ever see little data (``with_quick_jit``)."""
    from pyspark.sql import SparkSession

    _ensure_runtime(conf, project)
    ensure_schema(conf)
    conf = quiet(conf)
    if small_work:
        conf = with_quick_jit(conf)
    if "CDC_SPARK_LOG" not in os.environ:  # where log4j2.properties writes Spark's errors
        logs = project.state_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        os.environ["CDC_SPARK_LOG"] = str(logs / "spark.log")
    # the environment's class archive mapped when there is one (class_archive)
    conf["spark.driver.extraJavaOptions"] = with_archive(conf["spark.driver.extraJavaOptions"])
    builder = SparkSession.builder.appName(app_name)
    if hive_support:
        builder = builder.enableHiveSupport()
    for key, value in conf.items():
        builder = builder.config(key, value)
    with _jvm_stdout_on_stderr():
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN" if _debug() else "ERROR")
    return session


@contextmanager
def _jvm_stdout_on_stderr() -> Iterator[None]:
    """A JVM started in the block writes its stdout to this process's stderr: whatever a user's
    JVM options print there (`-Xlog:gc`, `-verbose:class`, ...) stays out of `--json`. The
    JVM is a child process and keeps the descriptor it was given; this process's stdout is
    back as it was after the block."""
    if sys.stdout is not None:
        sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout at all: nothing to keep clean
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        if sys.stdout is not None:
            sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


LOG4J2 = Path(__file__).resolve().with_name("log4j2.properties")
JVM_OUTPUT_TO_STDERR = (
    "-XX:+DisplayVMOutputToStderr -Xlog:disable -Xlog:all=warning:stderr:uptime,level,tags"
)


# A project whose Files together are at most this many bytes is small work (`Invocation.spark`).
SMALL_WORK_BYTES = 64 * 1024 * 1024
# The JVM's first compiler tier only: no C2, which compiles the hottest code again, slowly, for
# the long run. The first tier alone would also shrink the code cache to 48 MB, which a
# long-lived JVM (`runner run --watch`) fills, and then it stops compiling: the tiered default's
# 240 MB is kept.
QUICK_JIT = "-XX:TieredStopAtLevel=1"
CODE_CACHE = "-XX:ReservedCodeCacheSize=240m"
# Options by which a profile says how the JVM compiles: a profile that has one keeps its own.
_OWN_JIT = re.compile(r"-XX:[+-]?TieredCompilation|-XX:TieredStopAtLevel|-Xint\b|-Xcomp\b")


def runs_in_process(conf: dict[str, str]) -> bool:
    """Whether Spark with ``conf`` runs in this process: a ``local`` master (pyspark's
    default), not a cluster's."""
    return str(conf.get("spark.master", "local")).startswith("local")


def with_quick_jit(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` with the driver JVM compiling with its first tier only, where Spark runs in this
    process (``local`` master) and the settings say nothing of the JVM's compilers. A run of
    small jobs is over before the second tier (C2) pays back the CPU it takes from two cores:
    on small work the first tier alone finishes sooner; on large work (hot loops over millions
    of rows) C2's code is faster, so the runner asks for this only on small work."""
    if not runs_in_process(conf):
        return conf
    opts = conf.get("spark.driver.extraJavaOptions", "")
    if _OWN_JIT.search(opts):
        return conf
    added = QUICK_JIT if "ReservedCodeCacheSize" in opts else f"{QUICK_JIT} {CODE_CACHE}"
    return {**conf, "spark.driver.extraJavaOptions": f"{opts} {added}".strip()}


def _debug() -> bool:
    """-v or --debug: Spark's WARN lines and its own log settings come back."""
    return logging.getLogger("runner").isEnabledFor(logging.INFO)


def quiet(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` plus what keeps Spark's WARN lines and stage bars out of a user's terminal
    (errors still print), unless the settings already say otherwise or ``--debug`` is on, and
    the JVM's own output off stdout."""
    out = dict(conf)
    out.setdefault("spark.ui.showConsoleProgress", "false")
    opts = out.get("spark.driver.extraJavaOptions", "")
    if JVM_OUTPUT_TO_STDERR not in opts:
        # The JVM's own output (its log's warnings, "CodeCache is full" and its summary, ...)
        # goes to stdout by default, where it would break `--json`: to stderr instead, with the
        # JVM's default log decorations. The settings' own options come after, so theirs win.
        opts = f"{JVM_OUTPUT_TO_STDERR} {opts}".strip()
        out["spark.driver.extraJavaOptions"] = opts
    if "log4j2.configurationFile" not in opts and not _debug():
        out["spark.driver.extraJavaOptions"] = (
            f"{opts} -Dlog4j2.configurationFile={LOG4J2.as_uri()}".strip()
        )
    return out
