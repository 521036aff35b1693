"""companion_lib.common.validation: the checks the chapter modules share, and their messages."""

import doctest

import numpy as np
import pytest

from companion_lib.common import validation
from companion_lib.common.validation import (check_finite_vector, check_int, check_positive, check_positive_int,
                                             check_probability)


def test_doctests():
    assert doctest.testmod(validation).failed == 0


def test_check_int():
    assert check_int(np.int64(4), "n") == 4 and isinstance(check_int(np.int64(4), "n"), int)
    assert check_int(-3, "shift") == -3
    with pytest.raises(TypeError, match="n must be an int, got bool"):
        check_int(True, "n")
    with pytest.raises(TypeError, match="n must be an int, got float"):
        check_int(2.0, "n")
    with pytest.raises(ValueError, match="n must be >= 0, got -1"):
        check_int(-1, "n", low=0)


def test_check_positive_int():
    assert check_positive_int(1, "steps") == 1
    with pytest.raises(ValueError, match="steps must be >= 1, got 0"):
        check_positive_int(0, "steps")
    with pytest.raises(TypeError, match="steps must be an int, got str"):
        check_positive_int("3", "steps")


def test_check_positive():
    assert check_positive(2, "lam") == 2.0 and check_positive(np.float32(0.5), "lam") == 0.5
    for bad in (0, -1.0, np.inf, np.nan):
        with pytest.raises(ValueError, match="lam must be a positive finite number"):
            check_positive(bad, "lam")
    with pytest.raises(TypeError, match="lam must be a number, got bool"):
        check_positive(True, "lam")


def test_check_probability():
    assert check_probability(0, "p") == 0.0 and check_probability(1, "p") == 1.0
    with pytest.raises(ValueError, match=r"eta must be in \[0, 1\), got 1"):
        check_probability(1, "eta", include_one=False)
    with pytest.raises(ValueError, match=r"p must be in \(0, 1\]"):
        check_probability(0.0, "p", include_zero=False)
    with pytest.raises(ValueError):
        check_probability(np.nan, "p")
    with pytest.raises(TypeError):
        check_probability("0.5", "p")


def test_check_finite_vector():
    assert check_finite_vector([1, 2], "x", n=2).dtype == float
    with pytest.raises(ValueError, match="x must be a 1-D array, got shape"):
        check_finite_vector([[1.0]], "x")
    with pytest.raises(ValueError, match="x must have length 3, got 2"):
        check_finite_vector([1.0, 2.0], "x", n=3)
    with pytest.raises(ValueError, match=r"x must be finite \(no NaN or inf\)"):
        check_finite_vector([1.0, np.nan], "x")


def test_json_lines_reads_objects_lazily_and_names_the_bad_line(tmp_path):
    import gzip

    from companion_lib.common.validation import json_lines

    plain = tmp_path / "a.jsonl"
    plain.write_text('{"x": 1}\n\n{"x": 2}\nnot json\n', encoding="utf-8")
    rows = json_lines(plain, "objects with x")
    assert next(rows) == (f"line 1 of {str(plain)!r}", {"x": 1})
    assert next(rows) == (f"line 3 of {str(plain)!r}", {"x": 2})          # blank lines skipped, numbers kept
    with pytest.raises(ValueError, match=r"line 4 of .* is not JSON .*; expected objects with x"):
        next(rows)
    zipped = tmp_path / "b.jsonl.gz"
    with gzip.open(zipped, "wt", encoding="utf-8") as f:
        f.write('{"x": 3}\n[1, 2]\n')
    rows = json_lines(zipped, "objects with x")
    assert next(rows)[1] == {"x": 3}
    with pytest.raises(ValueError, match="line 2 of .* is a JSON list, not an object"):
        next(rows)
