"""Bounds on a JSON body's structure, checked chunk by chunk while the body arrives.

``json.loads`` recurses once per nesting level (a body of ``[`` x 100,000 raises
RecursionError), converts an integer of any length (thousands of digits: ValueError, and
quadratic time before it), and builds a Python object for every element before anything
can look at the count: a body of millions of empty arrays, well under the byte limit, held
the event loop for seconds and the process's memory by a gigabyte. So before a byte is
parsed, ``JsonBounds.feed`` reads each chunk as it comes, at C speed (a regular expression
blanks out strings, then bytes methods and a numpy running sum), and raises
``BodyRefused`` as soon as the body passes a limit:

- nesting deeper than ``depth`` (any request this server takes is under 10 deep);
- a number of more than ``digits`` digits (a pixel has 3, a float written by any JSON
  encoder under 30);
- more arrays and objects than the largest request could hold (``containers``), or more
  elements (``elements``; an element is counted by its comma, or as a container): 413;
- at the end, arrays that outnumber what that many values can fill (``per_value``): a body
  of empty or one-element arrays is refused before ``json.loads`` builds them.

Brackets and commas inside strings do not count, a string may span chunks, and a chunk may
end inside an escape. What is not JSON is left for the parser to refuse: the bounds only
keep that parser's work in proportion to a real request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

# A complete JSON string (escapes included); what is left of a chunk once these are
# blanked holds at most one unclosed quote, the start of a string the next chunk ends.
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_STRING_REST = re.compile(rb'(?:[^"\\]|\\.)*', re.S)  # the inside of a string, up to its end
_DIGITS = b"0123456789"
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")  # a digit run: a run of b"0"
_STEP = np.zeros(256, np.int8)  # the nesting change of each byte: +1 opens, -1 closes
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1


class BodyRefused(Exception):
    """The body passed a bound: ``status`` (400, or 413 for more than a request may hold)
    and a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Limits:
    depth: int
    digits: int
    containers: int
    elements: int
    per_value: float  # arrays and objects a value may come with (at the end)

    @classmethod
    def for_images(cls, image_shape: tuple[int, ...], max_images: int) -> Limits:
        """What a request of at most ``max_images`` arrays of ``image_shape`` can hold,
        written as nested lists (the most containers) with room for the protocol's keys."""
        arrays, run = 1, 1  # nested: 1 + d0 + d0*d1 + ...; the innermost level holds values
        for size in image_shape[:-1]:
            run *= size
            arrays += run
        values = run * (image_shape[-1] if image_shape else 1)
        slack = 4096  # the keys, names, parameters and shape of an inference request
        # A request a little over the image limit passes (the slack), to be told its count
        # by the parse (413, "N images in one request; at most M").
        return cls(
            depth=32,
            digits=64,
            containers=max_images * arrays + slack,
            elements=max_images * (values + 2 * arrays) + slack,
            per_value=2 * arrays / max(values, 1),
        )


class JsonBounds:
    """Feed the body's chunks in order; ``finish`` once it is complete."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.depth = 0
        self.containers = 0
        self.commas = 0
        self.digit_run = 0  # digits at the end of what was read (a number may span chunks)
        self.in_string = False
        self.escaped = False  # the last chunk ended on a string's backslash
        self._long_number = b"0" * (limits.digits + 1)

    def feed(self, chunk: bytes) -> None:
        start = 0
        if self.in_string:
            start = self._close_string(chunk)
            if self.in_string:
                return
            self.digit_run = 0
        outside = _STRING.sub(b"S", chunk[start:] if start else chunk)
        quote = outside.find(b'"')
        tail = None
        if quote >= 0:  # an unclosed string: the rest of the chunk is inside it
            outside, tail = outside[:quote], outside[quote + 1 :]
        self._structure(outside)
        if tail is not None:
            self.in_string, self.digit_run = True, 0
            self._close_string(tail)

    def finish(self) -> None:
        """The end checks: a string or an array left open is the parser's to refuse; a body
        whose arrays outnumber the values they could hold is refused here."""
        values = self.commas + 1
        if self.containers > self.limits.per_value * values + 64:
            raise BodyRefused(
                400,
                f"{self.containers} arrays or objects for at most {values} values: not "
                "images of the model's shape",
            )

    def _close_string(self, data: bytes) -> int:
        """Read ``data`` from inside a string: the index after its closing quote, else
        len(data) with the string still open (and a backslash ending ``data`` escaping the
        next chunk's first byte)."""
        start = 0
        if self.escaped:
            if not data:
                return 0
            start, self.escaped = 1, False
        end = _STRING_REST.match(data, start).end()  # type: ignore[union-attr]
        if end < len(data):
            if data[end] == ord('"'):
                self.in_string = False
                return end + 1
            self.escaped = True  # the regex stops at a backslash only when it ends data
        return len(data)

    def _structure(self, outside: bytes) -> None:
        limits = self.limits
        if not outside:
            return
        # Digits: the longest run, counting one carried over from the chunk before (bytes
        # methods only: a regular expression costs more than the rest of the check).
        lead = len(outside) - len(outside.lstrip(_DIGITS))
        if self.digit_run + lead > limits.digits or self._long_number in outside.translate(
            _DIGITS_AS_ZERO
        ):
            raise BodyRefused(
                400, f"a number of more than {limits.digits} digits: not a pixel value"
            )
        if lead == len(outside):
            self.digit_run += lead
        else:
            self.digit_run = len(outside) - len(outside.rstrip(_DIGITS))
        opens = outside.count(b"[") + outside.count(b"{")
        closes = outside.count(b"]") + outside.count(b"}")
        self._nesting(outside, opens, closes)  # first: too deep is the truer message
        self.containers += opens
        self.commas += outside.count(b",")
        if self.containers > limits.containers:
            raise BodyRefused(
                413,
                f"more than {limits.containers} arrays or objects: more than "
                "serving.max_request_images images can take",
            )
        if self.commas + self.containers > limits.elements:
            raise BodyRefused(
                413,
                f"more than {limits.elements} elements: more than "
                "serving.max_request_images images can take",
            )

    def _nesting(self, outside: bytes, opens: int, closes: int) -> None:
        limits = self.limits
        if self.depth + opens <= limits.depth and self.depth - closes >= 0:
            self.depth += opens - closes  # neither bound reachable: no running sum needed
            return
        running = self.depth + np.cumsum(_STEP[np.frombuffer(outside, np.uint8)], dtype=np.int32)
        if running.max(initial=self.depth) > limits.depth:
            raise BodyRefused(400, f"JSON nested more than {limits.depth} deep: not images")
        if running.min(initial=self.depth) < 0:
            raise BodyRefused(400, "the body is not JSON: a bracket closes what never opened")
        self.depth = int(running[-1])
