"""Loading scenarios: YAML in, a validated `Scenario` out, or a `ScenarioError` saying where.

Every problem names the file, the key path (e.g. `providers.direct.serves.big.ttft_s.p99`) and
what is allowed. Files a scenario refers to (empirical samples, arrival traces) are read here,
once, so the engine never touches the file system.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Mapping
from difflib import get_close_matches
from importlib import resources
from pathlib import Path as FilePath
from typing import Any, get_args, get_origin

import numpy as np
import pandas as pd
import yaml
from pydantic import BaseModel, ValidationError

from sim.model.config import POLICY_KINDS, DistSpec, Scenario, reference_problems
from sim.model.errors import FieldError, Path, ScenarioError, format_path

#: The scenario `tailsim run` uses when none is given (shipped inside the package).
DEFAULT_SCENARIO = "default.yaml"


def default_scenario_path() -> FilePath:
    """Path of the bundled default scenario."""
    return FilePath(str(resources.files("sim") / "scenarios" / DEFAULT_SCENARIO))


def load_scenario(path: str | FilePath | None = None) -> Scenario:
    """Read, validate and return the scenario at `path` (the bundled default if None)."""
    file = FilePath(path) if path is not None else default_scenario_path()
    source = str(file)
    if not file.exists():
        raise ScenarioError(source, [("", "file not found")])
    if file.is_dir():
        raise ScenarioError(source, [("", "is a folder, expected a scenario YAML file")])
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(source, [("", f"cannot be read: {exc}")]) from None
    data = with_includes(parse_yaml(text, source), source, file.parent)
    scenario = scenario_from_dict(data, source=source, base_dir=file.parent)
    scenario.set_source_dir(str(scenario.source_dir), file=source)  # errors name the file
    return scenario


def parse_yaml(text: str, source: str) -> dict[str, Any]:
    """Parse YAML text into a mapping, rejecting duplicate keys and non-mapping documents."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ScenarioError(source, [("", f"not valid YAML: {where}{exc.problem}")]) from None
    except yaml.YAMLError as exc:
        raise ScenarioError(source, [("", f"not valid YAML: {exc}")]) from None
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise ScenarioError(
            source, [("", f"expected a mapping of scenario keys, the file is {kind}")]
        )
    return data


def with_includes(data: dict[str, Any], source: str, folder: FilePath) -> dict[str, Any]:
    """`data` with the files of its `include:` (one path or a list, relative to the scenario)
    merged in: a top-level key the scenario lacks is taken whole; under a mapping both have
    (`providers`, `models`, ...), the entries the scenario lacks are added (its own win)."""
    if "include" not in data:
        return data
    data = dict(data)
    paths = data.pop("include")
    paths = [paths] if isinstance(paths, str) else paths
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise ScenarioError(source, [("include", "expected a file path or a list of them")])
    for i, relative in enumerate(paths):
        key = "include" if len(paths) == 1 else f"include[{i}]"
        file = folder / relative
        if not file.is_file():
            raise ScenarioError(source, [(key, f"file not found: {file}")])
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ScenarioError(source, [(key, f"cannot be read: {exc}")]) from None
        included = parse_yaml(text, str(file))
        if "include" in included:
            raise ScenarioError(str(file), [("include", "an included file cannot include")])
        _rebase_sample_files(included, file.parent, folder)
        for name, value in included.items():
            mine = data.get(name)
            if mine is None:
                data[name] = value
            elif isinstance(mine, dict) and isinstance(value, dict):
                data[name] = {**value, **mine}
    return data


