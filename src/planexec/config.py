"""Project configuration: the ``[planexec]`` section of a ``planexec.toml``.

Owns `Config` (tools to load, engine defaults, MCP servers as
`McpServerConfig` records, remote A2A agents as `A2aAgentConfig`, the web console's `ServeConfig`, the traces'
`TelemetryConfig`, where steps run: `RunnerConfig` and `ToolResources`), `load_config`
and `ConfigError`. A missing file is an empty configuration; a file that
is not TOML, or a section with unknown keys or wrong types, is a
`ConfigError` naming the file (and the line, when TOML reports one). Relative ``.py`` tool paths, policy files and
MCP servers' ``cwd`` (and the Ray runtime environment's ``working_dir``
and ``py_modules``) are taken relative to the file's folder. Imports `errors`
only; must not import the engine, the registry or the CLI.

    [planexec]
    tools = ["mytools.py", "mypackage.tools"]
    max_concurrency = 8
    default_timeout = 120
    max_output_bytes = 33554432            # a step's output as JSON, at most (default 32 MiB; 0: no limit)
    planner_model = "openai:gpt-4o-mini"   # default: local:smollm2
    worker_model = "local:smollm2"         # default: the planner's model
    workspace = "work"                     # the folder file tools may touch
    store = ".planexec/runs.db"            # the run store: a path, sqlite:///path or postgresql://...
    policies = "policies.yaml"             # plan reviewers: YAML rule files or Python modules (or a list)
    max_replans = 2                        # new versions of a plan a run may ask for (0: none)
    joiner = true                          # after the steps, a model decides: finish, or replan
    reuse = true                           # a goal that fits a saved template reuses its plan (false; ["rules"]: no model call)
    plan_format = "compact"                # what the planner writes: "json" or "compact", one line a step (default: the model's profile)
    routing = "router"                     # auto mode: "planner" (default: no router call) or "router" (one call first)

    model_router = "learned"               # a cascade's starting model: "first", "difficulty" (default), "learned", or a list

    [planexec.role_models]
    coder = "openai:gpt-4.1-mini"
    researcher = ["openai:gpt-4.1-nano", "openai:gpt-4.1"]   # a cascade: the next model when a step's attempt fails

    [planexec.providers.openai]
    base_url = "http://127.0.0.1:8080/v1"
    api_key_env = "MY_SERVER_KEY"

    [planexec.model_profiles."openai:smollm2"]  # what a model can do, over its provider's profile (models.profile)
    size = "small"                         # the short prompt and bounds of a small model (default: "capable")
    compact_plans = false                  # its default plan form is JSON

    [planexec.prices]                      # US dollars per million tokens
    "openai:my-finetune*" = {input = 0.3, output = 1.2}

    [planexec.mcp.servers.time]            # an MCP server whose tools join the registry (planexec.mcp)
    command = "mcp-server-time"            # started over stdio; or url = "http://127.0.0.1:8000/mcp"
    args = ["--local-timezone", "UTC"]
    tools = ["get_current_time"]           # which of its tools to take (default: all)
    timeout = 30                           # seconds per call (default: the step's timeout)

    [planexec.a2a.agents.billing]          # a remote A2A agent planned to as a role of its own (planexec.a2a)
    url = "http://127.0.0.1:8767"          # where its agent card is served (/.well-known/agent-card.json)
    token_env = "BILLING_A2A_TOKEN"        # the variable holding its bearer token (default: none sent)
    timeout = 300                          # seconds it may take to answer (default: the step's timeout)
    description = "Answers questions about invoices and refunds."
    skills = ["look up an invoice", "draft a refund"]

    [planexec.serve]                       # planexec serve (the web console); its flags win
    token_env = "PLANEXEC_CONSOLE_TOKEN"   # the variable that holds the access token (a token in a file is a secret)
    port = 8765                            # 0: a free port, printed
    user = "alice"                         # the name decisions are recorded under

    [planexec.telemetry]                   # OpenTelemetry traces (planexec.telemetry); off unless set here or by OTEL_*
    exporter = "otlp"                      # "console" (a tree on stderr), "otlp" (OTLP/HTTP), or "none" (the app's own provider)
    endpoint = "http://127.0.0.1:4318"     # the OTLP/HTTP collector (default: OTEL_EXPORTER_OTLP_ENDPOINT)
    headers_env = "OTLP_HEADERS"           # the variable holding its headers, "key=value,..." (a header is a secret)
    capture_content = false                # prompts, answers and outputs in spans (they may hold secrets)

    [planexec.runner]                      # where steps run (planexec.scale); --runner and --ray-address win
    kind = "ray"                           # "local" (default): this process; "ray": function tools on a Ray cluster
    address = "ray-head:6379"              # the cluster's head (default: RAY_ADDRESS, else Ray's own lookup)
    namespace = "planexec"                 # the Ray namespace of the runner's actors
    spread = true                          # spread tasks over the nodes (default; Ray's own packs the first node)
    runtime_env = {working_dir = "."}      # Ray's runtime environment for the workers: the tools' code, env_vars, ...

    [planexec.runner.resources]            # per tool, over what the tool declares
    crunch = {num_cpus = 2, memory = 2147483648}
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from planexec.errors import ConfigError

__all__ = [
    "CONFIG_FILE",
    "A2aAgentConfig",
    "A2aConfig",
    "Config",
    "ConfigError",
    "McpConfig",
    "McpServerConfig",
    "ProviderConfig",
    "RunnerConfig",
    "ServeConfig",
    "TelemetryConfig",
    "ToolResources",
    "load_config",
]

CONFIG_FILE = "planexec.toml"
SECTION = "planexec"

_TOML_LINE = re.compile(r"at line (\d+)")


class ProviderConfig(BaseModel):
    """How to reach one provider."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str | None = None
    api_key_env: str | None = Field(None, description="the environment variable holding the key")
    timeout: float | None = Field(None, gt=0, description="seconds per call")


_SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")


class McpServerConfig(BaseModel):
    """One MCP server whose tools join the registry: a `command` started over stdio, or a `url` (streamable HTTP).

    `tools` is an allow-list of the server's tool names (None: all of them);
    `timeout` bounds each call in seconds (None: only the step's timeout);
    `start_timeout` bounds starting the server and its handshake.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str | None = Field(None, description="the program that runs the server over stdio")
    args: list[str] = Field(default_factory=list, description="its arguments")
    env: dict[str, str] = Field(default_factory=dict, description="environment variables added to a minimal inherited set")
    cwd: str | None = Field(None, description="its working folder (relative to planexec.toml's folder)")
    url: str | None = Field(None, description="a streamable HTTP endpoint, http://host:port/mcp")
    headers: dict[str, str] = Field(default_factory=dict, description="HTTP headers sent with every request")
    tools: list[str] | None = Field(None, description="the server's tools to take (default: all)")
    timeout: float | None = Field(None, gt=0, description="seconds per call")
    start_timeout: float = Field(30.0, gt=0, description="seconds to start the server and shake hands")

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server needs exactly one of command (stdio) or url (streamable HTTP)")
        if self.url is not None and (self.args or self.env or self.cwd is not None):
            raise ValueError("args, env and cwd are for a command; a url server takes headers")
        if self.command is not None and self.headers:
            raise ValueError("headers are for a url server; a command server takes env")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, not {self.url!r}")
        return self


class McpConfig(BaseModel):
    """``[planexec.mcp]``: the MCP servers by name (``[planexec.mcp.servers.NAME]``); a name prefixes its tools."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    servers: dict[str, McpServerConfig] = Field(default_factory=dict)

    @field_validator("servers")
    @classmethod
    def _names(cls, value: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        bad = [name for name in value if not _SERVER_NAME.match(name) or "__" in name]
        if bad:
            raise ValueError(f"an MCP server name is letters, digits, '_' and '-' (no '__'), at most 32: {', '.join(map(repr, bad))}")
        return value


class A2aAgentConfig(BaseModel):
    """One remote A2A agent the planner may plan to, as a role of its own (``[planexec.a2a.agents.NAME]``).

    `url` is where it serves its agent card; `token_env` names the variable
    holding the bearer token its requests carry (None: none); `timeout`
    bounds one exchange in seconds, the wait for a person on its side
    included (None: only the step's timeout); `description` and `skills`
    are what the planner reads of it (its card is fetched only when a step
    first calls it).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(description="the agent's base URL, where /.well-known/agent-card.json is served")
    token_env: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="the environment variable holding its bearer token"
    )
    timeout: float | None = Field(None, gt=0, description="seconds one exchange may take")
    description: str = Field("", description="what the planner reads of the agent")
    skills: list[str] = Field(default_factory=list, description="what it can do, one line each, for the planner")

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, not {value!r}")
        return value.rstrip("/")


class A2aConfig(BaseModel):
    """``[planexec.a2a]``: remote A2A agents by name (``[planexec.a2a.agents.NAME]``); a name is the role's name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agents: dict[str, A2aAgentConfig] = Field(default_factory=dict)

    @field_validator("agents")
    @classmethod
    def _names(cls, value: dict[str, A2aAgentConfig]) -> dict[str, A2aAgentConfig]:
        bad = [name for name in value if not _SERVER_NAME.match(name) or "__" in name]
        if bad:
            raise ValueError(f"an A2A agent name is letters, digits, '_' and '-' (no '__'), at most 32: {', '.join(map(repr, bad))}")
        return value


class ServeConfig(BaseModel):
    """``[planexec.serve]``: defaults of ``planexec serve``; its flags win.

    Prefer `token_env` (the name of an environment variable holding the
    token) to `token` (the token itself, in the file: ``planexec serve``
    warns when the file is readable by other users).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    token_env: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="the environment variable holding the access token"
    )
    token: str | None = Field(None, min_length=16, description="the access token itself (a secret in the file: prefer token_env)")
    user: str | None = Field(None, description="the name decisions are recorded under")
    port: int | None = Field(None, ge=0, le=65535, description="the port (0: a free one, printed)")


class TelemetryConfig(BaseModel):
    """``[planexec.telemetry]``: OpenTelemetry traces of runs and model calls (see `planexec.telemetry`).

    Off unless `exporter` is set (or `enabled` is true, or the standard
    ``OTEL_*`` variables ask for it); ``OTEL_SDK_DISABLED=true`` always wins.
    ``none`` sends spans to the tracer provider the application installed
    (Logfire, its own SDK setup) and nowhere else. Prompts, answers and
    outputs stay out of spans unless `capture_content` is true.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool | None = Field(None, description="traces on or off (default: on when an exporter is set here or by OTEL_*)")
    exporter: Literal["console", "otlp", "none"] | None = Field(
        None, description="console (a tree on stderr), otlp (OTLP/HTTP) or none (the application's tracer provider)"
    )
    endpoint: str | None = Field(
        None, pattern=r"^https?://", description="the OTLP/HTTP collector's URL (default: OTEL_EXPORTER_OTLP_ENDPOINT, else localhost:4318)"
    )
    headers_env: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="the environment variable holding the OTLP headers, key=value,..."
    )
    capture_content: bool = Field(False, description="prompts, answers and outputs in spans (they may hold secrets)")
    service_name: str | None = Field(
        None, min_length=1, description="service.name of the spans (default: OTEL_SERVICE_NAME, else planexec)"
    )


