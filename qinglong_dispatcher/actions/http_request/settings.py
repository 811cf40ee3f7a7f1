"""`http.request`'s own settings: the operator's receivers file."""

from __future__ import annotations

from pydantic import Field

from qinglong_dispatcher.actions import settings


class HttpRequestSettings(settings.ActionSettings):
    """Read like the global settings (`QINGLONG_RECEIVERS_FILE`, `receivers_file`)."""

    receivers_file: settings.RegularFile | None = Field(
        None,
        description="http.request: the TOML file of receivers a plan may name (none: the "
        "action has no handler)",
    )
