"""The package as pip sees it: pyproject.toml's dependencies are ranges with the tested set pinned
in constraints.txt, the extras match the parts that need them (the core imports none of the `llm`
extra's packages, and asking for the LLM judge or the judge server without it names the extra), and
the `testbed` command (testbed/cli/main.py, also `python -m testbed`) hands each subcommand to its
module."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tomllib
from importlib.metadata import distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from testbed.cli import main as cli

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SUBCOMMANDS = ("run", "sweep", "report", "judge-server", "export")
LLM_PACKAGES = {"litellm", "openai", "fastapi", "starlette", "uvicorn", "httptools", "tenacity"}
NEVER_LITELLM = (Version("1.82.7"), Version("1.82.8"))
# The only modules that may import the `llm` extra's packages (each checks for it first).
LLM_MODULES = {"judges/llm.py", "judges/retry.py", "judges/server.py", "judges/http_replies.py"}
NOTEBOOK_RUNTIME = {"jupytext", "ipykernel", "nbclient", "nbformat"}  # what the tests need of `notebooks`


def requirements() -> list[tuple[str, Requirement]]:
    """(where, requirement) for the core and every extra, without the self-references (testbed[llm])."""
    found = [("dependencies", Requirement(r)) for r in PROJECT["dependencies"]]
    for extra, reqs in PROJECT["optional-dependencies"].items():
        found += [(f"[{extra}]", Requirement(r)) for r in reqs]
    return [(where, r) for where, r in found if canonicalize_name(r.name) != "testbed"]


def pins() -> dict[str, Version]:
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"constraints.txt: {line!r} is not an exact pin (name==version)"
            assert canonicalize_name(name) not in out, f"constraints.txt pins {name} twice"
            out[canonicalize_name(name)] = Version(version)
    return out


def run_python(code: str, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_dependencies_are_ranges_not_pins():
    for where, req in requirements():
        exact = [s for s in req.specifier if s.operator in ("==", "===")]
        assert not exact, f"{where}: {req} pins an exact version; give a range (the pin belongs in constraints.txt)"
        assert any(s.operator in ("<", "<=", "~=") for s in req.specifier), f"{where}: {req} has no upper bound"


def test_constraints_pin_every_dependency_within_its_range():
    pinned = pins()
    for where, req in requirements():
        name = canonicalize_name(req.name)
        assert name in pinned, f"{where}: {req.name} has no pin in constraints.txt"
        assert req.specifier.contains(pinned[name], prereleases=True), (
            f"{where}: constraints.txt's {req.name}=={pinned[name]} is outside {req.specifier}"
        )


def test_a_package_listed_twice_has_one_range():
    ranges: dict[str, set[str]] = {}
    for _, req in requirements():
        ranges.setdefault(canonicalize_name(req.name), set()).add(str(req.specifier))
    assert {n: r for n, r in ranges.items() if len(r) > 1} == {}


def test_litellm_1_82_7_and_1_82_8_are_excluded_everywhere():
    litellm = [(where, req) for where, req in requirements() if canonicalize_name(req.name) == "litellm"]
    assert litellm, "litellm is listed nowhere"
    for where, req in litellm:
        for bad in NEVER_LITELLM:
            assert f"!={bad}" in {str(s) for s in req.specifier}, f"{where}: {req} does not exclude {bad} by name"
            assert not req.specifier.contains(bad, prereleases=True)
    assert pins()["litellm"] not in NEVER_LITELLM
    for path in ("requirements-vllm.txt",):
        for line in (ROOT / path).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line and canonicalize_name(Requirement(line).name) == "litellm":
                assert not any(Requirement(line).specifier.contains(bad) for bad in NEVER_LITELLM), f"{path}: {line}"


def test_the_extras_hold_their_parts():
    extras = PROJECT["optional-dependencies"]
    names = {k: {canonicalize_name(Requirement(r).name) for r in v} for k, v in extras.items()}
    core = {canonicalize_name(Requirement(r).name) for r in PROJECT["dependencies"]}
    assert core & LLM_PACKAGES == set()
    assert names["llm"] >= LLM_PACKAGES
    assert {"jupyterlab"} | NOTEBOOK_RUNTIME <= names["notebooks"]
    # the tests run the LLM judge, the judge server and the notebooks, but need no JupyterLab
    assert "testbed[llm]" in extras["dev"] and names["dev"] >= NOTEBOOK_RUNTIME and "jupyterlab" not in names["dev"]
    assert {"scipy", "ray", "torch"} <= core
    assert {"smollm", "bench"} <= set(extras)
    # the TRL reward function (testbed/integrations/trl.py): its own extra, which the tests install
    assert {"trl", "datasets"} <= names["trl"] and "testbed[trl]" in extras["dev"]


def test_only_the_llm_modules_import_the_llm_extra():
    """The core never needs the `llm` extra: litellm, openai, fastapi, ... are imported (at any
    depth of a file) only by the LLM judge and the judge server."""
    found = []
    for package in ("testbed", "judges", "trainers", "analysis"):
        for path in (ROOT / package).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module]
                    if isinstance(node, ast.ImportFrom) and node.module and not node.level
                    else []
                )
                found += [(rel, n) for n in names if n.split(".")[0] in LLM_PACKAGES]
    assert found and {rel for rel, _ in found} <= LLM_MODULES, found


@pytest.mark.parametrize(
    "blocked, code",
    [
        (
            "litellm",
            "from testbed import registry\ntry:\n    registry.load('judge', 'llm')\n"
            "except registry.RegistryError as exc:\n    print(exc)",
        ),
        (
            "tenacity",
            "from testbed import registry\ntry:\n    registry.load('judge', 'llm')\n"
            "except registry.RegistryError as exc:\n    print(exc)",
        ),
        ("fastapi", "from testbed.cli.main import main\nsys.exit(main(['judge-server', '--port', '0']))"),
        ("uvicorn", "import runpy\nrunpy.run_module('judges.server', run_name='__main__')"),
    ],
)
def test_a_missing_extra_is_named(blocked, code):
    out = run_python(f"import sys\nsys.modules[{blocked!r}] = None  # as if not installed\n{code}")
    said = out.stdout + out.stderr
    assert "pip install 'testbed[llm]'" in said and f"missing: {blocked}" in said, said
    assert "Traceback" not in said


def test_the_trl_reward_without_its_extra_says_which_to_install():
    code = "try:\n    import testbed.integrations.trl\nexcept ImportError as exc:\n    print(exc)"
    said = run_python(f"import sys\nsys.modules['trl'] = None  # as if not installed\n{code}").stdout
    assert "pip install 'testbed[trl]'" in said and "missing: trl" in said, said


def test_a_run_with_the_llm_judge_and_no_extra_says_which_to_install(tmp_path):
    code = "import sys\nsys.modules['litellm'] = None\nfrom testbed.cli.main import main\nsys.exit(main(sys.argv[1:]))"
    out = run_python(
        code,
        "run",
        "tests/data/tiny.yaml",
        "--out",
        str(tmp_path),
        "--set",
        "judge.type=llm",
        "--set",
        "judge.args={model: openai/x, api_base: 'http://127.0.0.1:9/v1'}",
        timeout=600,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "pip install 'testbed[llm]'" in out.stderr
    assert list(tmp_path.iterdir()) == []  # refused before the run directory


def test_the_console_script_is_testbed_cli_main():
    assert PROJECT["scripts"] == {"testbed": "testbed.cli.main:main"}
    module, _, attr = PROJECT["scripts"]["testbed"].partition(":")
    assert getattr(__import__(module, fromlist=[attr]), attr) is cli.main


def test_the_installed_entry_point_when_it_is_this_checkout():
    """Through importlib.metadata, where the installed testbed is this checkout (an editable
    install: `make test`'s venv); another checkout's metadata says nothing about this one."""
    here = [d for d in distributions(name="testbed") if _installed_from_here(d)]
    if not here:
        pytest.skip("the installed testbed is not this checkout")
    scripts = [ep for ep in here[0].entry_points if ep.group == "console_scripts"]
    assert [(ep.name, ep.value) for ep in scripts] == [("testbed", "testbed.cli.main:main")]
    assert scripts[0].load() is cli.main


def _installed_from_here(dist) -> bool:
    text = dist.read_text("direct_url.json")  # PEP 610: where pip installed it from
    return bool(text) and Path(json.loads(text).get("url", "").removeprefix("file://")).resolve() == ROOT


def test_help_lists_the_subcommands():
    out = subprocess.run(
        [sys.executable, "-m", "testbed", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr
    listed = [line.split()[0] for line in out.stdout.split("commands:")[1].splitlines() if line.startswith("  ")]
    assert listed == list(SUBCOMMANDS)


def test_an_unknown_or_missing_subcommand_is_exit_2(capsys):
    assert cli.main(["trian"]) == 2
    assert "unknown command 'trian'" in capsys.readouterr().err
    assert cli.main([]) == 2


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["sweep", "--help"]])
def test_help_does_not_import_the_training_stack(argv):
    code = (
        "import sys\nfrom testbed.cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'transformers', 'pandas', 'pyarrow') if m in sys.modules))"
    )
    out = run_python(code, *argv)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_each_subcommand_hands_its_arguments_to_its_module(monkeypatch, tmp_path):
    import analysis.report
    import analysis.sweep_report
    import judges.server
    import testbed.cli.export
    import testbed.cli.run_command
    import testbed.cli.sweep_command

    calls = []
    monkeypatch.setattr(
        testbed.cli.run_command, "main", lambda argv, reexec=False: calls.append(("run", argv, reexec)) or 0
    )
    monkeypatch.setattr(testbed.cli.sweep_command, "main", lambda argv: calls.append(("sweep", argv)) or 0)
    monkeypatch.setattr(analysis.report, "main", lambda argv: calls.append(("report", argv)) or 0)
    monkeypatch.setattr(analysis.sweep_report, "main", lambda argv: calls.append(("sweep_report", argv)) or 0)
    monkeypatch.setattr(judges.server, "main", lambda argv: calls.append(("judge-server", argv)))
    monkeypatch.setattr(testbed.cli.export, "main", lambda argv: calls.append(("export", argv)) or 3)
    (tmp_path / "sweep.json").write_text("{}")
    assert cli.main(["run", "s.yaml", "--set", "seeds=[0]"]) == 0
    assert cli.main(["sweep", "w.yaml", "--dry-run"]) == 0
    assert cli.main(["report", "runs/a", "runs/b"]) == 0
    assert cli.main(["report", str(tmp_path)]) == 0
    assert cli.main(["judge-server", "--judge", "rubric"]) == 0
    assert cli.main(["export", "out"]) == 3  # the module's exit code
    assert calls == [
        ("run", ["s.yaml", "--set", "seeds=[0]"], True),  # as python -m testbed.run: may restart for numerics
        ("sweep", ["w.yaml", "--dry-run"]),
        ("report", ["runs/a", "runs/b"]),
        ("sweep_report", [str(tmp_path)]),
        ("judge-server", ["--judge", "rubric"]),
        ("export", ["out"]),
    ]


def test_report_of_a_missing_directory_is_exit_2(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "testbed", "report", str(tmp_path / "nope")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 2 and "not a run directory" in out.stderr, out.stdout + out.stderr
    assert not (tmp_path / "nope").exists()  # no empty report written where the run was meant to be


def test_the_makefile_installs_with_the_constraints():
    makefile = (ROOT / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if "pip install" in line and "-e '.[" in line]
    assert installs and all("-c constraints.txt" in line for line in installs), installs
    assert "notebooks:" in makefile and "jupyter lab --notebook-dir=analysis" in makefile
