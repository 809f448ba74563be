"""The values a SciCode step's test calls returned, carried out of the model's process as data.

This file runs in both of a step's sandboxes (`runs.engine.code_grading.grade_scicode`): the
model's process encodes what its functions returned (`dump`), the judge's process decodes it
(`load`) and compares it with the hidden targets. It needs only the standard library and numpy
(scipy for sparse matrices), and never pickle: arrays travel as `.npy` (read back with
`allow_pickle=False`), everything else as tagged JSON. The encoder runs beside hostile code and
proves nothing; the decoder trusts nothing it reads: a malformed file raises `BadValues`.

A value of a type outside the format (a model's own class, a generator, a sympy expression) is
carried as `Unserializable(type name)`: the judge fails the test that uses it.
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import numpy as np

MAGIC = b"SRBV1\n"
TOO_LARGE = b"SRBV1 too large\n"
MAX_DEPTH = 32
MAX_HEADER_BYTES = 16 * 1024 * 1024
SPARSE_FORMATS = ("bsr", "coo", "csc", "csr", "dia", "dok", "lil")
_SEQUENCES = {"tuple": tuple, "list": list, "set": set, "frozenset": frozenset}


class BadValues(ValueError):
    """The values file is not one this format writes (truncated, forged, out of bounds)."""


class Unserializable:
    """Stands for a returned value of a type the format does not carry."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"Unserializable({self.type_name!r})"


class _Encoder:
    def __init__(self) -> None:
        self.blobs: list[bytes] = []

    def array(self, value: np.ndarray) -> int:
        out = io.BytesIO()
        np.save(out, value, allow_pickle=False)
        self.blobs.append(out.getvalue())
        return len(self.blobs) - 1

    def node(self, value: Any, depth: int = 0) -> list[Any]:  # noqa: PLR0911 - one case a type
        if depth > MAX_DEPTH:
            return ["unserializable", "nested too deep"]
        if value is None:
            return ["none"]
        if isinstance(value, np.generic) and value.dtype != object:
            # Before the Python types: np.float64 is a float, np.str_ a str; keep the type.
            return ["scalar", self.array(np.asarray(value))]
        if isinstance(value, bool):
            return ["bool", bool(value)]
        if isinstance(value, int):
            return ["int", str(int(value))]
        if isinstance(value, float):
            return ["float", repr(float(value))]
        if isinstance(value, complex):
            return ["complex", repr(value.real), repr(value.imag)]
        if isinstance(value, str):
            return ["str", str(value)]
        if isinstance(value, np.ndarray):
            return self._ndarray(value, depth)
        if isinstance(value, dict):
            items = [[self.node(k, depth + 1), self.node(v, depth + 1)] for k, v in value.items()]
            return ["dict", items]
        for tag, kind in _SEQUENCES.items():
            if isinstance(value, kind):
                return [tag, [self.node(v, depth + 1) for v in value]]
        if type(value).__module__.startswith("scipy.sparse") and hasattr(value, "tocoo"):
            return self._sparse(value)
        return ["unserializable", f"{type(value).__module__}.{type(value).__qualname__}"]

    def _ndarray(self, value: np.ndarray, depth: int) -> list[Any]:
        plain = np.asarray(value)
        if plain.dtype.hasobject:
            items = [self.node(v, depth + 1) for v in plain.reshape(-1)]
            return ["objarray", list(plain.shape), items]
        return ["array", self.array(plain)]

    def _sparse(self, value: Any) -> list[Any]:
        if value.format not in SPARSE_FORMATS:
            return ["unserializable", f"scipy.sparse {value.format}"]
        coo = value.tocoo()
        parts = [self.array(np.asarray(a)) for a in (coo.data, coo.row, coo.col)]
        return ["sparse", value.format, *parts, [int(n) for n in value.shape]]


