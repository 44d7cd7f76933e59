"""Loading saved tensors safely: ``weights.pt`` and training checkpoints.

``torch.load(..., weights_only=True)`` refuses anything but tensors and plain containers,
so a file crafted to run code when unpickled is refused, not run. When it refuses, torch's
own message advises loading again with ``weights_only=False``, which would run that code;
``load_weights`` says instead what the file is and that it was refused, and never repeats
that advice.
"""

from __future__ import annotations

import io
import pickle
import re
import warnings
import zipfile
from typing import Any

import torch

NOT_WEIGHTS = "not a PyTorch weights file (its bytes are not tensors saved by torch.save)"


class WeightsError(ValueError):
    """A file that holds no tensors torch can load safely; the message names it and why."""


def load_weights(data: bytes, where: str) -> Any:
    """The tensors (state dict, checkpoint) saved in ``data``, on the CPU."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # pickle protocol notes
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, zipfile.BadZipFile) as exc:
        raise WeightsError(f"{where}: {refusal(exc)}") from None
    except (AttributeError, ImportError, IndexError, KeyError, TypeError):  # torch's legacy reader
        raise WeightsError(f"{where}: {NOT_WEIGHTS}") from None


def refusal(exc: BaseException) -> str:
    """Why torch would not load a file, in words that do not invite loading it unsafely."""
    text = str(exc)
    code = re.search(r"unsupported GLOBAL ([\w.]+)", text) or re.search(
        r"Unsupported global: GLOBAL ([\w.]+)", text
    )
    if code:
        return (
            f"refers to {code.group(1)}, which is code, not tensors: refused (loading it "
            "could run that code); re-create the file from a trusted training run"
        )
    if isinstance(exc, EOFError) or "Ran out of input" in text:
        return "truncated: the file ends before its data does"
    if "PytorchStreamReader" in text or isinstance(exc, zipfile.BadZipFile):
        return "not a PyTorch file (a damaged or truncated archive)"
    if "WeightsUnpickler" in text or "invalid load key" in text or "Weights only" in text:
        return NOT_WEIGHTS
    lines = [line for line in text.splitlines() if line.strip() and "weights_only" not in line]
    return lines[0].strip() if lines else type(exc).__name__


def require_state_dict(state: Any, where: str) -> dict[str, torch.Tensor]:
    """``state`` if it maps parameter names to tensors, as ``model.state_dict()`` does."""
    if not isinstance(state, dict):
        raise WeightsError(
            f"{where}: holds a {type(state).__name__}, not a state dict (parameter names "
            "mapped to tensors, as torch.save(model.state_dict(), ...) writes)"
        )
    odd = [k for k, v in state.items() if not isinstance(k, str) or not torch.is_tensor(v)]
    if odd:
        raise WeightsError(f"{where}: not a state dict: entry {odd[0]!r} is not a named tensor")
    return state