class ToolResources(BaseModel):
    """What one step of a tool takes where it runs: CPUs, GPUs, memory (bytes) and custom resources (a Ray task's options)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_cpus: float | None = Field(None, ge=0, description="CPUs a step holds while it runs (Ray's default: 1)")
    num_gpus: float | None = Field(None, ge=0, description="GPUs a step holds")
    memory: int | None = Field(None, ge=0, description="bytes of memory a step is scheduled with (a reservation, not a limit)")
    resources: dict[str, float] = Field(default_factory=dict, description="custom resources by name, as the nodes declare them")


class RunnerConfig(BaseModel):
    """``[planexec.runner]``: where steps run (see `planexec.scale`); the command's ``--runner`` and ``--ray-address`` win.

    `kind` None or ``local``: in the process that runs the plan. ``ray``:
    each step that calls a function tool runs on the Ray cluster at
    `address` (a sync tool as a task, an async one on an actor), the rest
    (role workers' model calls, schema and MCP tools, planexec's own tools)
    on the driver. `spread` spreads tasks over the nodes; `runtime_env` is
    Ray's runtime environment for the job (how the tools' code reaches the
    workers); `resources` gives a tool's steps other resources than it declares.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["local", "ray"] | None = Field(None, description="local (default): this process; ray: function tools on a Ray cluster")
    address: str | None = Field(
        None, min_length=1, description="the Ray cluster: host:port of its head, ray://host:port, or auto (default: RAY_ADDRESS)"
    )
    namespace: str | None = Field(None, min_length=1, description="the Ray namespace of the runner's actors")
    spread: bool = Field(True, description="spread tasks over the nodes (Ray's default scheduling packs the first node)")
    runtime_env: dict[str, Any] | None = Field(
        None, description="Ray's runtime environment for the workers (working_dir, py_modules, env_vars)"
    )
    resources: dict[str, ToolResources] = Field(default_factory=dict, description="tool name -> what its steps take, over its declaration")

    def recorded(self) -> dict[str, Any]:
        """What a run records of it in its `RunStarted.setup`, for whoever resumes it: never `runtime_env` (its env_vars may hold secrets)."""
        return self.model_dump(include={"kind", "address", "namespace", "spread"})


