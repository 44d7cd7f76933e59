"""What every contract shares: a document is a named type, written and read through it.

As KFP's typed artifacts (kubeflow/pipelines ``sdk/python/kfp/dsl/types/artifact_types.py``:
a ``Model`` or ``Metrics`` with a ``schema_version`` and its metadata, never a loose dict),
each document one step hands another is a pydantic dataclass here: the writer builds it
and calls ``dumps``, every reader calls ``parse`` and gets the type back. Reading is
strict where a document is read (``parse``): every field present (``null`` where it does
not apply; the defaults are for the writer's code only), the ``schema_version`` this code
reads, no field it does not know. What does not fit is refused in one line naming the
file and the field (``ContractError``, a user error: exit 2), never a KeyError later.
"""

from __future__ import annotations

import dataclasses
import json
from functools import cache
from typing import Any, ClassVar

from pydantic import ConfigDict, TypeAdapter, ValidationError, ValidationInfo, model_validator
from pydantic_core import PydanticCustomError
from typing_extensions import Self  # typing.Self is 3.11+; the package supports 3.10

# Every part of a document (a frozen pydantic dataclass): no field it does not know.
STRICT = ConfigDict(extra="forbid")
_DOCUMENT = "document"  # the validation context's key: reading a document, not building one


class ContractError(ValueError):
    """A document does not fit its contract; the message names the file and the field."""


class Part:
    """A piece of a document (a pydantic dataclass): read from a document, every field of
    it must be there."""

    @model_validator(mode="before")
    @classmethod
    def _every_field_present(cls, data: Any, info: ValidationInfo) -> Any:
        if info.context and info.context.get(_DOCUMENT) and isinstance(data, dict):
            missing = [f.name for f in dataclasses.fields(cls) if f.name not in data]  # type: ignore[arg-type]
            if missing:
                raise PydanticCustomError("missing", "{field}: missing", {"field": missing[0]})
        return data


class Contract(Part):
    """A whole document: its file name, its schema version and the step that writes it.
    A subclass declares ``schema_version: int = SCHEMA_VERSION`` as its last field."""

    DOCUMENT: ClassVar[str]  # the file it is published as
    DESCRIPTION: ClassVar[str]  # what it is, in a few words
    SCHEMA_VERSION: ClassVar[int] = 1
    WRITER: ClassVar[str]  # the step that writes it: what to re-run

    @model_validator(mode="before")
    @classmethod
    def _known_version(cls, data: Any, info: ValidationInfo) -> Any:
        if info.context and info.context.get(_DOCUMENT) and isinstance(data, dict):
            if "schema_version" not in data:
                raise PydanticCustomError("missing", cls._unversioned())
            if data["schema_version"] != cls.SCHEMA_VERSION:
                got = data["schema_version"]
                raise PydanticCustomError(
                    "unknown_version",
                    f"schema_version: {got!r} unknown, this version reads {cls.SCHEMA_VERSION} "
                    f"(re-run {cls.WRITER} with this version)",
                )
        return data

    @classmethod
    def parse(cls, data: bytes | str | dict[str, Any], where: str | None = None) -> Self:
        """The document from its JSON text (or the object it parses to); ``where`` names it
        in the error (a URI, a path or ``--benchmark``), by default its file name."""
        where = where or cls.DOCUMENT
        not_one = f"{where}: not a {cls.DOCUMENT} ({cls.DESCRIPTION})"
        if not isinstance(data, dict):
            try:
                data = json.loads(data)
            except ValueError as exc:
                raise ContractError(f"{not_one}: not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ContractError(f"{not_one}: not a JSON object")
        if "schema_version" not in data:
            raise ContractError(f"{not_one}: {cls._unversioned()}")
        try:
            return _adapter(cls).validate_python(data, context={_DOCUMENT: True})
        except ValidationError as exc:
            raise ContractError(f"{where}: {describe(exc, data)}") from None

    @classmethod
    def _unversioned(cls) -> str:
        return (
            f"schema_version: missing (one from before its contract, or not one; "
            f"re-run {cls.WRITER})"
        )

    def document(self) -> dict[str, Any]:
        """The document as JSON values (mapping keys as text)."""
        return _adapter(type(self)).dump_python(self, mode="json")

    def dumps(self) -> bytes:
        """The document as its file holds it."""
        return json.dumps(self.document(), indent=2).encode()


@cache
def _adapter(cls: type) -> TypeAdapter:
    return TypeAdapter(cls)


def describe(exc: ValidationError, data: Any) -> str:
    """The first problem as ``field.path: what``, the field named by its path in the
    document (a discriminated union's tag, which pydantic puts in the path, left out)."""
    error = exc.errors(include_url=False)[0]
    loc: list[str] = []
    node = data
    for part in error["loc"]:
        if isinstance(node, dict) and part not in node and part == node.get("status"):
            continue  # the union's tag, not a key of the document
        loc.append(str(part))
        node = node.get(part) if isinstance(node, dict) else None
    kind, message = error["type"], error["msg"]
    if kind in ("missing", "unknown_version") and ": " in message:
        field, _, message = message.partition(": ")
        loc.append(field)
    elif kind == "missing":
        message = "missing"
    elif kind in ("extra_forbidden", "unexpected_keyword_argument"):
        message = "a field this version does not know"
    elif kind == "union_tag_not_found":
        loc.append("status")
        message = "missing"
    elif kind == "union_tag_invalid":
        message = f"status {node.get('status')!r} is none of {error['ctx']['expected_tags']}"
    elif not isinstance(error.get("input"), dict | list):
        message = f"{message} (got {error.get('input')!r})"[:200]
    return f"{'.'.join(loc) or '(the document)'}: {message}"