def _rebase_sample_files(data: dict[str, Any], where: FilePath, folder: FilePath) -> None:
    """Make an included file's relative `file:` of empirical laws (under `providers`) relative
    to the scenario, so they name files beside the included file (as `tailsim fit` writes)."""
    providers = data.get("providers")
    if not isinstance(providers, dict) or where.resolve() == folder.resolve():
        return
    for provider in providers.values():
        serves = provider.get("serves") if isinstance(provider, dict) else None
        for serving in serves.values() if isinstance(serves, dict) else ():
            if not isinstance(serving, dict):
                continue
            stall = serving.get("stall")
            laws = [serving.get("ttft_s"), serving.get("tokens_per_s")]
            laws.append(stall.get("extra_s") if isinstance(stall, dict) else None)
            for law in laws:
                name = law.get("file") if isinstance(law, dict) else None
                if isinstance(name, str) and not FilePath(name).is_absolute():
                    law["file"] = os.path.relpath(where / name, folder)


def scenario_from_dict(
    data: Mapping[str, Any], source: str = "<scenario>", base_dir: FilePath | None = None
) -> Scenario:
    """Validate a plain mapping as a scenario and read the files it refers to."""
    try:
        scenario = Scenario.model_validate(dict(data))
    except ValidationError as exc:
        problems = _problems(exc)
        problems += [(format_path(p), m) for p, m in reference_problems(data)]
        raise ScenarioError(source, list(dict.fromkeys(problems))) from None
    folder = (base_dir or FilePath.cwd()).resolve()
    scenario.set_source_dir(str(folder))
    _attach_files(scenario, source, folder)
    return scenario


def with_overrides(scenario: Scenario, overrides: Mapping[str, Any], source: str = "") -> Scenario:
    """A new scenario with dotted key paths replaced, validated again (files re-attached)."""
    data = scenario.model_dump(mode="python", exclude_none=True)
    for dotted, value in overrides.items():
        set_key_path(data, dotted, value, source or scenario.source)
    folder = FilePath(scenario.source_dir) if scenario.source_dir else None
    fresh = scenario_from_dict(
        data, source=source or f"{scenario.source} (overridden)", base_dir=folder
    )
    fresh.set_source_dir(str(fresh.source_dir), file=scenario.source_file)
    _copy_attachments(scenario, fresh)
    return fresh


def absolute_files(data: Any, base: FilePath) -> None:
    """Make every `file:` in a dumped scenario absolute (relative to `base`), so the copy loads
    from anywhere."""
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "file" and isinstance(value, str):
                data[key] = str((base / value).resolve())
            else:
                absolute_files(value, base)
    elif isinstance(data, list):
        for item in data:
            absolute_files(item, base)


def set_key_path(data: dict[str, Any], dotted: str, value: Any, source: str) -> None:
    """Set `a.b.c` in nested dicts; every part but the last must already exist."""
    parts = dotted.split(".")
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        if not isinstance(node, dict) or part not in node:
            where = ".".join(parts[: i + 1])
            raise ScenarioError(source, [(dotted, f"no key '{where}' in the scenario to override")])
        node = node[part]
    if not isinstance(node, dict):
        raise ScenarioError(source, [(dotted, "cannot override inside a non-mapping")])
    node[parts[-1]] = copy.deepcopy(value)


def json_schema() -> dict[str, Any]:
    """JSON Schema of the scenario format, for editors."""
    schema = Scenario.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "tailsim scenario"
    return schema


def json_schema_text() -> str:
    """The JSON Schema, pretty-printed."""
    return json.dumps(json_schema(), indent=2, sort_keys=False)


# ---------------------------------------------------------------- YAML with duplicate-key checks