class Config(BaseModel):
    """What ``[planexec]`` in ``planexec.toml`` may set; every field is optional."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tools: list[str] = Field(default_factory=list, description="tool modules: dotted names or .py paths")
    max_concurrency: int | None = Field(None, ge=1, description="steps running at once")
    default_timeout: float | None = Field(None, gt=0, description="seconds, for steps without a timeout")
    max_output_bytes: int | None = Field(
        None, ge=0, strict=True, description="bytes of JSON a step's output may take (default 32 MiB; 0: no limit)"
    )
    planner_model: str | None = Field(None, description="'provider:model' that plans")
    worker_model: str | None = Field(None, description="'provider:model' for role workers")
    role_models: dict[str, str | list[str]] = Field(
        default_factory=dict, description="role -> 'provider:model', or a list of them: a cascade its steps try in order"
    )
    model_router: str | list[str] | None = Field(
        None,
        description="which model a step with a cascade starts on: 'first', 'difficulty' (the default), 'learned' (from the "
        "store's past runs), 'module:name' for one of your own, or a list of them asked in order",
    )
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    prices: dict[str, dict[str, float]] = Field(default_factory=dict, description="model -> {input, output} per 1M tokens")
    model_profiles: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="model or 'prefix*' -> what it can do, over its provider's profile (models.profile)"
    )
    model_timeout: float | None = Field(None, gt=0, description="seconds per model call")
    model_retries: int | None = Field(None, ge=0, description="retries of a rate-limited or failed call")
    workspace: str | None = Field(None, description="folder the built-in file and code tools work in")
    store: str | None = Field(
        None, description="the run store: a file path, sqlite:///path or postgresql://... (default .planexec/runs.db)"
    )
    policies: list[str] = Field(default_factory=list, description="policies that review plans: YAML rule files or Python modules")
    max_replans: int | None = Field(None, ge=0, description="new plan versions a run may ask for (default 2)")
    joiner: bool | None = Field(None, description="after the steps, the planner's model decides: finish, or replan (default off)")
    reuse: bool | list[Literal["rules", "model"]] | None = Field(
        None, description="plan reuse from the store's templates: true, false, or the matchers ['rules', 'model'] (default on)"
    )
    plan_format: Literal["json", "compact"] | None = Field(
        None,
        description="what the planner model writes: the JSON draft, or the compact one-line-per-step language "
        "(default: its profile's, compact for hosted models, JSON for the embedded one)",
    )
    routing: Literal["planner", "router"] | None = Field(
        None,
        description="who decides in auto mode: the planner (no router call; a plan of one step is worked by one agent) "
        "or the router's call first (default planner)",
    )
    mcp: McpConfig = Field(default_factory=McpConfig, description="MCP servers whose tools join the registry")
    a2a: A2aConfig = Field(default_factory=A2aConfig, description="remote A2A agents the planner may plan to, each a role")
    serve: ServeConfig = Field(default_factory=ServeConfig, description="defaults of planexec serve, the web console")
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig, description="OpenTelemetry traces: off unless configured")
    runner: RunnerConfig = Field(default_factory=RunnerConfig, description="where steps run: this process, or a Ray cluster")

    @field_validator("role_models")
    @classmethod
    def _cascades(cls, value: dict[str, str | list[str]]) -> dict[str, str | list[str]]:
        for role, models in value.items():
            if isinstance(models, list) and (not models or len(set(models)) != len(models)):
                raise ValueError(f"{role}: a cascade names at least one model, each once; got {models!r}")
        return value

    @field_validator("policies", mode="before")
    @classmethod
    def _one_policy_file(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value


def load_config(start: Path) -> Config:
    """Read ``planexec.toml`` in the folder `start` (or the file `start` itself).

    Returns an empty `Config` when there is no such file; raises `ConfigError`
    naming the file (and line) when it is malformed or its values are rejected.
    """
    path = start / CONFIG_FILE if start.is_dir() else start
    if not path.is_file():
        return Config()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        m = _TOML_LINE.search(str(exc))
        line = int(m.group(1)) if m else None
        where = f"{path}:{line}" if line else str(path)
        raise ConfigError(f"{where}: not valid TOML: {exc}", path=path, line=line) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}", path=path) from None
    section = data.get(SECTION, {})
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: [{SECTION}] must be a table", path=path)
    try:
        config = Config.model_validate(section)
    except ValidationError as exc:
        details = "; ".join(f"{'.'.join(map(str, e['loc'])) or SECTION}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{path}: [{SECTION}] {details}", path=path) from None
    update: dict[str, object] = {"tools": [_relative_to(path.parent, t) for t in config.tools]}
    if config.workspace is not None and not Path(config.workspace).is_absolute():
        update["workspace"] = str(path.parent / config.workspace)
    if config.store is not None:
        update["store"] = _store_relative_to(path.parent, config.store)
    if config.policies:
        update["policies"] = [_relative_to(path.parent, p, suffixes=(".py", ".yaml", ".yml")) for p in config.policies]
    if any(s.cwd is not None and not Path(s.cwd).is_absolute() for s in config.mcp.servers.values()):
        servers = {
            name: s if s.cwd is None or Path(s.cwd).is_absolute() else s.model_copy(update={"cwd": str(path.parent / s.cwd)})
            for name, s in config.mcp.servers.items()
        }
        update["mcp"] = config.mcp.model_copy(update={"servers": servers})
    if config.runner.runtime_env:
        update["runner"] = config.runner.model_copy(
            update={"runtime_env": _runtime_env_relative_to(path.parent, config.runner.runtime_env)}
        )
    return config.model_copy(update=update)


def _relative_to(folder: Path, spec: str, *, suffixes: tuple[str, ...] = (".py",)) -> str:
    # a .py (or policy file) path is the file's neighbour; a dotted module name is left to the import system
    if spec.endswith(suffixes) and not Path(spec).is_absolute():
        return str(folder / spec)
    return spec


def _runtime_env_relative_to(folder: Path, env: dict[str, Any]) -> dict[str, Any]:
    # Ray reads a relative working_dir or py_modules path from the driver's folder: make it the config file's neighbour
    out = dict(env)
    if _local_path(out.get("working_dir")):
        out["working_dir"] = str(folder / out["working_dir"])
    if isinstance(out.get("py_modules"), list):
        out["py_modules"] = [str(folder / p) if _local_path(p) else p for p in out["py_modules"]]
    return out


def _local_path(value: object) -> bool:
    """A relative path on this machine (a URI such as s3://... is Ray's to fetch)."""
    return isinstance(value, str) and "://" not in value and not Path(value).is_absolute()


def _store_relative_to(folder: Path, spec: str) -> str:
    # a relative store file (plain, or sqlite:///relative) lives beside the config file; a URL is left alone
    if spec.startswith("sqlite:///") and not spec.startswith("sqlite:////"):
        return "sqlite:///" + str(folder / spec[len("sqlite:///") :])
    if "://" not in spec and not Path(spec).expanduser().is_absolute():
        return str(folder / spec)
    return spec
