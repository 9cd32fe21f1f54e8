"""A sweep's grid: the sweep file or `--grid` flags read into axes (`load_sweep`), every point of
their product as a validated scenario (`expand`), and the key of what an arm x seed's rows depend
on (`job_key`), so that points that share an arm's settings run it once."""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testbed.scenario.loading import ScenarioError, apply_override, clip, load_yaml, read_scenario_file
from testbed.scenario.schema import Scenario, parse_scenario

__all__ = [
    "MAX_POINTS",
    "Axis",
    "Point",
    "Sweep",
    "assign",
    "expand",
    "is_sweep_file",
    "job_key",
    "load_sweep",
    "parse_axis",
    "parse_grid_flag",
]

MAX_POINTS = 512  # a grid this large is a typo more often than a plan
# What an arm x seed's rows depend on besides its own arm section (the rest: labels, output)
_NOT_JOB = ("name", "description", "arms", "output", "tracking")
# Settings that change where and how fast a job runs, not its rows (parallel arms write the rows of
# arms run in turn, tested in tests/test_ray_runtime.py): points that differ only there share work.
_NOT_ROWS = {
    "runtime": ("parallel_arms", "torch_threads", "task_cpus", "actor_cpus", "address"),
    "reliability": ("checkpoint_every",),
}


@dataclass
class Axis:
    """One grid axis: its name and, per value, a label and the assignments it makes."""

    name: str
    values: list[tuple[str, dict[str, Any]]]


@dataclass
class Point:
    label: str  # pNN
    values: dict[str, str]  # axis -> value label
    data: dict[str, Any]  # the scenario's data at this point
    arm_keys: dict[str, str] = field(default_factory=dict)  # arm name -> job key


@dataclass
class Sweep:
    name: str
    base: dict[str, Any]
    axes: list[Axis]
    source: str
    reuse: list[str] = field(default_factory=list)  # earlier sweep directories whose finished arms count


