"""One construction contract for every kind of plugin (docs/plugins.md): a plugin of each kind,
written from that page alone into a package outside the project, loads by import path, has its
`args` checked when the scenario loads (a bad one named by its field), and runs a tiny scenario.
Scenarios in the spellings before `type:`/`args:` are refused with the new spelling."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from testbed import registry
from testbed.cli.run_command import main
from testbed.scenario.schema import ScenarioError, load_scenario, parse_scenario
from testbed.store import read_table

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "contractpkg"  # written into a temporary directory, never part of the project

SOURCES = {
    # a factory with args and a Config: it returns the judge (the Judge protocol: async judge)
    "judge.py": """
        from pydantic import BaseModel, ConfigDict, Field
        from testbed.registry import configured
        from testbed.types import Verdict

        class Config(BaseModel):
            model_config = ConfigDict(extra="forbid")
            max_words: int = Field(30, ge=1)
            log: str

        class _Judge:
            def __init__(self, max_words, log):
                self.max_words, self.log = max_words, log

            async def judge(self, requests):
                with open(self.log, "a") as f:
                    f.write(f"{len(requests)}\\n")
                return [Verdict(quality=int(len(r.response.split()) <= self.max_words), style_match=1,
                                style=r.target_style) for r in requests]

        @configured(Config)
        def make_judge(max_words=30, log=""):
            return _Judge(max_words, log)
    """,
    # a class with a Config; positions in fractions of the budget, turned into clocks with it
    "schedule.py": """
        from pydantic import BaseModel, ConfigDict, Field
        from testbed.types import Target

        class Flip:
            class Config(BaseModel):
                model_config = ConfigDict(extra="forbid")
                first: str
                second: str
                at: float = Field(gt=0, lt=1)

            def __init__(self, first, second, at, *, budget, archetypes):
                self.first, self.second, self.at = first, second, round(at * budget)
                self.candidates = (first, second)

            def target(self, t):
                return Target(self.first if t < self.at else self.second, self.candidates)

            def switch_points(self):
                return [self.at]
    """,
    # a class with a Config, keyword args; updates nothing but its version
    "trainer.py": """
        from pydantic import BaseModel, ConfigDict, Field

        class Idle:
            class Config(BaseModel):
                model_config = ConfigDict(extra="forbid")
                episodes_per_update: int = Field(16, ge=1)

            group_size = 1

            def __init__(self, policy, *, pad_id, temperature, seed, **args):
                self.cfg = self.Config.model_validate(args)
                self.policy = policy
                self.episodes_per_update = self.cfg.episodes_per_update
                self.version = 0

            def update(self, batch):
                self.version += 1
                return {"batch": float(len(batch)), "nonfinite": None, "skipped_steps": 0}

            def state_dict(self):
                return {"policy": self.policy.state_dict(), "version": self.version}

            def load_state_dict(self, state):
                self.policy.load_state_dict(state["policy"])
                self.version = state["version"]
    """,
    # a factory without a Config: its keyword parameters are its args
    "engine.py": """
        from testbed.engines.hf_engine import HFEngine

        def make_engine(policy, tokenizer, sampling, max_batch=64, log=""):
            engine = HFEngine(policy, tokenizer, sampling, max_batch=max_batch)
            generate = engine.generate

            def counted(prompts, n=1):
                with open(log, "a") as f:
                    f.write(f"{len(prompts) * n}\\n")
                return generate(prompts, n)

            engine.generate = counted
            return engine
    """,
    # a factory whose env wraps a StyleShiftEnv without subclassing it (the Env protocol)
    "env.py": """
        from pydantic import BaseModel, ConfigDict
        from testbed.envs.style_shift import StyleShiftEnv
        from testbed.registry import configured

        class Config(BaseModel):
            model_config = ConfigDict(extra="forbid")
            log: str

        class Wrapped:
            def __init__(self, inner, log):
                self.inner, self.log = inner, log

            clock = property(lambda self: self.inner.clock, lambda self, v: setattr(self.inner, "clock", v))
            np_random = property(lambda self: self.inner.np_random)

            def rollout(self, engine, starts):
                with open(self.log, "a") as f:
                    f.write(f"{len(starts)}\\n")
                return self.inner.rollout(engine, starts)

            def __getattr__(self, name):  # the rest of the protocol: the inner env's
                if name in ("reset", "reset_batch", "retarget", "episode_runner", "step_batch", "episode_clocks",
                            "score_with", "eval_starts", "told_target_starts", "evaluate_batch", "close"):
                    return getattr(self.inner, name)
                raise AttributeError(name)

        @configured(Config)
        def make_env(judge, schedule, prompt_specs, *, seed, log, **world):
            return Wrapped(StyleShiftEnv(judge, schedule, prompt_specs, seed=seed, **world), log)
    """,
}


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """The plugin package on the import path, as PYTHONPATH would put it; its logs beside it."""
    root = tmp_path_factory.mktemp("outside")
    (root / PACKAGE).mkdir()
    (root / PACKAGE / "__init__.py").write_text("")
    for name, source in SOURCES.items():
        (root / PACKAGE / name).write_text(textwrap.dedent(source))
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[name]


def scenario_data(root: Path) -> dict:
    """golden.yaml's world and starting policy (no SFT), every plugin from the package."""
    data = yaml.safe_load((ROOT / "tests/data/golden.yaml").read_text())
    log = lambda kind: str(root / f"{kind}.log")  # noqa: E731
    data.update(
        judge={"type": f"{PACKAGE}.judge:make_judge", "args": {"max_words": 40, "log": log("judge")}},
        schedule={"type": f"{PACKAGE}.schedule:Flip", "args": {"first": "cute", "second": "classical", "at": 0.5}},
        engine={"type": f"{PACKAGE}.engine:make_engine", "args": {"max_batch": 8, "log": log("engine")}},
        env={"type": f"{PACKAGE}.env:make_env", "args": {"log": log("env")}},
        arms=[{"name": "idle", "type": f"{PACKAGE}.trainer:Idle", "args": {"episodes_per_update": 16}}],
        seeds=[0],
        budget={"episodes": 32},
        eval={"every": 32, "prompts": 4, "reference_samples": 0},
    )
    data["policy"]["checkpoint"] = str(ROOT / "tests/data/golden/policy")
    return data


