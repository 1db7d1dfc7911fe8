from __future__ import annotations

import pandas as pd
import pytest

from stereolens.errors import DataError
from stereolens.io import atomic_path, read_csv_checked, write_csv


def test_atomic_write_keeps_old_file_when_writer_fails(tmp_path):
    dest = tmp_path / "out.csv"
    dest.write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic_path(dest) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert dest.read_text() == "old\n"
    assert list(tmp_path.iterdir()) == [dest]


def test_text_in_any_script_round_trips(tmp_path):
    df = pd.DataFrame({"id": [1, 2, 3, 4], "text": ["ये लोग", "Люди", "这些人", "یہ لوگ"]})
    write_csv(tmp_path / "t.csv", df)
    back = read_csv_checked(tmp_path / "t.csv", ["id", "text"])
    assert back["text"].tolist() == df["text"].tolist()


def test_missing_columns_named(tmp_path):
    (tmp_path / "t.csv").write_text("id,sent_stereo\n1,a\n")
    with pytest.raises(DataError, match=r"missing column\(s\) sent_anti"):
        read_csv_checked(tmp_path / "t.csv", ["id", "sent_stereo", "sent_anti"], what="pairs")
