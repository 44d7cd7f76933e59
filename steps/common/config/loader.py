"""A config read: a YAML file of sections (``data``, ``storage``, ``train``, ...) plus
``--set section.field=value`` overrides. ``load_config`` validates the merged result as a
``PipelineConfig`` and turns every problem into a ``ConfigError`` that names the field and
where the bad value came from (the file or the override), before anything runs;
``with_overrides`` applies more overrides to a loaded config the same way.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import ValidationError

from steps.common.config.pipeline import ConfigError, PipelineConfig
from steps.common.version import REPO_ROOT

DEFAULT_CONFIG_PATH = REPO_ROOT / "configs" / "local.yaml"


def _parse_override(text: str) -> tuple[list[str], Any]:
    key, sep, raw = text.partition("=")
    path = key.strip().split(".")
    if not sep or len(path) < 2 or not all(path):
        raise ConfigError(f"--set {text!r}: expected section.field=value, e.g. train.epochs=30")
    raw = raw.strip()
    if raw in ("null", "~"):
        return path, None
    if not raw.startswith(("[", "{")):
        # Scalars stay strings and pydantic converts them by the field's type, so that
        # "--set data.md5=0123..." keeps its leading zero and "30" still becomes an int.
        return path, raw
    try:
        return path, yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        message = str(exc).replace("\n", " ")
        raise ConfigError(f"--set {text!r}: value is not valid YAML ({message})") from None


def _apply_override(data: dict[str, Any], path: list[str], value: Any) -> None:
    node = data
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {'.'.join(path)}: {part} is not a section")
        node = child
    node[path[-1]] = value


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})".replace("\n", " ")) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections")
    return data


def load_config(
    path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> PipelineConfig:
    """Read a config file (default: configs/local.yaml when present), apply overrides."""
    path = _config_path(path)
    data = _read_yaml(path) if path is not None else {}
    return _validated(data, _source(path), overrides)


def with_overrides(
    cfg: PipelineConfig, overrides: list[str] | tuple[str, ...], path: str | Path | None = None
) -> PipelineConfig:
    """``cfg`` (loaded from ``path``) with more overrides, each checked as its field and a
    bad one reported as ``load_config`` reports it, the file not read again: what was set
    (by the file, an override or the environment) is applied anew, the rest defaults."""
    if not overrides:
        return cfg
    return _validated(cfg.model_dump(exclude_unset=True), _source(_config_path(path)), overrides)


def _config_path(path: str | Path | None) -> Path | None:
    if path is None and DEFAULT_CONFIG_PATH.is_file():
        return DEFAULT_CONFIG_PATH
    return Path(path) if path is not None else None


def _source(path: Path | None) -> str:
    return str(path) if path is not None else "<defaults>"


def _validated(
    data: dict[str, Any], source: str, overrides: list[str] | tuple[str, ...]
) -> PipelineConfig:
    overridden: dict[tuple[str, ...], str] = {}
    for text in overrides:
        keys, value = _parse_override(text)
        _apply_override(data, keys, value)
        overridden[tuple(keys)] = text
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(str(part) for part in err["loc"])
            origin = next(
                (
                    f"--set {text}"
                    for keys, text in overridden.items()
                    if loc[: len(keys)] == keys or keys[: len(loc)] == loc  # a bad section
                ),
                source,
            )
            message = err["msg"].removeprefix("Value error, ")  # our own checks' words suffice
            if err["type"] == "extra_forbidden":
                message = unknown_key(loc)
            problems.append(f"{origin}: {'.'.join(loc)}: {message}")
        raise ConfigError("; ".join(problems)) from None


def unknown_key(loc: tuple[str, ...]) -> str:
    """A section or field that does not exist, with the nearest existing name (a typo) or
    the names there are."""
    sections = PipelineConfig.model_fields
    if len(loc) == 1:
        what, prefix, known = "section", "", list(sections)
    else:
        model = sections[loc[0]].annotation if loc[0] in sections else None
        what, prefix = "field", f"{'.'.join(loc[:-1])}."
        known = list(getattr(model, "model_fields", {}))
    near = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.6)
    if near:
        return f"no such {what}; did you mean {prefix}{near[0]}?"
    return f"no such {what}; there are {', '.join(prefix + name for name in known)}"


def dump_config(cfg: PipelineConfig) -> dict[str, Any]:
    """Plain data of a config, e.g. for logging every field as an MLflow param."""
    return cfg.model_dump(mode="json")


def flatten(cfg: PipelineConfig) -> dict[str, str]:
    """``section.field -> str(value)`` for every field."""
    flat: dict[str, str] = {}
    for section, fields in dump_config(cfg).items():
        for name, value in fields.items():
            flat[f"{section}.{name}"] = str(value)
    return flat


def type_name(annotation: Any) -> str:
    """How ``--describe`` shows a field's type: ``str | None``, not the validators."""
    if get_origin(annotation) is Annotated:
        return type_name(get_args(annotation)[0])
    if get_origin(annotation) in (Union, UnionType):
        return " | ".join(type_name(arg) for arg in get_args(annotation))
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def describe() -> list[tuple[str, str, str, str]]:
    """``(field, type, default, description)`` for every field, in declaration order."""
    rows = []
    for section, info in PipelineConfig.model_fields.items():
        model = info.default_factory()  # type: ignore[misc]
        for name, field in type(model).model_fields.items():
            rows.append(
                (
                    f"{section}.{name}",
                    type_name(field.annotation),
                    str(getattr(model, name)),
                    field.description or "",
                )
            )
    return rows
