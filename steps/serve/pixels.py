"""The fast path of a request parse: a body that is exactly ``{"inputs": [images]}`` of
integer pixels in range, read with numpy over its bytes instead of ``json.loads`` and a
nested-list conversion (which take ~0.5 ms of the ~0.6 ms a one-image request costs).

It answers only what it can prove: the body's only key is ``inputs`` or ``instances``, the
array holds nothing but digits, commas, brackets and JSON whitespace, each number is a JSON
integer (no leading zero) of at most 3 digits and no more than 255, no two numbers are
parted by whitespace alone, the brackets and commas are, in order, byte for byte those of
an ``N x H x W x C`` array of the signature's shape, and each number sits in one of that
outline's places for a number (so the nesting is rectangular, the JSON valid and the shape
the one ``np.array`` would give).
Anything else, every error included, returns None and takes the standard path, which
gives MLflow's answer: the two paths never disagree (``tests/test_serve.py`` holds them
side by side on valid, odd and malformed bodies).
"""

from __future__ import annotations

import functools
import re

import numpy as np

_HEAD = re.compile(rb'[ \t\n\r]*\{[ \t\n\r]*"(?:inputs|instances)"[ \t\n\r]*:[ \t\n\r]*\[')
_WHITESPACE = b" \t\n\r"  # JSON's four whitespace bytes
_ZERO, _NINE = ord("0"), ord("9")
_OPEN, _CLOSE, _COMMA = ord("["), ord("]"), ord(",")


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
        spaced = np.frombuffer(rest, dtype=np.uint8, offset=head.end() - 1)
        spaced_digit = (spaced >= _ZERO) & (spaced <= _NINE)
        numbers = np.count_nonzero(spaced_digit[1:] > spaced_digit[:-1])
        packed = rest[head.end() - 1 :].translate(None, _WHITESPACE)
        text = np.frombuffer(packed, dtype=np.uint8)
        digit = (text >= _ZERO) & (text <= _NINE)
        punctuation = (text == _OPEN) | (text == _CLOSE) | (text == _COMMA)
        if np.count_nonzero(digit) + np.count_nonzero(punctuation) != len(text):
            return None  # a sign, a point, an exponent, a string, ...
        # Numbers: maximal runs of digits (the text starts with "[" and ends with "]").
        starts = np.flatnonzero(digit[1:] > digit[:-1]) + 1
        ends = np.flatnonzero(digit[:-1] > digit[1:]) + 1
        if len(starts) != numbers:
            return None  # whitespace alone parted two numbers ("1 2"): not one number
        if len(starts) == 0 or len(starts) % self.per_image:
            return None
        lengths = ends - starts
        if lengths.max() > 3:
            return None
        digits = text.astype(np.int16) - _ZERO
        first = digits[starts]
        if ((first == 0) & (lengths > 1)).any():  # "01": not a JSON number
            return None
        values = np.where(lengths > 1, first * 10 + digits[starts + 1], first)
        values = np.where(lengths > 2, values * 10 + digits.take(starts + 2, mode="clip"), values)
        if values.max() > 255:
            return None
        # The brackets and commas are those of a rectangular array of this shape, in order,
        # and each number opens after "[" or "," and closes before "," or "]": in that
        # outline such a place holds one number, and there are as many places as numbers.
        shape = (len(values) // self.per_image, *self.image_shape)
        if packed.translate(None, b"0123456789") != _outline(shape):
            return None
        before, after = text[starts - 1], text[ends]
        if not (((before == _OPEN) | (before == _COMMA)).all()):
            return None
        if not (((after == _CLOSE) | (after == _COMMA)).all()):
            return None
        return values.astype(np.uint8).reshape(shape)
