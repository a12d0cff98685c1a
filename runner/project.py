"""Where a runner invocation finds its settings: the project root, runner.yml, the dbt project
and the dbt profile target.

The dbt profile is the single source of truth for how to reach a destination, including the
Spark settings of the embedded ``local`` target. The runner renders the same profiles.yml with
dbt's own renderer, so ``env_var()`` means the same thing to both.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from runner.errors import ConfigError

RUNNER_SETTINGS_FILE = "runner.yml"
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def load_yaml(text: str) -> Any:
    """YAML as ``yaml.safe_load`` reads it, parsed by libyaml where PyYAML has it (the pure
    Python parser costs a run with nothing new a quarter of its time)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506


def validate_identifier(value: str, what: str) -> str:
    """Reject anything that is not a plain SQL identifier before it reaches generated SQL."""
    if not isinstance(value, str) or not IDENTIFIER.match(value):
        raise ConfigError(
            f"{what} must be a plain identifier (letters, digits, underscore; "
            f"not starting with a digit; at most 63 characters), got {value!r}"
        )
    return value


@dataclass(frozen=True)
class AuditSettings:
    """How the Audit DB behaves: attempts before FAILED, and how long a lease lasts."""

    max_attempts: int = 3
    lease_seconds: int = 60


@dataclass(frozen=True)
class RetentionSettings:
    """What `runner maintain` removes: the staged rows of Files COMMITTED more than
    ``staged_days`` ago (per entity in ``entities``), and the file_events of COMMITTED Files
    older than ``events_days`` (None keeps them); on Iceberg, table snapshots older than
    ``snapshot_days`` (the newest is always kept)."""

    staged_days: float | None = None
    events_days: float | None = None
    snapshot_days: float = 1.0
    entities: dict[str, float | None] = field(default_factory=dict)

    def staged_days_of(self, entity: str) -> float | None:
        return self.entities.get(entity, self.staged_days)

    @classmethod
    def parse(cls, raw: Any, where: Path) -> RetentionSettings:
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: retention must be a mapping")
        known = {"staged_days", "events_days", "snapshot_days", "entities"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(
                f"{where}: retention: unknown keys {unknown}; accepted: {sorted(known)}"
            )

        def days(value: Any, name: str) -> float | None:
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"{where}: retention.{name} must be a number of days >= 0")
            return float(value)

        entities = raw.get("entities") or {}
        if not isinstance(entities, dict):
            raise ConfigError(f"{where}: retention.entities must map entity names to settings")
        per: dict[str, float | None] = {}
        for name, conf in entities.items():
            if not isinstance(conf, dict) or set(conf) - {"staged_days"}:
                raise ConfigError(f"{where}: retention.entities.{name} accepts staged_days only")
            per[str(name)] = days(conf.get("staged_days"), f"entities.{name}.staged_days")
        return cls(
            staged_days=days(raw.get("staged_days"), "staged_days"),
            events_days=days(raw.get("events_days"), "events_days"),
            snapshot_days=days(raw.get("snapshot_days", 1.0), "snapshot_days") or 0.0,
            entities=per,
        )