def _label(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def parse_axis(name: str, spec: Any, where: str, scenario_fields: set[str]) -> Axis:
    """`key: [v1, v2]`, `key: {label: value}`, or a named axis `name: {label: {key: value, ...}}`."""
    named = "." not in name and name not in scenario_fields
    if named:
        if not isinstance(spec, dict) or not spec or not all(isinstance(v, dict) and v for v in spec.values()):
            raise ScenarioError(
                f"{where}: '{name}' is not a scenario field, so it must be a named axis: a mapping of labels "
                "to mappings of key: value (e.g. b32: {arms.sao.args.episodes_per_update: 32})"
            )
        return Axis(name, [(str(label), dict(sets)) for label, sets in spec.items()])
    if isinstance(spec, list) and spec:
        return Axis(name, [(_label(v), {name: v}) for v in spec])
    if isinstance(spec, dict) and spec:
        return Axis(name, [(str(label), {name: v}) for label, v in spec.items()])
    raise ScenarioError(f"{where}: axis '{name}' needs a non-empty list of values or a mapping of labels to values")


def parse_grid_flag(flag: str) -> tuple[str, list[Any]]:
    """`--grid key=v1,v2` -> (key, [v1, v2]); each value is read as YAML."""
    key, sep, raw = flag.partition("=")
    if not sep or not key or not raw:
        raise ScenarioError(f"--grid {clip(repr(flag), 200)}: expected key=v1,v2 (e.g. arms.1.args.window=16,128)")
    try:
        return key, [load_yaml(v) for v in raw.split(",")]
    except yaml.YAMLError as exc:
        raise ScenarioError(f"--grid {key}: a value is not valid YAML: {exc}") from None


def is_sweep_file(path: Path) -> bool:
    data = read_scenario_file(Path(path))
    return isinstance(data, dict) and "grid" in data and "scenario" in data


def load_sweep(path: Path, grid_flags: list[str], overrides: list[str], seeds: str | None) -> Sweep:
    """A sweep file, or a scenario file with --grid flags."""

    data = read_scenario_file(path)
    fields = set(Scenario.model_fields)
    if isinstance(data, dict) and "grid" in data:
        unknown = set(data) - {"scenario", "name", "set", "grid"}
        if unknown:
            raise ScenarioError(
                f"{path}: unknown sweep key(s) {sorted(unknown)} (a sweep file has: scenario, name, set, grid)"
            )
        if not isinstance(data.get("scenario"), str):
            raise ScenarioError(f"{path}: scenario: the base scenario file, relative to the sweep file, is missing")
        base_path = (path.parent / data["scenario"]).resolve()
        base = read_scenario_file(base_path)
        if not isinstance(base, dict):
            raise ScenarioError(f"{base_path}: a scenario must be a mapping of keys to values")
        sets = data.get("set") or {}
        if not isinstance(sets, dict):
            raise ScenarioError(f"{path}: set: a mapping of key: value")
        for key, value in sets.items():
            assign(base, str(key), value)
        if not isinstance(data["grid"], dict) or not data["grid"]:
            raise ScenarioError(f"{path}: grid: a mapping of axes to their values")
        axes = [parse_axis(str(k), v, f"{path}: grid", fields) for k, v in data["grid"].items()]
        name = str(data.get("name") or path.stem)
    else:
        if not isinstance(data, dict):
            raise ScenarioError(f"{path}: a scenario must be a mapping of keys to values")
        base, axes, name = data, [], f"{data.get('name', path.stem)}-sweep"
    for flag in grid_flags:
        key, values = parse_grid_flag(flag)
        axes.append(parse_axis(key, values, "--grid", fields))
    if not axes:
        raise ScenarioError(f"{path}: no grid: give --grid KEY=V1,V2 or a sweep file with a grid")
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise ScenarioError(f"grid axes must be distinct, got {names}")
    for assignment in overrides:
        apply_override(base, assignment)
    if seeds:
        try:
            base["seeds"] = [int(s) for s in seeds.split(",")]
        except ValueError:
            raise ScenarioError(
                f"--seeds {clip(repr(seeds), 100)}: expected comma-separated integers, e.g. 0,1,2"
            ) from None
    return Sweep(name, base, axes, str(path))


def assign(data: dict[str, Any], key: str, value: Any) -> None:
    """Set a dotted key; `arms.NAME...` finds the arm by name (else an index, as in --set)."""
    parts = key.split(".")
    if parts[0] == "arms" and len(parts) > 1 and not parts[1].isdigit():
        names = [a.get("name") for a in data.get("arms") or [] if isinstance(a, dict)]
        if parts[1] not in names:
            raise ScenarioError(f"grid key {key}: no arm named '{parts[1]}' (the arms: {', '.join(map(str, names))})")
        parts[1] = str(names.index(parts[1]))
    apply_override(data, f"{'.'.join(parts)}={json.dumps(value)}")  # JSON is YAML: the value stays as given


def expand(sweep: Sweep) -> list[Point]:
    """Every point of the grid (the product of the axes, the first axis slowest), validated as a
    scenario before anything runs."""

    combos = list(itertools.product(*[axis.values for axis in sweep.axes]))
    if len(combos) > MAX_POINTS:
        raise ScenarioError(f"the grid has {len(combos)} points, over {MAX_POINTS}; narrow it")
    points = []
    for i, combo in enumerate(combos):
        data = copy.deepcopy(sweep.base)
        for _, sets in combo:
            for key, value in sets.items():
                assign(data, key, value)
        label = f"p{i:02d}"
        data["name"] = f"{sweep.name}-{label}"
        values = {axis.name: value_label for axis, (value_label, _) in zip(sweep.axes, combo)}
        described = ", ".join(f"{k}={v}" for k, v in values.items())
        data["description"] = f"{sweep.name} point {label}: {described}"
        scenario = parse_scenario(data, f"{sweep.source} point {label} ({described})")
        point = Point(label, values, data)
        point.arm_keys = {arm.name: job_key(scenario, arm.name) for arm in scenario.arms}
        points.append(point)
    return points


def job_key(scenario: Any, arm_name: str) -> str:
    """What an arm x seed's rows depend on: the scenario without labels and other arms, and the arm."""
    dump = scenario.model_dump(mode="json", by_alias=True)
    arm = next(a for a in dump["arms"] if a["name"] == arm_name)
    spec = {k: v for k, v in dump.items() if k not in _NOT_JOB} | {"arm": arm}
    for section, keys in _NOT_ROWS.items():
        spec[section] = {k: v for k, v in spec[section].items() if k not in keys}
    arm["runtime"] = {k: v for k, v in arm["runtime"].items() if k not in _NOT_ROWS["runtime"]}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
