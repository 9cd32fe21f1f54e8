"""Property tests of the scenario loader and the `--set` parser: whatever the input (bytes, text,
nested YAML, odd keys and values), loading ends in a Scenario or a ScenarioError with a short
message, and the CLI in exit 2 with an error line, never in another exception. Nothing trains:
the CLI cases point `--out` at a file, so even a valid scenario stops before its run directory."""

import contextlib
import io
import tempfile
from pathlib import Path
from unittest import mock

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import testbed.cli.run_command as cli
from testbed.models import sft
from testbed.scenario.schema import Scenario, ScenarioError, load_scenario, parse_scenario
from testbed.world import STYLES

GOOD = {
    "name": "t",
    "schedule": {
        "type": "piecewise",
        "args": {
            "phases": [
                {"style": "cute", "start": 0.0, "end": 0.5, "candidates": ["cute", "academic"]},
                {"style": "academic", "start": 0.5, "end": 1.0},
            ]
        },
    },
    "arms": [{"name": "rm", "type": "running_mean", "args": {"window": 16, "episodes_per_update": 4}}],
    "budget": {"episodes": 40},
    "eval": {"every": 20, "prompts": 8},
}
KNOWN_PATHS = [
    "name",
    "description",
    "seeds",
    "seeds.0",
    "world.styles",
    "world.archetypes",
    "judge",
    "judge.args",
    "schedule",
    "schedule.type",
    "schedule.args.phases",
    "schedule.args.phases.0.style",
    "schedule.args.phases.0.start",
    "schedule.args.phases.1.end",
    "schedule.args.phases.0.candidates",
    "policy.hidden_size",
    "policy.sft.lr",
    "policy.sft.seed",
    "sampling.temperature",
    "engine",
    "arms",
    "arms.0",
    "arms.0.name",
    "arms.0.type",
    "arms.0.args",
    "arms.0.args.lr",
    "arms.0.args.window",
    "budget",
    "budget.episodes",
    "eval.every",
    "output.flush_seconds",
]
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = (
    st.none()
    | st.booleans()
    | st.sampled_from(STYLES)
    | st.integers(-1000, 1000)
    | st.sampled_from([-1, 0, 2**32 - 1, 2**32, -(2**63), 2**64, 10**30])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.sampled_from([":", "..relative:X", "json:no_such_name", "no_such_module_xyz:X"])  # plugin paths that fail
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(max_size=10) | st.sampled_from(["name", "style", "start", "end", "kind", "<<"]), inner, max_size=4
        )
    ),
    max_leaves=20,
)
keys = st.sampled_from(KNOWN_PATHS) | st.lists(st.text(max_size=8), min_size=1, max_size=4).map(".".join)
as_yaml = values.map(lambda v: yaml.safe_dump(v, default_flow_style=True).removesuffix("\n...\n").strip())
assignments = st.tuples(keys, st.text(max_size=40) | as_yaml).map("=".join) | st.text(max_size=40)
documents = (
    st.binary(max_size=600)
    | st.text(max_size=600).map(str.encode)
    | st.dictionaries(
        st.sampled_from([*GOOD, "world", "seeds", "judge"]) | st.text(max_size=8), values, max_size=6
    ).map(lambda d: yaml.safe_dump({**GOOD, **d}).encode())
    | st.sampled_from(
        [b"a: &x [*x]\n", b"[" * 400, b"a: 1\na: 2\n", b"\xff\xfe", b"---\n---\n", b"!!python/object:os.system {}"]
    )
)


def outcome(load) -> None:
    """The one property: a Scenario, or a ScenarioError that says something short."""
    try:
        result = load()
    except ScenarioError as exc:
        assert str(exc).strip() and len(str(exc)) < 5000, str(exc)[:500]
        return
    assert isinstance(result, Scenario)


def with_file(content: bytes, body) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.yaml"
        path.write_bytes(content)
        body(path)


@SETTINGS
@given(documents)
@example(b"(:\nschedule: .:!")  # a relative "import path" once escaped as a TypeError
def test_any_file_loads_or_gives_a_scenario_error(content):
    with_file(content, lambda path: outcome(lambda: load_scenario(path)))


@SETTINGS
@given(st.lists(st.tuples(keys, values), min_size=1, max_size=3))
@example([("arms.0.type", "..relative:X")])  # import_module raised TypeError
@example([("arms.0.type", ":")])  # the registry raised its own error
def test_any_nested_data_parses_or_gives_a_scenario_error(changes):
    def parse():
        data = yaml.safe_load(yaml.safe_dump(GOOD))
        for key, value in changes:  # put each value at its path, making sections as needed
            node, parts = data, key.split(".")
            for part in parts[:-1]:
                node = (
                    node[int(part)]
                    if isinstance(node, list) and part.isdigit() and int(part) < len(node)
                    else (node.setdefault(part, {}) if isinstance(node, dict) else {})
                )
                node = node if isinstance(node, (dict, list)) else {}
            if isinstance(node, dict):
                node[parts[-1]] = value
        return parse_scenario(data, "<test>")

    outcome(parse)


@SETTINGS
@given(st.lists(assignments, min_size=1, max_size=3))
def test_any_override_loads_or_gives_a_scenario_error(overrides):
    with_file(yaml.safe_dump(GOOD).encode(), lambda path: outcome(lambda: load_scenario(path, overrides)))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(assignments, max_size=3))
def test_the_cli_exits_2_with_a_message_before_any_run(overrides):
    def run(path: Path) -> None:
        blocked = path.parent / "not-a-directory"
        blocked.write_text("")  # --out here cannot hold a run directory: every case stops at exit 2
        err = io.StringIO()
        argv = [str(path), "--out", str(blocked), *(f"--set={o}" for o in overrides)]
        with (
            mock.patch.object(sft, "load_or_train_policy", side_effect=AssertionError("training started")),
            contextlib.redirect_stderr(err),
        ):
            code = cli.main(argv)
        assert code == 2 and "error:" in err.getvalue(), err.getvalue()[-2000:]

    with_file(yaml.safe_dump(GOOD).encode(), run)
