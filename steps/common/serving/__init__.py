"""Serving: runners of the portable (ONNX Runtime, OpenVINO) variants, a per-batch-size
dispatcher, and the MLflow pyfunc model. ``runners`` imports only numpy and the runtimes,
so the pyfunc ships it by ``code_paths`` without torch or the ``steps`` package."""
