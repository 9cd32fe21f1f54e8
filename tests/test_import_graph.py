"""The project's modules import one another in one direction only: no cycle, not even through an
import hidden inside a function or under TYPE_CHECKING, and each layer of testbed/ imports only the
layers below it (README.md, "Layout")."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("testbed", "trainers", "judges", "analysis")

# testbed/'s layers, top first: a module may import its own layer and those below it. Every
# module of testbed/ is named here (a new package or root module must be placed before it lands).
LAYERS = [
    {"testbed.cli", "testbed.run", "testbed.sweep", "testbed.study", "testbed.__main__"},
    {"testbed.integrations"},  # the world, judge and schedule inside other trainers' loops
    {"testbed.runtimes"},
    {"testbed.engines"},
    {"testbed.models", "testbed.judging"},
    {"testbed.scenario"},
    {"testbed.envs"},
    {"testbed.world", "testbed.tracking", "testbed.protocols"},
    # the ground floor: the root's modules that everything may use and that import none of the above
    {
        "testbed",
        "testbed.types",
        "testbed.registry",
        "testbed.store",
        "testbed.paths",
        "testbed.extras",
        "testbed.cpu_numerics",
        "testbed.device",
        "testbed.shard",
    },
]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(package_roots: tuple[str, ...] = PACKAGES) -> nx.DiGraph:
    """module -> the project's modules it imports, at any depth of the file. `from pkg import mod`
    is an edge to the module when `mod` is one; package faces (__init__) with only a docstring are
    not edges of their sub-modules."""
    files = [p for root in package_roots for p in (ROOT / root).rglob("*.py")]
    names = {module_name(p) for p in files}
    graph = nx.DiGraph()
    for path in files:
        name = module_name(path)
        graph.add_node(name)
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    targets.append(full if full in names else node.module)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph.add_edges_from((name, t) for t in targets if t in names and t != name)
    return graph


def layer_of(module: str) -> int:
    for i, layer in enumerate(LAYERS):
        if any(module == p or (p != "testbed" and module.startswith(p + ".")) for p in layer):
            return i
    raise KeyError(f"{module} is in no layer of LAYERS (tests/test_import_graph.py): place it")


def test_every_module_of_testbed_has_a_layer():
    unplaced = []
    for module in imports(("testbed",)).nodes:
        try:
            layer_of(module)
        except KeyError:
            unplaced.append(module)
    assert unplaced == []
    assert layer_of("testbed.tracking.writer") < layer_of("testbed.store")  # tracking is covered by name


def test_the_graph_is_read():
    graph = imports()
    assert graph.has_edge("testbed.world.prompts", "testbed.world.language")
    assert graph.has_edge("testbed.runtimes.loop", "testbed.store")
    assert graph.has_edge("testbed.cli.run_command", "testbed.runtimes.dispatch")


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(package):
    graph = imports().subgraph(n for n in imports().nodes if n.split(".")[0] == package)
    assert list(nx.simple_cycles(graph)) == []


def test_the_whole_project_has_no_import_cycle():
    assert list(nx.simple_cycles(imports())) == []


def test_testbed_layers_import_only_downwards():
    graph = imports(("testbed",))
    upward = [(a, b) for a, b in graph.edges if layer_of(b) < layer_of(a)]
    assert upward == []


def test_nothing_imports_the_cli():
    graph = imports()
    cli = {m for m in graph.nodes if m.startswith("testbed.") and layer_of(m) == 0}
    into_cli = [(a, b) for a, b in graph.edges if b in cli and a not in cli]
    assert into_cli == []
    assert not any(b in ("testbed.run", "testbed.sweep") for _, b in graph.edges)  # the `python -m` launchers


def test_analysis_reads_run_directories_only():
    """analysis/ imports the store (to read a run directory's tables) and the numerics' names (to
    compare runs'), never the judges, the trainers or the training code: re-judging stored
    responses (`python -m analysis.rescore`) runs testbed/cli/rescore.py in its own process."""
    graph = imports()
    outside = {b for a, b in graph.edges if a.startswith("analysis") and not b.startswith("analysis")}
    assert outside <= {"testbed.store", "testbed.cpu_numerics"}, outside
