from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from stereolens.errors import DataError
from stereolens.io import SIGNIFICANT_DIGITS, atomic_path, fixed_precision, read_csv_checked, write_csv, write_json


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


# ---------------------------------------------------------------- fixed-precision numeric outputs
# Known answers: numpy's scientific formatter with six decimals is seven significant digits, computed
# independently of io.fixed_precision's own formatting.
def _seven_digits(x: float) -> float:
    return float(np.format_float_scientific(x, precision=6, unique=False))


@pytest.mark.parametrize("value", [-128.90964698791504, 1.7256316544122215e-46, 0.0356895118091021,
                                   238.06581612542413, -0.00019002543705044176, 0.9999995])
def test_fixed_precision_keeps_seven_significant_digits_not_decimals(value):
    assert fixed_precision(value) == _seven_digits(value)
    assert SIGNIFICANT_DIGITS == 7


def test_whole_numbers_and_non_finite_values_pass_unchanged():
    assert fixed_precision(1234567.0) == 1234567.0  # a count stored as a float stays exact
    assert math.isnan(fixed_precision(float("nan")))
    assert fixed_precision(float("-inf")) == float("-inf")


# values of the committed run and of a cold fresh-clone run on the same machine (docs/reliability.md):
# three statistics of the leakage choice fits (fit/en and fit/ru .../choice/fit.json), equal to seven
# significant digits but not to eight
COMMITTED = [337.475157710355, 0.03763976398095649, 238.06581612542413]
FRESH = [337.47515595583945, 0.03763976350776681, 238.06581165065302]


def _table(values):
    return pd.DataFrame({"what": ["llf_en", "variance_en", "llf_ru"], "p": values, "n": [3.0, 1.0, np.nan]})


def test_csv_values_differing_below_the_precision_give_identical_bytes(tmp_path):
    write_csv(tmp_path / "a.csv", _table(COMMITTED))
    write_csv(tmp_path / "b.csv", _table(FRESH))
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    assert (tmp_path / "a.csv").read_text() == "what,p,n\nllf_en,337.4752,3.0\nvariance_en,0.03763976,1.0\nllf_ru,238.0658,\n"


def test_csv_values_differing_above_the_precision_differ(tmp_path):
    write_csv(tmp_path / "a.csv", _table(COMMITTED))
    write_csv(tmp_path / "b.csv", _table([COMMITTED[0] * (1 + 1e-6), *COMMITTED[1:]]))
    assert (tmp_path / "a.csv").read_bytes() != (tmp_path / "b.csv").read_bytes()


def test_json_values_differing_below_the_precision_give_identical_bytes_and_above_do_not(tmp_path):
    def summary(values, p_value):
        return {"n": 1508, "scores": np.array(values), "p_value": np.float64(p_value), "missing": float("nan")}

    write_json(tmp_path / "a.json", summary(COMMITTED, 4.731474599179168e-09))
    write_json(tmp_path / "b.json", summary(FRESH, 4.731474599179168e-09 * (1 + 1e-9)))
    write_json(tmp_path / "c.json", summary(COMMITTED, 4.73148e-09))
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert (tmp_path / "a.json").read_bytes() != (tmp_path / "c.json").read_bytes()
    assert json.loads((tmp_path / "a.json").read_text()) == {
        "n": 1508, "scores": [337.4752, 0.03763976, 238.0658], "p_value": 4.731475e-09, "missing": None}
