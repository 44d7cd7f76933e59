"""Serving: runners of the portable (ONNX Runtime, OpenVINO) and torch variants, a
per-batch-size dispatcher, and the MLflow pyfunc model. ``runners`` imports only numpy and
the runtimes, ``torch_runners`` torch (only for a torch variant), so the pyfunc ships them
by ``code_paths`` without the ``steps`` package."""
