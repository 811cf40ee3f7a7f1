"""The API's pure pieces: listen addresses, principals' roles, rate-limit buckets, the map
from every typed error to a problem type, and the connection gate at shutdown."""

from __future__ import annotations

from typing import cast

import pytest

from qinglong_dispatcher.config import listen_address
from qinglong_dispatcher.domain import errors, principals
from qinglong_dispatcher.lifecycle import metrics
from qinglong_dispatcher.web import connections, limits, problems


@pytest.mark.parametrize(
    ("text", "loopback", "unix"),
    [
        ("127.0.0.1:8443", True, False),
        ("127.9.9.9:0", True, False),
        ("localhost:8443", True, False),
        ("[::1]:8443", True, False),
        ("0.0.0.0:8443", False, False),
        ("[::]:8443", False, False),
        ("api.example.test:443", False, False),
        ("unix:/run/qinglong/api.sock", False, True),
    ],
)
def test_listen_addresses(text: str, loopback: bool, unix: bool) -> None:
    address = listen_address.parse(text)
    assert (address.is_loopback, address.is_unix) == (loopback, unix)
    assert str(address) == text


@pytest.mark.parametrize(
    "text", ["8443", "host:", ":8443", "1.2.3.4:65536", "[zz::1]:1", "unix:relative.sock", "a b:1"]
)
def test_bad_listen_addresses(text: str) -> None:
    with pytest.raises(ValueError):
        listen_address.parse(text)


def test_roles_are_ordered_least_privilege_first() -> None:
    viewer = principals.Authenticated(
        principal="v", role=principals.TokenRole.VIEWER, token_id="t1"
    )
    operator = principals.Authenticated(
        principal="o", role=principals.TokenRole.OPERATOR, token_id="t2"
    )
    assert viewer.may(principals.TokenRole.VIEWER)
    assert not viewer.may(principals.TokenRole.SUBMITTER)
    assert all(operator.may(role) for role in principals.ROLES)
    with pytest.raises(ValueError):
        principals.Authenticated(principal="x", role="root", token_id="t3")  # type: ignore[arg-type]


def test_a_bucket_refills_at_its_rate_and_keys_are_bounded() -> None:
    now = [0.0]
    limiter = limits.Limiter(rate=2.0, burst=3, max_keys=2, clock=lambda: now[0])
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("a") == pytest.approx(0.5)
    now[0] += 0.5
    assert limiter.take("a") == 0.0
    limiter.spend("b")
    limiter.spend("c")  # evicts the least recently used, "a"
    assert len(limiter) == 2
    assert limiter.retry_after("a") == 0.0  # a fresh, full bucket


def test_failures_alone_empty_the_authentication_bucket() -> None:
    now = [0.0]
    limiter = limits.Limiter(rate=0.1, burst=2, clock=lambda: now[0])
    assert limiter.retry_after("10.0.0.1") == 0.0
    limiter.spend("10.0.0.1")
    limiter.spend("10.0.0.1")
    assert limiter.retry_after("10.0.0.1") == pytest.approx(10.0)
    assert limiter.retry_after("10.0.0.2") == 0.0


def _typed_errors() -> list[type[errors.QinglongError]]:
    found: list[type[errors.QinglongError]] = []
    pending: list[type[errors.QinglongError]] = [errors.QinglongError]
    while pending:
        cls = pending.pop()
        if cls.__module__ == errors.__name__:  # the typed errors a store or the API raises
            found.append(cls)
        pending.extend(cls.__subclasses__())
    return sorted(found, key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", _typed_errors(), ids=lambda c: c.__name__)
def test_every_typed_error_has_a_problem_type(cls: type[errors.QinglongError]) -> None:
    code = problems.code_of(cls("a message"))
    problem = problems.body(code, detail="a message")
    assert problem["type"] == f"/problems/{code}"
    if (
        issubclass(cls, errors.ConfigurationError | errors.StoreInUse)
        or cls is errors.QinglongError
    ):
        return  # raised at startup, never while serving: a 500 without detail if it were
    # A store error is a fault (5xx, no detail) unless it is the database's refusal.
    refusals = errors.TransitionRefused | errors.PrincipalNotPermitted
    if issubclass(cls, errors.StoreError) and not isinstance(cls("x"), refusals):
        assert int(str(problem["status"])) >= 500
        assert "detail" not in problem
    else:
        assert code != "internal", cls


def test_store_refusals_map_to_their_own_types() -> None:
    assert problems.code_of(errors.SelfApprovalRefused()) == "self_approval_refused"
    assert problems.code_of(errors.ApprovalNotPermitted()) == "approval_not_permitted"
    assert problems.code_of(errors.TransitionRefused()) == "transition_refused"
    assert problems.KINDS["transition_refused"].status == 409
    assert problems.code_of(errors.StoreBusy()) == "store_busy"
    assert problems.code_of(errors.SchemaTooNew()) == "store_error"


class _Waiting:
    """A connection waiting for its request's headers (what the gate reads of one)."""

    busy = 0

    def __init__(self) -> None:
        self.closed = False

    def force_close(self) -> None:
        self.closed = True


def test_once_the_listener_closes_the_gate_closes_waiting_connections_and_admits_none() -> None:
    gate = connections.Gate(limit=4, the_metrics=metrics.Metrics(profile="edge", cadence_s=5.0))
    waiting = _Waiting()
    assert gate.admit(cast(connections.Connection, waiting))
    gate.close_all()
    assert waiting.closed
    # Accepted just before the listener closed, it reaches the gate after the shutdown began.
    late = _Waiting()
    assert not gate.admit(cast(connections.Connection, late))