def test_a_plugin_of_every_kind_runs_a_scenario(package, tmp_path):
    path = tmp_path / "contract.yaml"
    path.write_text(yaml.safe_dump(scenario_data(package)))
    assert main([str(path), "--out", str(tmp_path / "runs"), "--run-name", "run", "--no-report"]) == 0
    run = tmp_path / "runs" / "run"
    episodes = read_table(run, "episodes")
    assert len(episodes) == 32 and set(episodes[episodes.t < 16].target_style) == {"cute"}
    assert set(episodes[episodes.t >= 16].target_style) == {"classical"}  # Flip's at: 0.5 of the budget
    updates = read_table(run, "updates")
    assert list(updates.batch) == [16.0, 16.0]  # the Idle trainer's own metric, episodes_per_update from its args
    for kind in ("judge", "engine", "env"):  # each built with its args (the log path) and called
        assert sum(int(n) for n in (package / f"{kind}.log").read_text().split()) >= 32, kind
    # the run directory's scenario is in the new spelling, so a resume reads it back
    saved = load_scenario(run / "scenario.yaml")
    assert saved.judge.type == f"{PACKAGE}.judge:make_judge" and saved.arms[0].type == f"{PACKAGE}.trainer:Idle"
    assert json.loads((run / "manifest.json").read_text())["status"] == "done"


