"""The `http.request` plan: which receiver, and the exact request bytes an approval binds.

The approval's digest is over the whole canonical plan, so the method, the receiver, the
path, the query in its order, every header and the body bytes (as canonical base64) are all
bound: what is sent is what was approved, byte for byte. The plan holds no URL and no secret:
the origin and the credentials belong to the receiver's configuration.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Annotated, ClassVar, Final, Literal

import pydantic
from pydantic import Field, StringConstraints

from qinglong_dispatcher.domain import plans

ACTION_TYPE: Final = "http.request"
MAX_PATH_CHARS: Final = 2048
MAX_BODY_BYTES: Final = 48 * 1024
"""Decoded; the plan's own 64 KiB canonical cap leaves a little less in practice."""
MAX_QUERY_PAIRS: Final = 64
MAX_HEADERS: Final = 32
MAX_HEADER_VALUE_CHARS: Final = 4096

# RFC 3986 path characters and percent escapes only: no space, control character, "?", "#",
# backslash or non-ASCII can be sent, and the path needs no normalising before it is compared.
_PATH = re.compile(r"/(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-Fa-f]{2})*")
# A percent-encoded dot, slash or backslash would let a server see another path than the one
# the prefix check saw.
_ENCODED_SEPARATOR = re.compile(r"%(?:2[eEfF]|5[cC])")
_HEADER_NAME = re.compile(r"[a-z0-9!#$%&'*+.^_`|~-]{1,64}")
_HEADER_VALUE = re.compile(r"[\x20-\x7e\t]*")
_CONTENT_TYPE = re.compile(r"[\x21-\x7e][\x20-\x7e]{0,254}")

FORBIDDEN_HEADERS: Final = frozenset(
    {
        # Hop-by-hop (RFC 9110 §7.6.1) and framing: the client owns the connection.
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "expect",
        # Set by the action itself: the credential, the key and the body's type.
        "authorization",
        "idempotency-key",
        "content-type",
        "cookie",
    }
)

Pair = Annotated[
    list[Annotated[str, StringConstraints(strict=True)]], Field(min_length=2, max_length=2)
]


def header_refused(name: str) -> bool:
    """Whether a plan may not set header `name` (lowercase)."""
    return name in FORBIDDEN_HEADERS or name.startswith("webhook-")


class HttpRequestPlan(plans.PlanModel):
    """Plan v1 of `http.request` (docs/actions.md)."""

    ACTION_TYPE: ClassVar[str] = ACTION_TYPE
    SENSITIVE_FIELDS: ClassVar[tuple[str, ...]] = ("query", "headers", "body")
    """What a redacted preview shows only as size and digest prefix: a query value, a
    header or the body may carry customer data."""
    TARGET_MEMBER: ClassVar[str | None] = "receiver"
    """The receiver is the system a request changes: one request per receiver at a time."""

    receiver: plans.Identifier = Field(alias="receiver")
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = Field(alias="method")
    path: Annotated[
        str, StringConstraints(strict=True, min_length=1, max_length=MAX_PATH_CHARS)
    ] = Field(alias="path")
    query: Annotated[list[Pair], Field(max_length=MAX_QUERY_PAIRS)] = Field(
        default_factory=list, alias="query"
    )
    headers: Annotated[list[Pair], Field(max_length=MAX_HEADERS)] = Field(
        default_factory=list, alias="headers"
    )
    body: Annotated[str, StringConstraints(strict=True)] | None = Field(default=None, alias="body")
    content_type: Annotated[str, StringConstraints(strict=True)] | None = Field(
        default=None, alias="contentType"
    )

    @pydantic.field_validator("path")
    @classmethod
    def _plain_path(cls, value: str) -> str:
        if not _PATH.fullmatch(value):
            raise ValueError('must start with "/" and hold only URL path characters')
        if ".." in value or "//" in value or _ENCODED_SEPARATOR.search(value):
            raise ValueError('must not hold "..", "//" or a percent-encoded dot or slash')
        return value

    @pydantic.field_validator("query")
    @classmethod
    def _named_pairs(cls, value: list[list[str]]) -> list[list[str]]:
        if any(not name for name, _ in value):
            raise ValueError("every query pair needs a name")
        return value

    @pydantic.field_validator("headers")
    @classmethod
    def _allowed_headers(cls, value: list[list[str]]) -> list[list[str]]:
        names = [name for name, _ in value]
        if len(set(names)) != len(names):
            raise ValueError("every header may appear once")
        for name, text in value:
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError("header names must be lowercase tokens")
            if header_refused(name):
                raise ValueError("a header the action or the connection owns cannot be set")
            if len(text) > MAX_HEADER_VALUE_CHARS or not _HEADER_VALUE.fullmatch(text):
                raise ValueError("header values must be printable ASCII")
        return value

    @pydantic.field_validator("body")
    @classmethod
    def _canonical_base64(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            data = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("must be standard base64") from None
        # One spelling per byte string, so that two plans for the same bytes are equal.
        if base64.b64encode(data).decode("ascii") != value:
            raise ValueError("must be canonical base64 (padded, no spare bits)")
        if len(data) > MAX_BODY_BYTES:
            raise ValueError(f"must decode to at most {MAX_BODY_BYTES} bytes")
        return value

    @pydantic.field_validator("content_type")
    @classmethod
    def _printable_type(cls, value: str | None) -> str | None:
        if value is not None and not _CONTENT_TYPE.fullmatch(value):
            raise ValueError("must be printable ASCII of at most 255 characters")
        return value

    @pydantic.model_validator(mode="after")
    def _body_rules(self) -> HttpRequestPlan:
        if self.body is None and self.content_type is not None:
            raise ValueError("contentType needs a body")
        if self.body is not None and self.method == "GET":
            raise ValueError("a GET has no body")
        return self

    def body_bytes(self) -> bytes | None:
        """The exact request body, decoded."""
        return None if self.body is None else base64.b64decode(self.body, validate=True)
