"""The values a SciCode step's calls returned cross from the model's process to the judge as data:
types kept, nothing unpickled, anything malformed refused."""

from __future__ import annotations

import io
import json
import struct

import numpy as np
import pytest
from scipy import sparse

from runs.engine import scicode_values as sv


def round_trip(value):
    return sv.load(sv.dump([(0, 0, [value])]))[(0, 0)][0]


@pytest.mark.parametrize(
    "value",
    [
        (1.0, 2.0),
        [1.0, 2.0],
        np.float64(0.5),
        np.bool_(True),
        True,
        7,
        10**30,
        1 + 2j,
        "up",
        {"H": np.eye(2), 3: (1, [2])},
        np.arange(12, dtype=np.complex128).reshape(3, 4),
        np.array([1, "a", None], dtype=object),
        {1, 2},
    ],
    ids=repr,
)
def test_a_value_comes_back_of_the_same_type_and_equal(value):
    back = round_trip(value)
    assert type(back) is type(value)
    if isinstance(value, np.ndarray):
        assert back.dtype == value.dtype and back.shape == value.shape
        assert all(a == b for a, b in zip(back.reshape(-1), value.reshape(-1), strict=True))
    elif isinstance(value, dict):
        assert set(back) == set(value) and np.array_equal(back["H"], value["H"])
    else:
        assert back == value


def test_a_sparse_matrix_keeps_its_format_and_entries():
    value = sparse.csr_matrix(np.array([[0.0, 1.5], [2.0, 0.0]]))
    back = round_trip(value)
    assert back.format == "csr" and np.array_equal(back.toarray(), value.toarray())


def test_an_object_of_the_models_own_class_is_carried_as_unserializable():
    class Sneaky:
        def __eq__(self, other):
            return True

    back = round_trip(Sneaky())
    assert isinstance(back, sv.Unserializable)


def _file(header: dict, blob: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return sv.MAGIC + struct.pack(">Q", len(raw)) + raw + blob


def test_a_pickled_array_in_the_file_is_refused_not_unpickled():
    out = io.BytesIO()
    np.save(out, np.array([print], dtype=object), allow_pickle=True)
    blob = out.getvalue()
    data = _file({"records": [[0, 0, [["array", 0]]]], "arrays": [[0, len(blob)]]}, blob)
    with pytest.raises(sv.BadValues):
        sv.load(data)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"SRBV1\n" + struct.pack(">Q", 10**9),
        _file({"records": [[0, 0, [["array", 3]]]], "arrays": []}),
        _file({"records": [[0, 0, [["array", 0]]]], "arrays": [[0, 10**6]]}, b"x"),
        _file({"records": [[0, 0, [["pickle", "gASV"]]]], "arrays": []}),
        _file({"records": [[0, 0, [["dict", [[["list", []], ["int", "1"]]]]]]], "arrays": []}),
        _file({"records": [[0, 0, []], [0, 0, []]], "arrays": []}),
        _file({"records": [[0, 0, [["float", "1" * 6000]]]], "arrays": []}),
    ],
    ids=[
        "empty",
        "header past the end",
        "array index",
        "span",
        "unknown tag",
        "unhashable key",
        "duplicate",
        "long number",
    ],
)
def test_a_malformed_values_file_is_refused(data: bytes):
    with pytest.raises(sv.BadValues):
        sv.load(data)


def test_values_past_the_limit_are_reported_too_large():
    recorder = sv.Recorder(limit=1000)
    recorder.add(0, 0, [np.zeros(1000)])
    assert recorder.dump() == sv.TOO_LARGE