@pytest.mark.parametrize(
    ("where", "bad", "says"),
    [
        ("judge", {"max_words": 0}, "judge.args.max_words: Input should be greater than or equal to 1"),
        ("judge", {"max_wrds": 3}, "judge.args.max_wrds: unknown key 'max_wrds' (did you mean 'max_words'?)"),
        (
            "schedule",
            {"first": "cute", "second": "classical", "at": 2},
            "schedule.args.at: Input should be less than 1",
        ),
        ("arms", {"episodes_per_update": "many"}, "arms.0.args.episodes_per_update: Input should be a valid integer"),
        ("engine", {"max_btch": 8}, "engine.args.max_btch: not an argument of make_engine (it takes: max_batch, log)"),
        ("engine", {"seed": 8}, "engine.args.seed: not an argument"),
        ("env", {"lg": "x"}, "env.args.lg: unknown key 'lg'"),
        ("env", {"seed": 1}, "env.args.seed: given by the loop to every env, not an arg"),  # beside a Config too
    ],
)
def test_bad_args_are_named_by_their_field_when_the_scenario_loads(package, where, bad, says):
    data = scenario_data(package)
    section = data[where][0] if where == "arms" else data[where]
    section["args"] = {k: v for k, v in section["args"].items() if k == "log"} | bad
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, "contract.yaml")
    assert says in " ".join(str(info.value).split())


@pytest.mark.parametrize(
    ("kind", "inputs", "keywords"),
    [
        ("judge", (), {}),
        ("schedule", (), {"budget": 10, "archetypes": ()}),
        ("trainer", ("policy",), {"pad_id": 0}),
        ("engine", ("policy", "tok", "sampling"), {}),
        ("env", ("judge", "schedule", "specs"), {"seed": 0}),
    ],
)
def test_a_factory_gets_its_args_the_same_way_for_every_kind(kind, inputs, keywords):
    def factory(*got, size: int, label: str = "x", **given):
        return got, size, label, given

    registry.check_args(kind, factory, {"size": 3})
    assert registry.build(factory, {"size": 3}, *inputs, **keywords) == (inputs, 3, "x", keywords)
    with pytest.raises(ValueError, match="args.size: required by"):
        registry.check_args(kind, factory, {})
    for name in registry.INPUTS[kind][1]:  # what the loop passes is not an arg
        with pytest.raises(ValueError, match=f"args.{name}: given by the loop"):
            registry.check_args(kind, factory, {"size": 3, name: 1})


def test_a_plugin_without_a_config_or_keywords_takes_no_args():
    def bare():
        return None

    with pytest.raises(ValueError, match=r"args\.x: not an argument of .*bare \(it takes: none\)"):
        registry.check_args("judge", bare, {"x": 1})
    registry.check_args("judge", bare, {})


def test_an_env_without_the_protocol_is_named(package):
    import importlib

    from testbed.runtimes.runner import make_env

    (package / PACKAGE / "broken_env.py").write_text(
        "def make(judge, schedule, prompt_specs, *, seed):\n    return object()\n"
    )
    importlib.invalidate_caches()  # the package's directory was listed before this module was written
    data = scenario_data(package)
    data["env"] = {"type": f"{PACKAGE}.broken_env:make"}
    scenario = parse_scenario(data)
    with pytest.raises(TypeError, match="without clock, close, episode_clocks"):
        make_env(scenario, scenario.arms[0], None, scenario.schedule_object(), 0)


# ---- the spellings before type:/args: ---------------------------------------------------------

