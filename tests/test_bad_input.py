"""Every row of docs/errors.md's bad-input table, run through the real CLI entry point: exit code 2,
the documented error text, and no training started."""

import os
import re
import shlex
from pathlib import Path

import pytest

import testbed.cli.run_command as cli
from testbed.models import sft

ROOT = Path(__file__).resolve().parent.parent
TABLE = re.search(
    r"<!-- bad-input-table -->(.*?)<!-- /bad-input-table -->", (ROOT / "docs" / "errors.md").read_text(), re.S
)
ROWS = [
    [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
    for line in TABLE.group(1).strip().splitlines()[2:]
]


def command_line(command: str, tmp: Path) -> list[str]:
    """The table's notation: `\\xNN` is that control character (a table cannot hold one) and
    `{tmp}` the test's scratch directory, holding a too-large scenario and a named pipe."""
    if "{tmp}" in command:
        (tmp / "huge.yaml").write_text("# padding\n" * 110_000)  # 1,100,000 bytes
        os.mkfifo(tmp / "pipe.yaml")  # reading it would wait forever
        command = command.replace("{tmp}", str(tmp))
    return [re.sub(r"\\x([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), arg) for arg in shlex.split(command)]


def test_the_table_is_there():
    assert len(ROWS) >= 37 and all(len(row) == 3 for row in ROWS)


@pytest.mark.parametrize("what,command,message", ROWS, ids=[row[0] for row in ROWS])
def test_bad_input_gives_the_documented_error(what, command, message, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("TESTBED_CACHE", str(tmp_path / "cache"))

    def no_training(*args, **kwargs):
        raise AssertionError(f"{what}: training started instead of a bad-input error")

    monkeypatch.setattr(sft, "load_or_train_policy", no_training)
    before = set((ROOT / "tests" / "data").rglob("*"))
    assert cli.main(command_line(command, tmp_path)) == 2
    said = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert message in said, said
    assert set((ROOT / "tests" / "data").rglob("*")) == before  # nothing written beside the inputs
