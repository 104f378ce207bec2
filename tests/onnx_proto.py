"""Writes the few ONNX protobuf messages the test models need, without the `onnx` package.

The device test set (`pytest -m "not host"`) runs where only the runtime extras are installed,
as on a Jetson image: ONNX Runtime, no `onnx`. Its tiny models are built here, field by field,
following onnx.proto3 (ModelProto, GraphProto, NodeProto, AttributeProto, TensorProto,
ValueInfoProto). tests/test_onnx_proto.py checks on the host that `onnx` reads these bytes back
as the same model `onnx.helper` makes, and that its checker accepts them.
"""
from __future__ import annotations

import struct
from typing import Any, List, Optional, Sequence, Union

import numpy as np

FLOAT, INT64 = 1, 7  # TensorProto.DataType
_ELEM = {np.dtype(np.float32): FLOAT, np.dtype(np.int64): INT64}
# AttributeProto.AttributeType and the field each type's value goes in
_ATTR_FLOAT, _ATTR_INT, _ATTR_TENSOR, _ATTR_INTS = 1, 2, 4, 7


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 values take ten bytes, two's complement
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _int(field: int, value: int) -> bytes:
    return _key(field, 0) + _varint(int(value))


def _bytes(field: int, value: Union[bytes, str]) -> bytes:
    data = value.encode() if isinstance(value, str) else bytes(value)
    return _key(field, 2) + _varint(len(data)) + data


def _float(field: int, value: float) -> bytes:
    return _key(field, 5) + struct.pack("<f", value)


def make_tensor(name: str, array: Any) -> bytes:
    """TensorProto: dims (1), data_type (2), name (8), raw_data (9, little-endian)."""
    arr = np.asarray(array)
    if arr.dtype not in _ELEM:
        raise TypeError(f"unsupported tensor dtype {arr.dtype}")
    dims = b"".join(_int(1, d) for d in arr.shape)
    return dims + _int(2, _ELEM[arr.dtype]) + _bytes(8, name) + _bytes(9, arr.astype(arr.dtype.newbyteorder("<")).tobytes())


def _attribute(name: str, value: Any) -> bytes:
    """AttributeProto: name (1), f (2), i (3), t (5), ints (8), type (20)."""
    if isinstance(value, bool) or isinstance(value, (int, np.integer)):
        body, kind = _int(3, value), _ATTR_INT
    elif isinstance(value, float):
        body, kind = _float(2, value), _ATTR_FLOAT
    elif isinstance(value, np.ndarray):
        body, kind = _bytes(5, make_tensor(name, value)), _ATTR_TENSOR
    elif isinstance(value, (list, tuple)) and all(isinstance(v, (int, np.integer)) for v in value):
        body, kind = b"".join(_int(8, v) for v in value), _ATTR_INTS
    else:
        raise TypeError(f"unsupported attribute {name}={value!r}")
    return _bytes(1, name) + body + _int(20, kind)


def make_node(op_type: str, inputs: Sequence[str], outputs: Sequence[str], name: Optional[str] = None, **attrs: Any) -> bytes:
    """NodeProto: input (1), output (2), name (3), op_type (4), attribute (5, sorted by name as onnx.helper does)."""
    out = b"".join(_bytes(1, i) for i in inputs) + b"".join(_bytes(2, o) for o in outputs)
    if name is not None:
        out += _bytes(3, name)
    out += _bytes(4, op_type)
    return out + b"".join(_bytes(5, _attribute(k, attrs[k])) for k in sorted(attrs))


def value_info(name: str, shape: Sequence[Union[int, str]], elem_type: int = FLOAT) -> bytes:
    """ValueInfoProto name (1), type (2) -> TypeProto.tensor_type (1) -> elem_type (1), shape (2) -> dim (1) ->
    dim_value (1), or dim_param (2) for a str: a symbolic dimension."""
    shape_proto = b"".join(_bytes(1, _bytes(2, d) if isinstance(d, str) else _int(1, d)) for d in shape)
    tensor_type = _int(1, elem_type) + _bytes(2, shape_proto)
    return _bytes(1, name) + _bytes(2, _bytes(1, tensor_type))


def make_graph(nodes: List[bytes], name: str, inputs: List[bytes], outputs: List[bytes], initializers: List[bytes] = ()) -> bytes:
    """GraphProto: node (1), name (2), initializer (5), input (11), output (12)."""
    return (
        b"".join(_bytes(1, n) for n in nodes)
        + _bytes(2, name)
        + b"".join(_bytes(5, t) for t in initializers)
        + b"".join(_bytes(11, i) for i in inputs)
        + b"".join(_bytes(12, o) for o in outputs)
    )


def make_model(graph: bytes, opset: int, ir_version: int = 7, producer_name: str = "") -> bytes:
    """ModelProto: ir_version (1), producer_name (2), graph (7), opset_import (8) -> domain "" (1), version (2)."""
    out = _int(1, ir_version)
    if producer_name:
        out += _bytes(2, producer_name)
    return out + _bytes(7, graph) + _bytes(8, _bytes(1, "") + _int(2, opset))

