"""A one-node ONNX model (y = Relu(x), x a float tensor of shape [4]) written as protobuf bytes by
hand, for tests that make an ONNX Runtime session without the onnx package."""
from __future__ import annotations


def _varint(x: int) -> bytes:
    out = bytearray()
    while True:
        low, x = x & 0x7F, x >> 7
        out.append(low | (0x80 if x else 0))
        if not x:
            return bytes(out)


def _field(number: int, value: int | bytes | str) -> bytes:
    """One protobuf field: an int as a varint, bytes or text length-delimited."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def relu_model() -> bytes:
    """ModelProto: IR version 8, opset 13, a graph of one Relu node from input x to output y."""
    shape = _field(1, _field(1, 4))  # TensorShapeProto > Dimension.dim_value
    float_tensor = _field(1, _field(1, 1) + _field(2, shape))  # TypeProto.tensor_type: FLOAT, shape

    def value_info(name: str) -> bytes:
        return _field(1, name) + _field(2, float_tensor)

    node = _field(1, "x") + _field(2, "y") + _field(3, "relu") + _field(4, "Relu")
    graph = _field(1, node) + _field(2, "g") + _field(11, value_info("x")) + _field(12, value_info("y"))
    return _field(1, 8) + _field(8, _field(1, "") + _field(2, 13)) + _field(7, graph)