GOOD = {
    "name": "t",
    "schedule": {"type": "piecewise", "args": {"phases": [{"style": "cute", "start": 0.0, "end": 1.0}]}},
    "arms": [{"name": "rm", "type": "running_mean", "args": {"window": 16}}],
    "budget": {"episodes": 100},
}
PHASES = GOOD["schedule"]["args"]["phases"]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            {"judge": {"class": "mypkg.judge:J", "args": {"max_words": 3}}},
            'judge.class: renamed: write `judge: {type: "mypkg.judge:J", args: {max_words: ...}}`',
        ),
        ({"judge": {"name": "rubric"}}, "judge.name: renamed: write `judge: {type: rubric, args: {...}}`"),
        (
            {"gold_judge": {"name": "rubric", "share": 0.5}},
            "gold_judge.name: renamed: write `gold_judge: {type: rubric, args: {...}, share: 0.5}`",
        ),
        (
            {"schedule": {"kind": "piecewise", "phases": PHASES}},
            "schedule.kind: renamed: write `schedule: {type: piecewise, args: {phases: ...}}`",
        ),
        (
            {"schedule": {"type": "gradual", "phases": PHASES, "window": 0.1}},
            "schedule.phases: moved into args: write `schedule: {type: gradual, args: {phases: ..., window: ...}}`",
        ),
        (
            {"arms": [{"name": "rm", "trainer": "running_mean", "args": {"window": 16}}]},
            "arms.0.trainer: renamed: write `{name: rm, type: running_mean, args: {window: ...}}`",
        ),
        (
            {"engine": {"name": "hf", "mismatch": True}},
            "engine.name: renamed: write `engine: {type: hf, args: {...}, mismatch: True}`",
        ),
        (
            {"env": {"name": "revision", "args": {"max_turns": 2}}},
            "env.name: renamed: write `env: {type: revision, args: {max_turns: ...}}`",
        ),
    ],
)
def test_an_old_spelling_is_refused_with_the_new_one(change, says):
    with pytest.raises(ScenarioError) as info:
        parse_scenario({**GOOD, **change}, "old.yaml")
    assert str(info.value).startswith("old.yaml: written in an old spelling") and says in str(info.value)


def test_an_old_override_is_refused_with_the_new_spelling(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    with pytest.raises(
        ScenarioError,
        match=r"schedule.phases: moved into args: write `schedule: \{type: piecewise, "
        r"args: \{phases: \.\.\.\}\}`",
    ):
        load_scenario(path, ["schedule.phases.0.end=1.0"])
    assert load_scenario(path, ["schedule.args.phases.0.end=1.0"]).schedule.args["phases"][0]["end"] == 1.0


# ---- schedule positions: fractions, or episodes when told -----------------------------------


def test_episodes_only_when_told_and_checked_against_the_budget():
    phases = [{"style": "cute", "start": 0, "end": 30}, {"style": "academic", "start": 30, "end": 100}]
    scenario = parse_scenario(
        {**GOOD, "schedule": {"type": "piecewise", "args": {"unit": "episodes", "phases": phases}}}
    )
    assert scenario.schedule_object().switch_points() == [30]
    with pytest.raises(ScenarioError, match="phases.1.end: 120 episodes is outside the budget"):
        parse_scenario(
            {
                **GOOD,
                "schedule": {
                    "type": "piecewise",
                    "args": {"unit": "episodes", "phases": [phases[0], {**phases[1], "end": 120}]},
                },
            }
        )
    with pytest.raises(ScenarioError, match=r"schedule.args.phases.0.end: Input should be less than or equal to 1"):
        parse_scenario({**GOOD, "schedule": {"type": "piecewise", "args": {"phases": phases}}})  # no unit: fractions


def test_an_installed_packages_entry_points_name_its_plugins(package, tmp_path, monkeypatch):
    # What pip writes for a package that declares `[project.entry-points."testbed.judges"]`
    dist = tmp_path / "outside_plugins-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: outside-plugins\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[testbed.judges]\nshort = {PACKAGE}.judge:make_judge\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.registered.cache_clear()  # the scan is read once per process
    try:
        assert registry.resolve("judge", "short") == f"{PACKAGE}.judge:make_judge"
        assert registry.resolve("judge", "rubric") == registry.BUILTINS["judge"]["rubric"]  # built-ins first
        assert callable(registry.load("judge", "short"))
    finally:
        monkeypatch.undo()
        registry.registered.cache_clear()
    with pytest.raises(registry.RegistryError, match="unknown judge 'short'"):
        registry.resolve("judge", "short")


@pytest.mark.parametrize(
    "path", [".:!", ".x:Name", "pkg.:Name", "pkg:Na me", "pkg..mod:Name", "a b:Name", ":Name", "pkg:"]
)
def test_a_malformed_import_path_is_a_registry_error_naming_it(path):
    # ".:!" came from the loader's property test (tests/test_loader_properties.py): importlib raised a
    # TypeError ("the 'package' argument is required to perform a relative import") instead
    with pytest.raises(registry.RegistryError, match="is not an import path"):
        registry.import_path(path)
