"""The world's modules import one another in one direction only (no cycle, not even through an
import hidden inside a function)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

WORLD = Path(__file__).resolve().parents[1] / "testbed" / "world"


def world_imports() -> nx.DiGraph:
    """module -> the testbed.world modules it imports, at any depth of the file."""
    graph = nx.DiGraph()
    for path in WORLD.glob("*.py"):
        name = f"testbed.world.{path.stem}" if path.stem != "__init__" else "testbed.world"
        graph.add_node(name)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("testbed.world."):
                graph.add_edge(name, node.module)
            elif isinstance(node, ast.Import):
                graph.add_edges_from((name, a.name) for a in node.names if a.name.startswith("testbed.world."))
    return graph


def test_world_modules_have_no_import_cycle():
    graph = world_imports()
    assert graph.has_edge("testbed.world.prompts", "testbed.world.language")  # the graph is read
    assert list(nx.simple_cycles(graph)) == []

