"""`QINGLONG_PUBLIC_URL`: the address the operator UI is reached at, for notifications' links;
refused in one line that never echoes it (a user and password in it would be a secret)."""

from __future__ import annotations

import pytest

from qinglong_dispatcher.config import settings
from qinglong_dispatcher.domain import errors


def test_an_address_is_kept_without_its_trailing_slash() -> None:
    loaded = settings.load_settings(environ={"QINGLONG_PUBLIC_URL": "https://ql.example/ops/"})
    assert loaded.public_url == "https://ql.example/ops"
    assert settings.load_settings(environ={}).public_url is None


@pytest.mark.parametrize(
    "bad",
    [
        "ftp://ql.example",
        "ql.example",
        "https://",
        "https://alice:hunter2@ql.example",
        "https://ql.example/?next=x",
        "https://ql.example/#top",
        "https://ql.example/a b",
    ],
)
def test_a_bad_address_is_one_line_naming_the_variable_and_not_the_value(bad: str) -> None:
    with pytest.raises(errors.ConfigurationError) as refused:
        settings.load_settings(environ={"QINGLONG_PUBLIC_URL": bad})
    message = str(refused.value)
    assert message.startswith("QINGLONG_PUBLIC_URL: must be an http:// or https:// address")
    assert "hunter2" not in message
    assert "\n" not in message


def test_the_daemons_deliverer_links_under_the_public_address() -> None:
    from qinglong_dispatcher.bootstrap import listeners
    from qinglong_dispatcher.lifecycle import metrics

    loaded = settings.load_settings(environ={"QINGLONG_PUBLIC_URL": "https://ql.example"})
    the_metrics = metrics.Metrics(profile="edge", cadence_s=5.0, process_metrics=False)
    service = listeners.deliverer(loaded, store=None, the_metrics=the_metrics)  # type: ignore[arg-type]
    assert getattr(service, "ui_base", None) == "https://ql.example"