class _StrictLoader(yaml.SafeLoader):
    """A SafeLoader that refuses duplicate keys instead of silently keeping the last."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}'", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


# ---------------------------------------------------------------- error formatting


def _problems(exc: ValidationError) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for err in exc.errors(include_url=False):
        raw_loc = tuple(err["loc"])
        loc = _strip_union_tags(raw_loc)
        kind = err["type"]
        if kind == "value_error" and isinstance(err.get("ctx", {}).get("error"), FieldError):
            for sub, message in err["ctx"]["error"].problems:
                problems.append((format_path(loc + sub), message))
            continue
        if kind == "int_type" and isinstance(err.get("input"), dict) and loc != raw_loc:
            continue  # a mapping given where a number or a mapping goes: the mapping's errors
        if kind in ("union_tag_invalid", "union_tag_not_found"):
            loc = (*loc, "kind")
        problems.append((format_path(loc), _message(err, raw_loc)))
    return list(dict.fromkeys(problems))


def _strip_union_tags(loc: Path) -> Path:
    """Drop the tag pydantic inserts after a discriminated union member (policies.x.race.y),
    and the member names of a plain union (a number or a mapping: `output_tokens`)."""
    if len(loc) >= 3 and loc[0] == "policies" and loc[2] in POLICY_KINDS:
        loc = loc[:2] + loc[3:]
    return tuple(p for p in loc if not (isinstance(p, str) and _UNION_MEMBER.match(p)))


#: Names pydantic gives the members of a plain union in error locations.
_UNION_MEMBER = re.compile(r"^(constrained-int|int|function-after\[.*\]|LengthSpec)$")


def _message(err: Any, raw_loc: Path) -> str:
    kind = err["type"]
    given = err.get("input")
    if kind == "extra_forbidden":
        key = str(raw_loc[-1])
        allowed = _allowed_keys(raw_loc[:-1])
        close = get_close_matches(key, allowed, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        return f"unknown key ({hint}allowed: {', '.join(allowed)})"
    if kind == "missing":
        return "missing (required)"
    if kind == "union_tag_invalid":
        return f"unknown kind {given.get('kind')!r} (allowed: {', '.join(POLICY_KINDS)})"
    if kind == "union_tag_not_found":
        return f"missing 'kind' (allowed: {', '.join(POLICY_KINDS)})"
    if kind == "literal_error":
        return f"got {given!r}, allowed: {err['ctx']['expected']}"
    message = str(err["msg"])
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    message = message[0].lower() + message[1:] if message else message
    if kind == "value_error" or isinstance(given, dict | list):
        return message
    return f"{message}, got {given!r}"


def _allowed_keys(loc: Path) -> list[str]:
    """The keys a mapping at `loc` may hold, found by walking the model classes."""
    node: Any = Scenario
    for part in loc:
        node = _step_into(node, part)
        if node is None:
            return []
    model = _as_model(node)
    return sorted(model.model_fields) if model else []


def _step_into(annotation: Any, part: str | int) -> Any:
    model = _as_model(annotation, tag=part if isinstance(part, str) else None)
    if model is not None:
        if isinstance(part, str) and part in model.model_fields:
            return model.model_fields[part].annotation
        if isinstance(part, str) and part in POLICY_KINDS:
            return model
        return None
    origin = get_origin(annotation)
    args = [a for a in get_args(annotation) if a is not type(None)]
    if origin is dict and len(args) == 2:
        return args[1]
    if origin is list and args:
        return args[0]
    if args:  # Annotated / Optional / Union: try each member
        for arg in args:
            found = _step_into(arg, part)
            if found is not None:
                return found
    return None


def _as_model(annotation: Any, tag: str | None = None) -> type[BaseModel] | None:
    """The model class behind an annotation (through Optional / Annotated / a tagged union)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = get_origin(annotation)
    if origin is None or origin in (dict, list):
        return None
    models = [m for m in (_as_model(a) for a in get_args(annotation)) if m is not None]
    if tag is not None:
        for model in models:
            kind = model.model_fields.get("kind")
            if kind is not None and tag in get_args(kind.annotation):
                return model
    return models[0] if len(models) == 1 else None


# ---------------------------------------------------------------- referenced files


