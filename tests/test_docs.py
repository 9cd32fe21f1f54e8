"""The project's documentation stands on its own: every relative link in the README and docs/
points at a file of the project, and no tracked file names a path outside the project."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
OUTSIDE = re.compile(r"\.\./shared|/wor[k]/")  # written so that this file does not match itself


def test_relative_links_resolve():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert len(pages) >= 4  # README, architecture, algorithms, plugins
    links = [(page, target) for page in pages for target in LINK.findall(page.read_text()) if "://" not in target]
    assert links
    broken = [
        f"{page.relative_to(ROOT)} -> {target}"
        for page, target in links
        if not (page.parent / target).resolve().exists()
    ]
    assert not broken, broken


def test_no_tracked_file_names_a_path_outside_the_project():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    hits = []
    for name in files:
        path = ROOT / name
        if not path.is_file() or path.suffix in (".parquet", ".pt", ".png"):
            continue
        text = path.read_text(errors="ignore")
        hits += [f"{name}: {m.group(0)}" for m in OUTSIDE.finditer(text)]
    assert not hits, hits
