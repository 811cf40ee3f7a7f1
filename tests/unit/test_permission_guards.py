"""Every route's guard comes from the permission table, and the documents say what it says.

The API's routes are marked with the operation they perform (`auth.requires`); the UI's pages
and forms with theirs (`guard.view`, `guard.form`); none with a role of its own. The role a
route then needs is the table's least role for that operation, which the OpenAPI document and
the UI's page table (docs/ui.md) must name.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from qinglong_dispatcher.domain import approvals, errors, permissions, principals
from qinglong_dispatcher.web import app, auth, openapi
from qinglong_dispatcher.web.ui import guard
from tests.support import api_server

Operation = permissions.Operation
ROOT = Path(__file__).resolve().parents[2]

PUBLIC = {
    ("GET", "/"),
    ("GET", "/api/v1/healthz"),
    ("GET", "/api/v1/openapi.json"),
    ("GET", "/ui/signin"),
    ("POST", "/ui/signin"),
    ("GET", "/ui/oidc/start"),
    ("GET", "/ui/oidc/callback"),
    ("GET", "/ui/static/{name}"),
}
"""The routes no token and no session guards (sign-in itself, liveness, the documents)."""


@pytest.fixture
async def routes(tmp_path: Path) -> AsyncIterator[dict[tuple[str, str], object]]:
    store = await api_server.open_store(tmp_path / "routes.db")
    try:
        ctx = api_server.small_context(store, auth.NoTokens())
        application = app.build(ctx)
        yield {
            (route.method, route.resource.canonical): route.handler
            for route in application.router.routes()
            if route.method != "HEAD" and route.resource is not None
        }
    finally:
        await store.close()


def _operation(handler: object) -> Operation | None:
    """The table's operation guarding `handler`: the API's bearer mark or the UI's session."""
    marked = auth.marked(handler)
    if marked == auth.PUBLIC:
        found = getattr(handler, guard.OPERATION, None)
        assert found is None or isinstance(found, Operation)
        return found
    assert isinstance(marked, Operation), f"a role of its own: {marked!r}"
    return marked


def test_every_route_is_guarded_by_an_operation_of_the_table_or_public(
    routes: dict[tuple[str, str], object],
) -> None:
    unguarded = {key for key, handler in routes.items() if _operation(handler) is None}
    assert unguarded == PUBLIC
    assert all(auth.marked(handler) is not None for handler in routes.values())


def test_the_openapi_document_names_each_routes_least_role(
    routes: dict[tuple[str, str], object],
) -> None:
    documented = openapi.document()["paths"]
    seen = 0
    for (method, path), handler in routes.items():
        operation = _operation(handler)
        if not path.startswith(app.PREFIX) or operation is None:
            continue
        summary = documented[path.removeprefix(app.PREFIX)][method.lower()]["summary"]
        assert summary.endswith(f"(role {permissions.least_role(operation)})"), (method, path)
        seen += 1
    assert seen == len(app.ROUTES) - 1  # all but healthz


_UI_ROW = re.compile(r"^\| [^|]+ \| `(/ui[^`]*)` \| (\w+) \|", re.MULTILINE)


def test_the_ui_page_table_names_each_pages_least_role(
    routes: dict[tuple[str, str], object],
) -> None:
    rows = _UI_ROW.findall((ROOT / "docs" / "ui.md").read_text(encoding="utf-8"))
    assert len(rows) >= 8
    # The document names every path parameter `{id}`; the routes their own names.
    pages = {re.sub(r"\{[^}]+\}", "{id}", path): h for (m, path), h in routes.items() if m == "GET"}
    for path, role in rows:
        operation = _operation(pages[path])
        assert operation is not None, path
        assert permissions.least_role(operation) == role, path


def test_a_route_admits_the_least_role_the_table_allows_and_every_role_above() -> None:
    for operation in Operation:
        least = permissions.least_role(operation)
        assert least in permissions.MAY[operation]
        for role in principals.ROLES:
            who = principals.Authenticated(token_id="tok_" + "0" * 16, principal="p", role=role)
            assert permissions.admits(who, operation) == (
                principals.ROLES.index(role) >= principals.ROLES.index(least)
            )


def test_the_store_principal_refuses_by_the_table_with_the_kind_of_the_step() -> None:
    owner = approvals.Principal(name="owner")
    for operation in Operation:
        owner.require(operation)  # the OS user (no token role): the file's owner may all
        for role in principals.ROLES:
            who = approvals.Principal(name="p", role=role.value)
            if permissions.permits(role, operation):
                who.require(operation)
                continue
            refusal = (
                errors.ApprovalNotPermitted
                if operation in permissions.APPROVAL_STEPS
                else errors.PrincipalNotPermitted
            )
            with pytest.raises(refusal, match=rf"^principal p \({role}\) may not take this step$"):
                who.require(operation)
