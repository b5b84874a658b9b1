"""Reading an ONNX model: bytes, a path or a ModelProto → a checked ModelProto with its
external data loaded, static input shapes and a known opset.

Every failure is a ModelError naming the file (or "<bytes>", "<ModelProto>") and what
is wrong, so the CLI can print it as one line.
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper

from ir.errors import ModelError

MIN_OPSET, MAX_OPSET = 7, 25
"""The default-domain opsets the importer knows (13–21 tested)."""


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _parse(source: object) -> tuple[onnx.ModelProto, str, Path | None]:
    """The model without its external data, a label for messages, and its path if any."""
    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)  # loading external data must not change the caller's proto
        return model, "<ModelProto>", None
    if isinstance(source, bytes | bytearray | memoryview):
        label, path, data = "<bytes>", None, bytes(source)
    elif isinstance(source, str | os.PathLike):
        path = Path(source)
        label = str(path)
        if not path.is_file():
            raise ModelError(f"{label}: no such file")
        data = path.read_bytes()
    else:
        raise ModelError(f"cannot read a model from a {type(source).__name__}")
    try:
        model = onnx.load_model_from_string(data)
    except DecodeError as e:
        raise ModelError(f"{label}: not an ONNX model ({_first_line(e)})") from None
    if not model.HasField("graph") or model.ir_version == 0:
        raise ModelError(f"{label}: not an ONNX model (no graph or IR version)")
    return model, label, path


def _external_tensors(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    tensors = list(model.graph.initializer)
    tensors += [a.t for n in model.graph.node for a in n.attribute if a.HasField("t")]
    return [t for t in tensors if external_data_helper.uses_external_data(t)]


def _check_external_files(tensors: list[onnx.TensorProto], base: Path, label: str) -> None:
    for t in tensors:
        location = next((e.value for e in t.external_data if e.key == "location"), "")
        target = (base / location).resolve()
        if (
            not location
            or Path(location).is_absolute()
            or not target.is_relative_to(base.resolve())
        ):
            raise ModelError(
                f"{label}: tensor {t.name!r} has external data at {location!r}, "
                f"which is not a file name inside {base}"
            )
        if not target.is_file():
            raise ModelError(
                f"{label}: external data file {location!r} (tensor {t.name!r}) is missing in {base}"
            )


def _check_opset(model: onnx.ModelProto, label: str) -> int:
    versions = {o.domain: o.version for o in model.opset_import}
    opset = versions.get("", versions.get("ai.onnx"))
    if opset is None:
        raise ModelError(f"{label}: the model imports no default-domain (ai.onnx) opset")
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ModelError(
            f"{label}: opset {opset} is not supported (loomtune reads opsets "
            f"{MIN_OPSET}..{MAX_OPSET}; convert with onnx.version_converter)"
        )
    return opset


def _check_static_inputs(model: onnx.ModelProto, label: str) -> None:
    initializers = {t.name for t in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        if not tensor.HasField("shape"):
            raise ModelError(
                f"{label}: input {value.name!r} has no shape; loomtune needs fixed input shapes "
                "(re-export with static shapes)"
            )
        for axis, dim in enumerate(tensor.shape.dim):
            if not dim.HasField("dim_value"):
                name = dim.dim_param or "?"
                raise ModelError(
                    f"{label}: input {value.name!r} has a symbolic dim {name!r} (axis {axis}); "
                    "loomtune needs fixed shapes: re-export with static shapes or fix it, e.g. "
                    f"python -m onnxruntime.tools.make_dynamic_shape_fixed --dim_param {name} "
                    "--dim_value 1 in.onnx out.onnx"
                )


LARGE_TENSOR_BYTES = 1 << 16
"""Weights above this size are checked by their type alone (see `_skeleton`)."""


def _skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its large weights turned into typed graph inputs.

    The checker and shape inference serialise the model they are given; on the weights of
    BERT-base that is several copies of 400 MB at once. They need the weights' types, not
    their data (small constants, the ones shape computations read, stay), and the
    skeleton also stays far below protobuf's 2 GB limit.
    """
    graph = model.graph
    large = [t for t in graph.initializer if t.ByteSize() > LARGE_TENSOR_BYTES]
    if not large:
        return model
    large_names = {t.name for t in large}
    listed = {v.name for v in graph.input}
    skeleton = onnx.ModelProto(
        ir_version=model.ir_version,
        opset_import=model.opset_import,
        functions=model.functions,
        producer_name=model.producer_name,
    )
    sk = skeleton.graph
    sk.name = graph.name
    sk.node.extend(graph.node)
    sk.input.extend(graph.input)
    sk.input.extend(
        onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        for t in large
        if t.name not in listed
    )
    sk.output.extend(graph.output)
    sk.value_info.extend(graph.value_info)
    sk.initializer.extend(t for t in graph.initializer if t.name not in large_names)
    sk.sparse_initializer.extend(graph.sparse_initializer)
    return skeleton


def read_model(
    source: object, base_dir: str | os.PathLike | None = None
) -> tuple[onnx.ModelProto, str, int]:
    """Parse, check and complete a model; returns it, its label and its opset."""
    model, label, path = _parse(source)
    opset = _check_opset(model, label)
    external = _external_tensors(model)
    if external:
        base = Path(base_dir) if base_dir is not None else (path.parent if path else None)
        if base is None:
            raise ModelError(
                f"{label}: tensor {external[0].name!r} keeps its data in an external file; "
                "pass base_dir (the folder holding it) or load the model from its path"
            )
        _check_external_files(external, base, label)
        try:
            external_data_helper.load_external_data_for_model(model, str(base))
        except (OSError, ValueError, onnx.checker.ValidationError) as e:
            raise ModelError(f"{label}: cannot read external data ({_first_line(e)})") from None
    try:
        skeleton = _skeleton(model)
        onnx.checker.check_model(skeleton)
        # strict inference validates types and shapes; its result (a copy) is not kept
        onnx.shape_inference.infer_shapes(
            skeleton, check_type=True, strict_mode=True, data_prop=True
        )
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise ModelError(f"{label}: invalid ONNX model ({_first_line(e)})") from None
    _check_static_inputs(model, label)
    return model, label, opset
