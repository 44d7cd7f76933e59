"""Refuse, with a 400 and one line, a JSON request MLflow's scoring server would cast lossily.

``mlflow models serve`` turns a request's ``inputs`` into the signature's tensor dtype with
``numpy.array(data, dtype=uint8)`` (``mlflow.utils.proto_json_utils.convert_data_type``)
before the model and its schema enforcement see it: 0.5 arrives as 0 and 254.9 as 254, and
a client sending normalised floats gets 200 and wrong classes. MLflow has no option for a
strict parse, so ``install`` wraps that one function, for the served model's own tensor spec
only, with ``exact_array``: the values must already be what the spec says (integers within
the dtype's range, the spec's shape), else an ``MlflowException`` that the server answers
with 400. Self-contained (numpy and mlflow): shipped beside ``classifier.py`` in the
pyfunc's ``code_paths``.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from mlflow.exceptions import MlflowException


def exact_array(data: Any, dtype: np.dtype, shape: tuple[int, ...], expected: str) -> np.ndarray:
    """``data`` (JSON numbers in nested lists) as ``dtype`` if no value changes on the way and
    the shape matches ``shape`` (-1: any size); else MlflowException naming ``expected``."""

    def refuse(got: str) -> MlflowException:
        return MlflowException.invalid_parameter_value(f"expected {expected}; got {got}")

    try:
        values = np.asarray(data)
    except ValueError:  # numpy refuses ragged nesting
        raise refuse("nested lists of unequal lengths") from None
    if values.dtype.kind not in "iuf":  # booleans, text, null
        raise refuse(f"non-numeric values (numpy dtype {values.dtype})")
    if values.size and _holds_bool(data, values.ndim):
        # numpy reads [true, 7] as [1, 7]: a boolean among numbers is no pixel either.
        raise refuse("booleans among the numbers (true/false are not pixel values)")
    if values.ndim != len(shape) or any(
        want not in (-1, got) for want, got in zip(shape, values.shape, strict=True)
    ):
        raise refuse(f"shape {values.shape}")
    if values.dtype.kind == "f":
        with np.errstate(invalid="ignore"):  # inf's remainder is NaN: refused below
            fractional = values[np.mod(values, 1) != 0]  # NaN and inf land here too
        if fractional.size:
            raise refuse(
                f"non-integer values such as {fractional.flat[0]:g} "
                "(send the pixels themselves, not normalised floats)"
            )
    info = np.iinfo(dtype)
    if values.size and (values.min() < info.min or values.max() > info.max):
        low, high = values.min(), values.max()
        raise refuse(f"values from {low:g} to {high:g}, outside {info.min}..{info.max}")
    return values.astype(dtype)


def _holds_bool(data: Any, ndim: int) -> bool:
    """Whether the leaves of ``data`` (nested lists ``ndim`` deep, as numpy found them)
    include a bool: flattened and typed by C-level iteration, no Python loop per value."""
    if isinstance(data, np.ndarray):
        return data.dtype == np.bool_
    leaves: Any = [data] if ndim == 0 else data
    for _ in range(ndim - 1):
        leaves = itertools.chain.from_iterable(leaves)
    return bool in set(map(type, leaves))


def install(spec: Any, expected: str) -> None:
    """Parse requests for ``spec`` (an integer-dtype TensorSpec) with ``exact_array`` in this
    process; other specs keep MLflow's own conversion. Each model loaded adds its spec to
    the one wrapper (a process may load several, and MLflow may import this file anew)."""
    from mlflow.utils import proto_json_utils

    current = getattr(proto_json_utils, "convert_data_type", None)
    if current is None:  # a future MLflow moved it: fail loudly, not cast silently again
        raise RuntimeError(
            "mlflow.utils.proto_json_utils.convert_data_type is gone in this MLflow; "
            "the served model cannot refuse lossy input (update strict_input.py)"
        )
    strict: list[tuple[Any, str]] | None = getattr(current, "strict_specs", None)
    if strict is None:
        strict, original = [], current

        def convert_data_type(data: Any, requested: Any) -> Any:
            for known, described in strict:
                if requested == known:
                    shape = tuple(known.shape)
                    return exact_array(data, np.dtype(known.type), shape, described)
            return original(data, requested)

        convert_data_type.strict_specs = strict  # type: ignore[attr-defined]
        convert_data_type.wrapped = original  # type: ignore[attr-defined]
        proto_json_utils.convert_data_type = convert_data_type
    if not any(known == spec for known, _ in strict):
        strict.append((spec, expected))
