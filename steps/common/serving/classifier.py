"""The served champion: an MLflow pyfunc (models-from-code) over the variants it runs.

Logged by ``steps.benchmark.registered_model`` with this file as the model's code and
``runners.py``, ``torch_runners.py``, ``strict_input.py`` and ``serving_manifest.py``
beside it in ``code_paths``; ``mlflow models serve`` executes it with only numpy, pandas,
mlflow and the runtimes its variants need (no ``steps``; torch only for a torch variant:
eager, TorchScript, torch.export, AOTInductor, TensorRT). Whatever the variant, the input
is the same:
``predict`` takes uint8 ``N x 32 x 32 x 3`` RGB images as staged, normalises them inside,
runs each request on the variant measured fastest at its batch size, and returns per image
the class index, its name and the ten probabilities (``predict_columns``: the same as
arrays, what ``python -m steps.serve`` calls). A JSON request whose values are not
such pixels (normalised floats, values past 255, another shape) is refused with a 400
before MLflow would cast it (``strict_input``, installed for this model's input spec when
it loads).
"""

from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import runners  # from the model's code_paths, not the steps package
import serving_manifest  # serving.json's contract, from the code_paths too
import strict_input
from mlflow.exceptions import MlflowException
from mlflow.types import TensorSpec

SHAPE = (32, 32, 3)
EXPECTED = "uint8 RGB images of shape (-1, 32, 32, 3), whole numbers 0..255"


class CifarClassifier(mlflow.pyfunc.PythonModel):
    # predict has no type hints on purpose: strict_input checks the pixels, not MLflow's
    # type-hint validation. MLflow's PythonModel.__init_subclass__ (mlflow 3.x,
    # mlflow/pyfunc/model.py) would warn so at this class, in escape codes whatever the
    # output is and under its own "once" filter, into every log that loads the model; this
    # flag, which MLflow's own ChatModel sets, skips that check. Without hints its wrapper
    # of predict only passes the call through: nothing else changes.
    _skip_type_hint_validation = True

    def load_context(self, context):
        strict_input.install(TensorSpec(np.dtype(np.uint8), (-1, *SHAPE)), EXPECTED)
        folder = Path(context.artifacts["variants"])
        contract = serving_manifest.ServingManifest
        meta = contract.read(folder / contract.DOCUMENT)
        self.classes = list(meta.classes)
        self.mean, self.std = meta.mean, meta.std
        # Each runner takes the pixels as they come and normalises them itself (OpenVINO
        # inside its compiled graph, off the calling thread; a torch variant on its device).
        pixels = (self.mean, self.std)
        loaded = {
            name: runners.load_runner(
                v.kind,
                folder / v.file,
                v.details,
                meta.threads,
                pixels,
                precision=v.precision,
                batch_range=(meta.batch_range.min, meta.batch_range.max),
            )
            for name, v in meta.variants.items()
        }
        self.dispatch = runners.Dispatcher(loaded, meta.fastest_by_batch)

    def predict(self, context, model_input, params=None):
        columns = self.predict_columns(model_input)
        columns["probabilities"] = list(columns["probabilities"])  # a column of arrays
        return pd.DataFrame(columns)

    def predict_columns(self, model_input):
        """What ``predict`` answers, as arrays with the images on the first axis (class
        int64, class_name str objects, probabilities float32 ``N x classes``), before a
        DataFrame is built of them. ``python -m steps.serve`` calls this (it has checked
        each request against the signature): the DataFrame it would otherwise build and
        take apart again costs more than the model at batch 1."""
        images = np.asarray(model_input)
        # The signature already enforces this when served; a direct call is checked here.
        if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != SHAPE:
            raise MlflowException.invalid_parameter_value(
                f"expected {EXPECTED}; got {images.dtype} of shape {images.shape}"
            )
        logits = self.dispatch(images)
        probs = runners.softmax(logits.astype(np.float64)).astype(np.float32)
        index = probs.argmax(axis=1)
        return {
            "class": index.astype(np.int64),
            "class_name": np.array([self.classes[i] for i in index], dtype=object),
            "probabilities": probs,
        }


mlflow.models.set_model(CifarClassifier())
