"""Reading scenario input that may be careless or hostile: the file, its YAML, and `--set` overrides.

Everything here ends in data or a ScenarioError naming the file, key, line or value, and it is
all checked before the schema sees the data, so nothing downstream has to cope with bytes that
are not UTF-8, duplicate keys (which YAML would resolve silently, last one wins), files too large
to parse in reasonable time, or aliases that expand to millions of values.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_SCENARIO_BYTES = 1_000_000  # a real scenario is a few kB; PyYAML needs ~1 s per MB
MAX_VALUES = 10_000  # values in the document once aliases are expanded (a scenario has ~200)
MAX_DEPTH = 50  # nesting levels (a scenario has ~5); PyYAML itself recurses and would overflow
MAX_MESSAGE = 2_000  # characters of one error message
MERGE_TAG = "tag:yaml.org,2002:merge"


class ScenarioError(ValueError):
    """A scenario that cannot run; the message names the file and field."""


def clip(text: str, limit: int = MAX_MESSAGE) -> str:
    """A message or value shortened to `limit` characters, saying how much was left out."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def placed_under(prefix: str, line: str) -> str:
    """A problem line ("  where: what") of a section's own validation, placed under `prefix`; the
    section's "(top level)", a check across its fields, is `prefix` itself."""
    top = "  (top level)"
    return f"  {prefix}{line[len(top) :]}" if line.startswith(top) else line.replace("  ", f"  {prefix}.", 1)


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and documents that expand too far through aliases."""

    def get_single_node(self) -> Node | None:
        node = super().get_single_node()
        if node is not None:
            _expanded_size(node, 0, {}, set())
        return node

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        _refuse_duplicates(self, node)
        return super().construct_mapping(node, deep=deep)


def _refuse_duplicates(loader: StrictLoader, node: MappingNode) -> None:
    # Only the keys written in this mapping: a key beside a `<<` merge overrides the merged one
    # by YAML's own rule, so merged keys are not duplicates. (A non-scalar key is the base
    # constructor's to refuse.)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == MERGE_TAG or not isinstance(key_node, ScalarNode):
            continue
        key, line = loader.construct_object(key_node), key_node.start_mark.line + 1
        if key in seen:
            raise ConstructorError(
                None, None, f"duplicate key {clip(repr(key), 80)} at line {line} (first at line {seen[key]})", None
            )
        seen[key] = line


def _expanded_size(node: Node, depth: int, sizes: dict[int, tuple[int, int]], path: set[int]) -> tuple[int, int]:
    """(values, height) of `node` with every alias expanded, computed once per node, so a bomb is
    measured without being expanded; a node inside itself is a loop that no data can hold."""
    if depth > MAX_DEPTH:
        raise yaml.YAMLError(f"nested more than {MAX_DEPTH} levels deep (line {node.start_mark.line + 1})")
    if id(node) in sizes:
        size, height = sizes[id(node)]
    elif id(node) in path:
        raise yaml.YAMLError(f"an alias refers to itself (line {node.start_mark.line + 1}): a loop, not data")
    else:
        children = (
            node.value
            if isinstance(node, SequenceNode)
            else ([n for pair in node.value for n in pair] if isinstance(node, MappingNode) else [])
        )
        path.add(id(node))
        measured = [_expanded_size(child, depth + 1, sizes, path) for child in children]
        path.discard(id(node))
        size, height = 1 + sum(s for s, _ in measured), 1 + max((h for _, h in measured), default=0)
        sizes[id(node)] = (size, height)
    if size > MAX_VALUES:
        raise yaml.YAMLError(
            f"expands to more than {MAX_VALUES} values through aliases (line {node.start_mark.line + 1})"
        )
    if depth + height > MAX_DEPTH:
        raise yaml.YAMLError(f"nested more than {MAX_DEPTH} levels deep (line {node.start_mark.line + 1})")
    return size, height


def load_yaml(text: str) -> Any:
    """YAML text -> data through StrictLoader; every failure is a yaml.YAMLError."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 (StrictLoader is a SafeLoader)
    except RecursionError:
        raise yaml.YAMLError(f"nested too deeply to parse (more than {MAX_DEPTH} levels are refused)") from None


def read_scenario_file(path: Path) -> Any:
    """The data of a scenario file, or a ScenarioError that names the file."""
    try:
        if path.is_dir():
            raise ScenarioError(f"{path} is a directory, not a scenario file")
        if not path.exists():
            raise ScenarioError(f"scenario file not found: {path}")
        if not path.is_file():  # a device or pipe could be endless
            raise ScenarioError(f"{path} is not a regular file")
        size = path.stat().st_size
        if size > MAX_SCENARIO_BYTES:
            raise ScenarioError(f"{path} is {size} bytes; the limit is {MAX_SCENARIO_BYTES} bytes for a scenario file")
        raw = path.read_bytes()
    except (OSError, ValueError) as exc:
        if isinstance(exc, ScenarioError):
            raise
        raise ScenarioError(f"cannot read the scenario file {path}: {exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ScenarioError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at line {line}, column {column}); save it as UTF-8"
        ) from None
    try:
        return load_yaml(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(clip(f"{path}: not valid YAML: {exc}")) from None


def _control_character(text: str) -> str | None:
    """The first control character in `text` other than tab and newline, if any."""
    return next((c for c in text if c not in "\t\n" and unicodedata.category(c) == "Cc"), None)


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """`--set arms.0.args.lr=1e-3`: a dotted path (list indices as numbers), the value as YAML."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key:
        raise ScenarioError(f"--set {clip(repr(assignment), 200)}: expected key=value, e.g. budget.episodes=500")
    bad = _control_character(assignment)
    if bad is not None:
        raise ScenarioError(
            f"--set {clip(repr(assignment), 200)}: holds the control character {bad!r}; "
            "keys and values must be printable text"
        )
    try:
        value = load_yaml(raw) if raw else ""
    except yaml.YAMLError as exc:
        raise ScenarioError(clip(f"--set {key}: the value is not valid YAML ({clip(repr(raw), 200)}): {exc}")) from None
    _assign(data, key, value)


def _assign(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node: Any = data
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        where = ".".join(parts[: depth + 1])
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ScenarioError(f"--set {key}: '{where}' is not an index of a list of {len(node)}")
            if last:
                node[int(part)] = value
            else:
                node = node[int(part)]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, {})
        else:
            raise ScenarioError(f"--set {key}: '{'.'.join(parts[:depth])}' is a value, not a section")