def _attach_files(scenario: Scenario, source: str, base_dir: FilePath) -> None:
    """Read every file the scenario names and attach its numbers; errors name the key path."""
    problems: list[tuple[str, str]] = []
    for path, dist in _dist_specs(scenario):
        if dist.dist != "empirical" or dist.samples is not None:
            continue
        try:
            dist.attach_samples(_read_samples(base_dir, dist.file or "", dist.column))
        except ValueError as exc:
            problems.append((format_path((*path, "file")), str(exc)))
    arrivals = scenario.arrivals
    if arrivals.kind == "trace" and arrivals.trace_offsets is None:
        try:
            arrivals.attach_trace(_read_trace(base_dir, arrivals.file or "", arrivals.column))
        except ValueError as exc:
            problems.append(("arrivals.file", str(exc)))
    if problems:
        raise ScenarioError(source, problems)


def _copy_attachments(old: Scenario, new: Scenario) -> None:
    """Carry file contents over to an overridden copy (where the files did not change)."""
    old_dists = {format_path(p): d for p, d in _dist_specs(old)}
    for path, dist in _dist_specs(new):
        prev = old_dists.get(format_path(path))
        if prev is not None and prev.samples is not None and prev.file == dist.file:
            dist.attach_samples(prev.samples)
    if old.arrivals.trace_offsets is not None and old.arrivals.file == new.arrivals.file:
        new.arrivals.attach_trace(old.arrivals.trace_offsets)


def _dist_specs(scenario: Scenario) -> list[tuple[Path, DistSpec]]:
    found: list[tuple[Path, DistSpec]] = []
    for pname, provider in scenario.providers.items():
        if provider.overhead_s is not None:
            found.append((("providers", pname, "overhead_s"), provider.overhead_s))
        for mname, serving in provider.serves.items():
            base: Path = ("providers", pname, "serves", mname)
            found.append(((*base, "ttft_s"), serving.ttft_s))
            found.append(((*base, "tokens_per_s"), serving.tokens_per_s))
            if serving.stall is not None:
                found.append(((*base, "stall", "extra_s"), serving.stall.extra_s))
    return found


def _resolve(base_dir: FilePath, name: str) -> FilePath:
    file = FilePath(name)
    return file if file.is_absolute() else base_dir / file


def _read_column(base_dir: FilePath, name: str, column: str | None) -> tuple[FilePath, pd.Series]:
    file = _resolve(base_dir, name)
    if file.is_dir():
        raise ValueError(f"{file} is a folder, expected a CSV file")
    if not file.is_file():
        raise ValueError(f"file not found: {file}")
    try:
        frame = pd.read_csv(file)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise ValueError(f"cannot read {file} as CSV: {exc}") from None
    if frame.empty:
        raise ValueError(f"{file} has no rows")
    col = column if column is not None else str(frame.columns[0])
    if col not in frame.columns:
        raise ValueError(
            f"{file} has no column '{col}' (columns: {', '.join(map(str, frame.columns))})"
        )
    return file, frame[col]


def _read_samples(base_dir: FilePath, name: str, column: str | None) -> np.ndarray:
    file, series = _read_column(base_dir, name, column)
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=float)
    if np.isnan(values).any() or (values < 0).any() or not np.isfinite(values).all():
        raise ValueError(f"column '{series.name}' of {file} must hold numbers >= 0 (seconds)")
    return np.sort(values)


def _read_trace(base_dir: FilePath, name: str, column: str) -> np.ndarray:
    file, series = _read_column(base_dir, name, column)
    if pd.api.types.is_numeric_dtype(series):
        seconds = series.to_numpy(dtype=float)
    else:
        stamps = pd.to_datetime(series, errors="coerce")
        if stamps.isna().any():
            raise ValueError(f"column '{column}' of {file} holds values that are not timestamps")
        seconds = (stamps - stamps.min()).dt.total_seconds().to_numpy(dtype=float)
    if np.isnan(seconds).any():
        raise ValueError(f"column '{column}' of {file} holds non-numbers")
    seconds = np.sort(seconds)
    return seconds - seconds[0]
