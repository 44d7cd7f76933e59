"""One model call's output, answered request by request in either protocol.

The batcher hands each request its slice of the batch (``BatchOutput[start:end]``) and the
request's protocol turns it into bytes on the inference thread: MLflow's JSON rows for
``/invocations`` (``rows``, as ``mlflow models serve`` writes them), typed arrays for the
Open Inference Protocol (``columns``). Each form is built at most once per batch, the first
time a request of that protocol asks, and sliced from there: a batch of 32 one-image
requests costs one conversion, not 32.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from mlflow.utils.proto_json_utils import NumpyEncoder, _get_jsonable_obj


class BatchOutput:
    """The pyfunc's output for a batch of ``len(self)`` images (a DataFrame, an array or a
    list with one row per image), or the arrays it is made of (``of_columns``)."""

    def __init__(self, output: Any) -> None:
        self.output = output
        self._rows: list[Any] | None = None
        self._columns: dict[str, np.ndarray] | None = None

    @classmethod
    def of_columns(cls, columns: dict[str, np.ndarray]) -> BatchOutput:
        """The answer as the champion's ``predict_columns`` gives it: named arrays, the
        images on their first axis (what ``predict`` would put in a DataFrame's columns)."""
        lengths = {name: len(values) for name, values in columns.items()}
        if not columns or len(set(lengths.values())) != 1:
            raise TypeError(f"predict_columns gave columns of {lengths} rows, not one per image")
        batch = cls(None)
        batch._columns = dict(columns)
        return batch

    def __len__(self) -> int:
        if self.output is None:  # made of_columns
            return len(next(iter(self.columns().values())))
        return len(self.output)

    def __getitem__(self, part: slice) -> Part:
        return Part(self, part)

    def rows(self) -> list[Any]:
        """JSON-ready rows, as MLflow writes predictions (``pandas_orient="records"``)."""
        if self._rows is None:
            output = self.output
            if output is None:  # made of_columns
                # As records() reads the DataFrame predict builds of these: numbers and
                # text as Python ones, each image's array of probabilities as a list.
                arrays = self.columns()
                rows = _zip_rows(list(arrays), [v.tolist() for v in arrays.values()])
            elif isinstance(output, pd.DataFrame):
                rows = records(output)
            else:
                rows = None
            if rows is None:
                rows = _get_jsonable_obj(output, pandas_orient="records")
            if not isinstance(rows, list):
                raise TypeError(f"the model returned {type(rows).__name__}, not one row per image")
            self._rows = rows
        return self._rows

    def columns(self) -> dict[str, np.ndarray]:
        """Each output as an array, first axis the images: a DataFrame's columns (a column
        of arrays stacked, one of text as an object array), else ``predictions``."""
        if self._columns is None:
            output = self.output
            if isinstance(output, pd.DataFrame):
                self._columns = {str(name): _column(output[name]) for name in output.columns}
            else:
                self._columns = {"predictions": np.asarray(output)}
        return self._columns


class Part:
    """The rows of one request in a BatchOutput."""

    def __init__(self, batch: BatchOutput, part: slice) -> None:
        self.batch = batch
        self.part = part

    def __len__(self) -> int:
        return len(range(*self.part.indices(len(self.batch))))

    def rows(self) -> list[Any]:
        return self.batch.rows()[self.part]

    def columns(self) -> dict[str, np.ndarray]:
        return {name: values[self.part] for name, values in self.batch.columns().items()}


def _column(series: pd.Series) -> np.ndarray:
    if series.dtype != object:
        return series.to_numpy()
    values = series.tolist()
    if values and all(isinstance(v, np.ndarray) for v in values):
        return np.stack(values)
    return np.asarray(values, dtype=object)


def records(frame: pd.DataFrame) -> list[dict[str, Any]] | None:
    """``frame.to_dict(orient="records")`` with numpy values as Python ones, as
    ``NumpyEncoder`` would write them (arrays and scalars by ``tolist``/``item``), in a
    fraction of the time; None for a column of anything else (MLflow's path then)."""
    columns = []
    for name in frame.columns:
        values = frame[name].tolist()  # numeric columns come back as Python numbers
        if values and not isinstance(values[0], (int, float, str)):
            if not all(isinstance(v, np.ndarray) for v in values):
                return None
            values = [v.tolist() for v in values]
        columns.append(values)
    return _zip_rows([str(n) for n in frame.columns], columns)


def _zip_rows(names: list[str], columns: list[list[Any]]) -> list[dict[str, Any]]:
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]


def encode(part: Part | Sequence[Any]) -> bytes:
    """A request's rows as ``mlflow models serve`` writes them (``predictions_to_json``:
    the same separators; ``NumpyEncoder`` for what ``records`` left to MLflow's path)."""
    rows = part.rows() if isinstance(part, Part) else list(part)
    return json.dumps({"predictions": rows}, cls=NumpyEncoder).encode()