class Recorder:
    """The model's process side: each statement's values are encoded when its calls return
    (an array the model's code changes later is carried as it was then), at most `limit`
    bytes in all (past it, `dump` gives `TOO_LARGE`)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.encoder = _Encoder()
        self.records: list[list[Any]] = []
        self.size = 0

    def add(self, test: int, statement: int, values: list[Any]) -> None:
        if self.size > self.limit:
            return
        before = len(self.encoder.blobs)
        nodes = [self.encoder.node(v) for v in values]
        self.records.append([test, statement, nodes])
        self.size += sum(len(b) for b in self.encoder.blobs[before:])
        self.size += len(json.dumps(nodes))

    def dump(self) -> bytes:
        if self.size > self.limit:
            return TOO_LARGE
        spans, offset = [], 0
        for blob in self.encoder.blobs:
            spans.append([offset, len(blob)])
            offset += len(blob)
        header = json.dumps({"records": self.records, "arrays": spans}).encode("utf-8")
        return MAGIC + struct.pack(">Q", len(header)) + header + b"".join(self.encoder.blobs)


def dump(records: list[tuple[int, int, list[Any]]], limit: int = 1 << 62) -> bytes:
    """The file for `records`: (test index, statement index, the values of its calls)."""
    recorder = Recorder(limit)
    for test, statement, values in records:
        recorder.add(test, statement, values)
    return recorder.dump()


class _Decoder:
    def __init__(self, arrays: list[Any], blob: bytes) -> None:
        self.arrays = arrays
        self.blob = blob

    def array(self, index: Any) -> np.ndarray:
        if type(index) is not int or not 0 <= index < len(self.arrays):
            raise BadValues("array index out of range")
        span = self.arrays[index]
        if not (isinstance(span, list) and len(span) == 2 and all(type(n) is int for n in span)):
            raise BadValues("bad array span")
        start, length = span
        if start < 0 or length < 0 or start + length > len(self.blob):
            raise BadValues("array span outside the file")
        try:
            value = np.load(io.BytesIO(self.blob[start : start + length]), allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise BadValues(f"bad array: {exc}") from exc
        if not isinstance(value, np.ndarray) or value.dtype.hasobject:
            raise BadValues("not a plain array")
        return value

    def node(self, node: Any, depth: int = 0) -> Any:  # noqa: PLR0911, PLR0912 - one case a tag
        if depth > MAX_DEPTH + 1 or not isinstance(node, list) or not node:
            raise BadValues("bad node")
        tag, args = node[0], node[1:]
        if tag == "none" and not args:
            return None
        if tag == "bool" and len(args) == 1 and type(args[0]) is bool:
            return args[0]
        if tag == "int" and len(args) == 1 and isinstance(args[0], str):
            return int(self._number(args[0], int))
        if tag == "float" and len(args) == 1 and isinstance(args[0], str):
            return float(self._number(args[0], float))
        if tag == "complex" and len(args) == 2 and all(isinstance(a, str) for a in args):
            return complex(self._number(args[0], float), self._number(args[1], float))
        if tag == "str" and len(args) == 1 and isinstance(args[0], str):
            return args[0]
        if tag == "scalar" and len(args) == 1:
            value = self.array(args[0])
            if value.ndim != 0:
                raise BadValues("scalar with a shape")
            return value[()]
        if tag == "array" and len(args) == 1:
            return self.array(args[0])
        if tag in _SEQUENCES and len(args) == 1 and isinstance(args[0], list):
            items = [self.node(v, depth + 1) for v in args[0]]
            return self._hashable(lambda: _SEQUENCES[tag](items))
        if tag == "dict" and len(args) == 1 and isinstance(args[0], list):
            pairs = args[0]
            if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
                raise BadValues("bad dict item")
            items = [(self.node(k, depth + 1), self.node(v, depth + 1)) for k, v in pairs]
            return self._hashable(lambda: dict(items))
        if tag == "objarray" and len(args) == 2:
            return self._objarray(args[0], args[1], depth)
        if tag == "sparse" and len(args) == 5:
            return self._sparse(*args)
        if tag == "unserializable" and len(args) == 1 and isinstance(args[0], str):
            return Unserializable(args[0][:200])
        raise BadValues(f"unknown node {str(tag)[:40]!r}")

    @staticmethod
    def _number(text: str, kind: type) -> Any:
        if len(text) > 5000:
            raise BadValues("number too long")
        try:
            return kind(text)
        except ValueError as exc:
            raise BadValues("bad number") from exc

    @staticmethod
    def _hashable(build: Any) -> Any:
        try:
            return build()
        except TypeError as exc:  # an unhashable key or set member
            raise BadValues("unhashable key") from exc

    def _objarray(self, shape: Any, items: Any, depth: int) -> np.ndarray:
        if not (isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)):
            raise BadValues("bad shape")
        if not isinstance(items, list) or len(items) != int(np.prod(shape, dtype=np.int64)):
            raise BadValues("object array of the wrong size")
        out = np.empty(len(items), dtype=object)
        for i, item in enumerate(items):
            out[i] = self.node(item, depth + 1)
        return out.reshape(shape)

    def _sparse(self, fmt: Any, data: Any, row: Any, col: Any, shape: Any) -> Any:
        from scipy import sparse  # type: ignore[import-untyped]

        if fmt not in SPARSE_FORMATS:
            raise BadValues("unknown sparse format")
        if not (isinstance(shape, list) and len(shape) == 2):
            raise BadValues("bad sparse shape")
        if not all(type(n) is int and n >= 0 for n in shape):
            raise BadValues("bad sparse shape")
        try:
            coo = sparse.coo_matrix(
                (self.array(data), (self.array(row), self.array(col))), shape=tuple(shape)
            )
            return coo.asformat(fmt)
        except (ValueError, TypeError, IndexError) as exc:
            raise BadValues("bad sparse matrix") from exc


def load(data: bytes) -> dict[tuple[int, int], list[Any]]:
    """The records of a values file, by (test index, statement index). Raises BadValues."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 8:
        raise BadValues("not a values file")
    (size,) = struct.unpack(">Q", data[len(MAGIC) : len(MAGIC) + 8])
    start = len(MAGIC) + 8
    if size > MAX_HEADER_BYTES or start + size > len(data):
        raise BadValues("bad header size")
    try:
        header = json.loads(data[start : start + size].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadValues("bad header") from exc
    if not isinstance(header, dict) or not isinstance(header.get("records"), list):
        raise BadValues("bad header")
    arrays = header.get("arrays")
    if not isinstance(arrays, list):
        raise BadValues("bad header")
    decoder = _Decoder(arrays, data[start + size :])
    out: dict[tuple[int, int], list[Any]] = {}
    for record in header["records"]:
        if not (isinstance(record, list) and len(record) == 3 and isinstance(record[2], list)):
            raise BadValues("bad record")
        test, statement, values = record
        if type(test) is not int or type(statement) is not int or (test, statement) in out:
            raise BadValues("bad record key")
        out[(test, statement)] = [decoder.node(v) for v in values]
    return out
