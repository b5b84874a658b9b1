"""The importer's refusals: each a one-line ModelError (or UnsupportedOperatorError) naming
the file, node or input and what is wrong; and external-data models read from their path."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from frontend.onnx import SUPPORTED, ModelError, UnsupportedOperatorError, load_onnx
from ir.errors import LoomtuneError
from ir.graph import run_graph
from tests.models import conv_net, mlp


def _one_line(error: pytest.ExceptionInfo) -> str:
    text = str(error.value)
    assert "\n" not in text
    return text


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _f(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_unsupported_operator_names_type_node_and_supported_list() -> None:
    boxes, scores = _f("boxes", [1, 4, 4]), _f("scores", [1, 1, 4])
    nms = helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["sel"], name="nms_1")
    out = helper.make_tensor_value_info("sel", TensorProto.INT64, [None, 3])
    with pytest.raises(UnsupportedOperatorError) as e:
        load_onnx(_model([nms], [boxes, scores], [out]))
    text = _one_line(e)
    assert text.startswith(
        "unsupported ONNX operator NonMaxSuppression (node 'nms_1'); supported: "
    )
    assert text.endswith(", ".join(sorted(SUPPORTED)))
    assert "Conv" in SUPPORTED and "LayerNormalization" in SUPPORTED
    assert isinstance(e.value, LoomtuneError)


def test_operator_of_another_domain_is_unsupported() -> None:
    node = helper.make_node("FusedMatMul", ["x", "x"], ["y"], domain="com.microsoft")
    model = _model([node], [_f("x", [2, 2])], [_f("y", [2, 2])])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(
        UnsupportedOperatorError, match=r"com\.microsoft\.FusedMatMul \(node 'FusedMatMul_0'\)"
    ):
        load_onnx(model)


def test_truncated_file_is_a_model_error_naming_it(tmp_path) -> None:
    path = tmp_path / "cut.onnx"
    path.write_bytes(mlp().SerializeToString()[:-100])
    with pytest.raises(ModelError) as e:
        load_onnx(path)
    assert _one_line(e).startswith(f"{path}: ")


def test_not_an_onnx_file_and_a_missing_file(tmp_path) -> None:
    text = tmp_path / "notes.onnx"
    text.write_text("this is not a model\n")
    with pytest.raises(ModelError, match=r"notes\.onnx: not an ONNX model"):
        load_onnx(text)
    with pytest.raises(ModelError, match=r"nowhere\.onnx: no such file"):
        load_onnx(tmp_path / "nowhere.onnx")
    with pytest.raises(ModelError, match="<bytes>: not an ONNX model"):
        load_onnx(b"\x00\x01garbage")


def _save_external(tmp_path) -> tuple[onnx.ModelProto, object]:
    model = conv_net()  # save_model rewrites it to refer to the external file
    path = tmp_path / "net.onnx"
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="w.bin",
        size_threshold=0,
    )
    return model, path


def test_external_data_model_loads_from_its_path(tmp_path) -> None:
    _, path = _save_external(tmp_path)
    assert (tmp_path / "w.bin").stat().st_size > 1000 and path.stat().st_size < 10_000
    from_path, in_memory = load_onnx(path), load_onnx(conv_net())
    assert from_path.key == in_memory.key
    assert from_path.weights_digest == in_memory.weights_digest
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.testing.assert_array_equal(run_graph(from_path, [x])[0], run_graph(in_memory, [x])[0])
    from_bytes = load_onnx(path.read_bytes(), base_dir=tmp_path)
    assert from_bytes.weights_digest == in_memory.weights_digest


def test_missing_external_data_names_the_file(tmp_path) -> None:
    _, path = _save_external(tmp_path)
    (tmp_path / "w.bin").unlink()
    with pytest.raises(ModelError) as e:
        load_onnx(path)
    assert "external data file 'w.bin'" in _one_line(e) and "missing" in str(e.value)
    with pytest.raises(ModelError, match="pass base_dir"):
        load_onnx(path.read_bytes())


def test_symbolic_input_dim_is_a_one_line_error() -> None:
    relu = helper.make_node("Relu", ["ids"], ["y"])
    model = _model([relu], [_f("ids", ["batch", 16])], [_f("y", ["batch", 16])])
    with pytest.raises(ModelError) as e:
        load_onnx(model)
    text = _one_line(e)
    assert "input 'ids' has a symbolic dim 'batch' (axis 0)" in text and "fixed shapes" in text


def test_a_reshape_target_computed_from_inputs_is_refused() -> None:
    nodes = [
        helper.make_node("Cast", ["s"], ["si"], to=TensorProto.INT64),
        helper.make_node("Reshape", ["x", "si"], ["y"], name="rs"),
    ]
    model = _model(nodes, [_f("x", [2, 3]), _f("s", [2])], [_f("y", [3, 2])])
    with pytest.raises(
        ModelError, match=r"node 'rs' \(Reshape\): Reshape's shape must be computable at import"
    ):
        load_onnx(model)


def test_an_equal_on_graph_inputs_is_refused() -> None:
    node = helper.make_node("Equal", ["x", "x"], ["y"], name="eq")
    out = helper.make_tensor_value_info("y", TensorProto.BOOL, [2])
    with pytest.raises(
        ModelError, match=r"node 'eq' \(Equal\): Equal's input \(folded at import only\)"
    ):
        load_onnx(_model([node], [_f("x", [2])], [out]))


def test_a_used_layer_norm_statistic_is_refused() -> None:
    scale = helper.make_tensor("s", TensorProto.FLOAT, [4], np.ones(4))
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y", "mean"], name="ln")
    model = _model([node], [_f("x", [2, 4])], [_f("y", [2, 4]), _f("mean", [2, 1])], [scale])
    with pytest.raises(
        ModelError, match="node 'ln' \\(LayerNormalization\\): output 'mean' is used"
    ):
        load_onnx(model)


def test_an_unsupported_element_type_is_named() -> None:
    w = helper.make_tensor("w", TensorProto.FLOAT16, [2, 2], np.ones(4, np.float16))
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 2])
    with pytest.raises(ModelError, match="input 'x' has element type FLOAT16"):
        load_onnx(_model([node], [x], [y], [w]))


def test_an_invalid_model_is_named_by_the_checker() -> None:
    node = helper.make_node("Relu", ["nothing"], ["y"])
    with pytest.raises(ModelError, match="<ModelProto>: invalid ONNX model"):
        load_onnx(_model([node], [_f("x", [2])], [_f("y", [2])]))


def test_the_callers_model_is_not_changed(tmp_path) -> None:
    model = mlp()
    before = model.SerializeToString()
    load_onnx(model)
    assert model.SerializeToString() == before