@dataclass(frozen=True)
class RunnerSettings:
    """runner.yml, with defaults for every key so the file is optional."""

    dbt_project_dir: str = "dbt_project"
    state_dir: str = ".cdc"
    landing_roots: tuple[str, ...] = ("landing",)
    audit: AuditSettings = field(default_factory=AuditSettings)
    # Per dbt target: audit_url and audit_schema overrides.
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Spark settings for staging when the target is not a Spark target (e.g. postgres).
    staging_spark_conf: dict[str, str] = field(default_factory=dict)
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    # `runner run` runs `runner maintain` after every this many runs (None: never by itself).
    maintain_every: int | None = None
    # fsspec options per protocol for landing roots that are URIs (an endpoint, a region):
    # {"s3": {"endpoint_url": "http://127.0.0.1:5000"}}. Credentials: the store's own chain.
    landing_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The local copies of remote Files (runner/spool.py) hold at most this many MiB.
    spool_max_mib: int = 2048

    @classmethod
    def load(cls, root: Path) -> RunnerSettings:
        path = root / RUNNER_SETTINGS_FILE
        if not path.exists():
            return cls()
        try:
            raw = load_yaml(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: expected a mapping at the top level")
        known = {
            "dbt_project_dir",
            "state_dir",
            "landing_roots",
            "audit",
            "targets",
            "staging_spark_conf",
            "retention",
            "maintain_every",
            "landing_options",
            "spool_max_mib",
        }
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"{path}: unknown keys {unknown}; accepted: {sorted(known)}")
        audit_raw = raw.get("audit") or {}
        audit = AuditSettings(
            max_attempts=int(audit_raw.get("max_attempts", AuditSettings.max_attempts)),
            lease_seconds=int(audit_raw.get("lease_seconds", AuditSettings.lease_seconds)),
        )
        if audit.max_attempts < 1 or audit.lease_seconds < 1:
            raise ConfigError(f"{path}: audit.max_attempts and audit.lease_seconds must be >= 1")
        every = raw.get("maintain_every")
        if every is not None and (
            isinstance(every, bool) or not isinstance(every, int) or every < 1
        ):
            raise ConfigError(f"{path}: maintain_every must be a number of runs >= 1")
        options = raw.get("landing_options") or {}
        if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
            raise ConfigError(
                f"{path}: landing_options maps a protocol to its options, such as "
                "{s3: {endpoint_url: 'http://127.0.0.1:5000'}}"
            )
        spool_mib = raw.get("spool_max_mib", cls.spool_max_mib)
        if isinstance(spool_mib, bool) or not isinstance(spool_mib, int) or spool_mib < 1:
            raise ConfigError(f"{path}: spool_max_mib must be a number of MiB >= 1")
        return cls(
            landing_options={str(k): dict(v) for k, v in options.items()},
            spool_max_mib=spool_mib,
            retention=RetentionSettings.parse(raw.get("retention") or {}, path),
            maintain_every=every,
            dbt_project_dir=str(raw.get("dbt_project_dir", cls.dbt_project_dir)),
            state_dir=str(raw.get("state_dir", cls.state_dir)),
            landing_roots=tuple(str(p) for p in raw.get("landing_roots", ["landing"])),
            audit=audit,
            targets={str(k): dict(v or {}) for k, v in (raw.get("targets") or {}).items()},
            staging_spark_conf={
                str(k): str(v) for k, v in (raw.get("staging_spark_conf") or {}).items()
            },
        )


# `{{ env_var('NAME') }}` and `{{ env_var('NAME', 'default') }}`, the Jinja a profile holds,
# a whole value also as `{{ env_var(...) | int }}` (a port).
_ENV_VAR = re.compile(
    r"""\{\{\s*env_var\(\s*(['"])([^'"]*)\1\s*(?:,\s*(['"])([^'"]*)\3\s*)?\)"""
    r"""\s*(\|\s*int\s*)?\}\}"""
)


def _jinja_int(text: str) -> int:
    """Jinja's `int` filter: the number, else the number a float says, else 0."""
    try:
        return int(text)
    except ValueError:
        try:
            return int(float(text))
        except ValueError:
            return 0


def _env_vars_rendered(value: Any) -> tuple[bool, Any]:
    """``value`` (a profile's YAML) rendered as dbt renders it when its only Jinja is env_var
    calls with literal arguments, each set or given a default: (True, the value). (False, None)
    for anything else, which dbt renders. dbt's native rendering of such a string is that
    string (one expression or several); of one `| int` expression, that number."""
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            ok, out[key] = _env_vars_rendered(item)
            if not ok:
                return False, None
        return True, out
    if isinstance(value, list):
        items = [_env_vars_rendered(item) for item in value]
        return all(ok for ok, _ in items), [item for _, item in items]
    if isinstance(value, date):
        return True, value.isoformat()
    if not isinstance(value, str):
        return True, value
    if any(mark in _ENV_VAR.sub("", value) for mark in ("{{", "{%", "{#")):
        return False, None
    found = []
    for match in _ENV_VAR.finditer(value):
        name, default = match.group(2), match.group(4)
        if name not in os.environ and default is None:
            return False, None  # dbt says the variable is required
        found.append((match, os.environ.get(name, default or "")))
    if len(found) == 1 and found[0][0].group(5) and found[0][0].span() == (0, len(value)):
        return True, _jinja_int(found[0][1])
    if any(match.group(5) for match, _ in found):
        return False, None
    pieces, pos = [], 0
    for match, text in found:
        pieces += [value[pos : match.start()], text]
        pos = match.end()
    return True, "".join([*pieces, value[pos:]])


def _render_profile_data(data: dict[str, Any]) -> dict[str, Any]:
    """Render a profile target exactly as dbt does (env_var, native types): without importing
    dbt when its only Jinja is env_var calls (a run with nothing new imports no dbt), else with
    dbt's own renderer (and its messages, such as a required variable that is not set)."""
    ok, rendered_here = _env_vars_rendered(data)
    if ok:
        return dict(rendered_here)
    from dbt.config.renderer import ProfileRenderer
    from dbt_common.context import set_invocation_context

    set_invocation_context(dict(os.environ))
    rendered: dict[str, Any] = ProfileRenderer({}).render_data(data)
    return rendered


