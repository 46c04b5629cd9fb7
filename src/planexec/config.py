"""Project configuration: the ``[planexec]`` section of a ``planexec.toml``.

Owns `Config` (tools to load, engine defaults), `load_config` and
`ConfigError`. A missing file is an empty configuration; a file that is not
TOML, or a section with unknown keys or wrong types, is a `ConfigError` naming
the file (and the line, when TOML reports one). Relative ``.py`` tool paths
are taken relative to the file's folder. Imports `errors` only; must not
import the engine, the registry or the CLI.

    [planexec]
    tools = ["mytools.py", "mypackage.tools"]
    max_concurrency = 8
    default_timeout = 120
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ConfigError

__all__ = ["CONFIG_FILE", "Config", "ConfigError", "load_config"]

CONFIG_FILE = "planexec.toml"
SECTION = "planexec"

_TOML_LINE = re.compile(r"at line (\d+)")


class Config(BaseModel):
    """What ``[planexec]`` in ``planexec.toml`` may set; every field is optional."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tools: list[str] = Field(default_factory=list, description="tool modules: dotted names or .py paths")
    max_concurrency: int | None = Field(None, ge=1, description="steps running at once")
    default_timeout: float | None = Field(None, gt=0, description="seconds, for steps without a timeout")


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
    return config.model_copy(update={"tools": [_relative_to(path.parent, t) for t in config.tools]})


def _relative_to(folder: Path, spec: str) -> str:
    # a .py path is the file's neighbour; a dotted module name is left to the import system
    if spec.endswith(".py") and not Path(spec).is_absolute():
        return str(folder / spec)
    return spec
