"""The run-directory watcher the kill-and-resume tests poll with."""

import os

from tests.watching import newest_mtime


class Vanishing:
    """A path listed, then removed before its stat (as a pruned checkpoint is)."""

    def stat(self):
        raise FileNotFoundError("pruned")


def test_newest_mtime_skips_a_file_that_vanished_between_listing_and_stat(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    old.write_text("a"), new.write_text("b")
    os.utime(old, (100.0, 100.0)), os.utime(new, (200.0, 200.0))
    assert newest_mtime([old, Vanishing(), new]) == 200.0
    assert newest_mtime([Vanishing()]) == 0.0
    assert newest_mtime([]) == 0.0