@dataclass(frozen=True)
class Project:
    """One resolved project: its root folder, settings, dbt project and the chosen target."""

    root: Path
    settings: RunnerSettings
    dbt_project_dir: Path
    profiles_dir: Path
    profile_name: str
    target_name: str
    target: dict[str, Any]
    # dbt_project.yml as parsed (empty when there is none): read once, here.
    dbt_conf: dict[str, Any] = field(default_factory=dict)

    @property
    def dbt_vars(self) -> dict[str, Any]:
        return dict(self.dbt_conf.get("vars") or {})

    @property
    def state_dir(self) -> Path:
        return (self.root / self.settings.state_dir).resolve()

    @classmethod
    def load(
        cls,
        project_dir: str | os.PathLike[str] | None = None,
        target: str | None = None,
        profiles_dir: str | os.PathLike[str] | None = None,
    ) -> Project:
        root = Path(project_dir or os.environ.get("CDC_PROJECT_DIR") or ".").resolve()
        if not root.is_dir():
            raise ConfigError(f"project directory {root} does not exist")
        # The profile refers to project-local paths as {{ env_var('CDC_HOME', '.') }}/...; the
        # runner pins them to this project so it works from any working directory. dbt run
        # in-process by the runner inherits the same value.
        os.environ["CDC_HOME"] = str(root)
        settings = RunnerSettings.load(root)
        dbt_dir = (root / settings.dbt_project_dir).resolve()
        profile_name = "cdc"
        dbt_project_file = dbt_dir / "dbt_project.yml"
        dbt_conf: dict[str, Any] = {}
        if dbt_project_file.exists():
            dbt_conf = load_yaml(dbt_project_file.read_text()) or {}
            profile_name = str(dbt_conf.get("profile", profile_name))
        prof_dir = cls._profiles_dir(root, profiles_dir)
        profiles_file = prof_dir / "profiles.yml"
        if not profiles_file.exists():
            raise ConfigError(
                f"no profiles.yml in {prof_dir}; run `make setup` (it writes ./profiles.yml "
                "from profiles.example.yml) or pass --profiles-dir"
            )
        profiles = load_yaml(profiles_file.read_text()) or {}
        profile = profiles.get(profile_name)
        if not isinstance(profile, dict) or "outputs" not in profile:
            raise ConfigError(f"{profiles_file}: no profile named {profile_name!r} with outputs")
        target_name = target or os.environ.get("DBT_TARGET") or profile.get("target") or "local"
        outputs = profile["outputs"]
        if target_name not in outputs:
            raise ConfigError(
                f"{profiles_file}: profile {profile_name!r} has no target {target_name!r}; "
                f"targets: {sorted(outputs)}"
            )
        rendered = _render_profile_data(dict(outputs[target_name]))
        return cls(
            root=root,
            settings=settings,
            dbt_project_dir=dbt_dir,
            profiles_dir=prof_dir,
            profile_name=profile_name,
            target_name=str(target_name),
            target=rendered,
            dbt_conf=dbt_conf,
        )

    @staticmethod
    def _profiles_dir(root: Path, explicit: str | os.PathLike[str] | None) -> Path:
        if explicit:
            return Path(explicit).resolve()
        if os.environ.get("DBT_PROFILES_DIR"):
            return Path(os.environ["DBT_PROFILES_DIR"]).resolve()
        if (root / "profiles.yml").exists():
            return root
        return Path.home() / ".dbt"

    @property
    def target_context(self) -> dict[str, Any]:
        """The target as dbt's ``target`` Jinja variable shows it: ``schema`` and ``database``
        whatever the adapter calls them (BigQuery's ``dataset`` and ``project``)."""
        ctx = dict(self.target)
        for alias, name in (("dataset", "schema"), ("project", "database"), ("dbname", "database")):
            if alias in ctx and name not in ctx:
                ctx[name] = ctx[alias]
        ctx.setdefault("name", self.target_name)
        return ctx

    @property
    def state_schema(self) -> str:
        """The one schema of the state tables (staged-files manifest, Applied File Markers,
        tombstones), for the runner and dbt alike: dbt_project.yml's ``vars: cdc_state_schema``
        (what ``cdc.state_schema()`` reads), else the target's schema."""
        scoped = self.dbt_vars.get("cdc")
        value = self.dbt_vars.get("cdc_state_schema")
        if isinstance(scoped, dict) and "cdc_state_schema" in scoped:
            value = scoped["cdc_state_schema"]
        if value is None:
            value = self.target_context.get("schema", "")
        text = str(value)
        if "{{" in text:
            raise ConfigError(
                f"vars.cdc_state_schema {text!r}: write the schema name itself (the runner "
                "reads it too and does not render Jinja there)"
            )
        return validate_identifier(text, "vars.cdc_state_schema")

    def target_setting(self, key: str) -> Any:
        return self.settings.targets.get(self.target_name, {}).get(key)
