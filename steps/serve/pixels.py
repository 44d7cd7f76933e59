"""The fast path of a request parse: a body that is exactly ``{"inputs": [images]}`` of
integer pixels in range, read by simdjson straight into a flat buffer instead of
``json.loads`` and a nested-list conversion (which take most of what a one-image request
costs the server).

It answers only what it can prove:
- the body's only key is ``inputs`` or ``instances``, written plainly;
- the array holds nothing but digits, JSON whitespace and brackets and commas that are,
  in order, byte for byte those of an ``N x H x W x C`` array of the signature's shape (so
  no sign, point, exponent, string or null, and the nesting is rectangular);
- simdjson finds the whole body valid JSON (so no leading zero, no empty place, no two
  numbers parted by whitespace alone), every value an integer, none above 255.
Then the values, in order, are exactly those ``np.array`` would give, of that shape.
Anything else, every error included, returns None and takes the standard path, which
gives MLflow's answer: the two paths never disagree (``tests/test_serve_pixels.py`` holds
them side by side on valid, odd and malformed bodies, and on thousands of random edits).
"""

from __future__ import annotations

import functools
import re
import threading

import numpy as np
import simdjson

_HEAD = re.compile(rb'[ \t\n\r]*\{[ \t\n\r]*"(inputs|instances)"[ \t\n\r]*:[ \t\n\r]*\[')
_WHITESPACE = b" \t\n\r"  # JSON's four whitespace bytes
# What the outline check deletes: the array less these is its brackets and commas.
_DIGITS_AND_WHITESPACE = b"0123456789" + _WHITESPACE
# simdjson's refusals: malformed JSON (ValueError), a value of another type or an integer
# past int64 (TypeError, OverflowError), a document it cannot take (RuntimeError, e.g.
# one over its size limit), a key it does not find (KeyError).
_SIMDJSON_ERRORS = (ValueError, TypeError, OverflowError, RuntimeError, KeyError)


@functools.lru_cache(maxsize=8)
def _outline(shape: tuple[int, ...]) -> bytes:
    """The brackets and commas of a ``shape`` array written as JSON, in order:
    ``(2, 2)`` -> ``[[0,0],[0,0]]`` -> ``b"[[,],[,]]"``."""
    text = b"0"
    for size in reversed(shape):
        text = b"[" + b",".join([text] * size) + b"]"
    return text.replace(b"0", b"")


class PixelParser:
    """Reads ``{"inputs": ...}`` bodies of uint8 images of ``shape`` (``-1`` first)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.image_shape = tuple(shape[1:])
        self.per_image = int(np.prod(self.image_shape)) if self.image_shape else 1
        self.enabled = bool(shape) and shape[0] == -1 and all(d > 0 for d in self.image_shape)
        # An outline of n images is "[" + n image outlines joined by "," + "]".
        self.outline_step = len(_outline(self.image_shape)) + 1 if self.enabled else 0
        # A simdjson parser keeps its buffers between documents; it serves one thread.
        self._local = threading.local()

    def parse(self, body: bytes) -> np.ndarray | None:
        """The images as uint8 ``N x ...``, or None: the standard path decides."""
        if not self.enabled:
            return None
        head = _HEAD.match(body)
        rest = body.rstrip(_WHITESPACE)
        if head is None or not rest.endswith(b"}"):
            return None
        rest = rest[:-1].rstrip(_WHITESPACE)
        if not rest.endswith(b"]") or len(rest) <= head.end():
            return None
        # What is neither a digit nor whitespace must be the outline of an array of this
        # shape, the array running from the head's "[" to the body's last "]".
        outline = rest[head.end() - 1 :].translate(None, _DIGITS_AND_WHITESPACE)
        count, extra = divmod(len(outline) - 1, self.outline_step)
        if extra or count < 1:
            return None
        shape = (count, *self.image_shape)
        if outline != _outline(shape):
            return None
        flat = self._flat_integers(body, head.group(1).decode())
        if flat is None or len(flat) != count * self.per_image or flat.max() > 255:
            return None
        return flat.astype(np.uint8).reshape(shape)

    def _flat_integers(self, body: bytes, key: str) -> np.ndarray | None:
        """``body[key]``'s values in order as int64, or None where simdjson refuses the
        body or a value is not an integer."""
        parser = getattr(self._local, "parser", None)
        if parser is None:
            parser = self._local.parser = simdjson.Parser()
        try:
            document = parser.parse(body)
            try:
                buffer = document[key].as_buffer(of_type="i")
            finally:
                # The parser refuses its next document while any proxy of this one lives.
                del document
        except _SIMDJSON_ERRORS:
            return None
        return np.frombuffer(buffer, dtype=np.int64)
