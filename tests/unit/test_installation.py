"""Installation names and the role names they give."""

from __future__ import annotations

import pytest

from qinglong_dispatcher.domain import errors, installation


def test_a_database_name_gives_a_plain_lower_case_installation() -> None:
    assert installation.from_database_name("Shop-EU.prod") == "shop_eu_prod"
    assert installation.from_database_name("qinglong") == installation.LEGACY


@pytest.mark.parametrize("database", ["", "---", "9lives", "x" * 49, "数据库"])
def test_a_database_name_that_gives_no_installation_asks_for_one(database: str) -> None:
    with pytest.raises(errors.ConfigurationError, match="set QINGLONG_INSTALLATION"):
        installation.from_database_name(database)


@pytest.mark.parametrize("name", ["Shop", "shop-eu", "_shop", "shop;drop", "x" * 49])
def test_an_installation_name_is_a_plain_identifier(name: str) -> None:
    with pytest.raises(errors.ConfigurationError):
        installation.check_name(name)


def test_every_role_name_fits_postgresqls_identifier_length() -> None:
    longest = "a" * 48
    assert max(len(role) for role in installation.roles(longest)) <= 63
    assert installation.role("shop", "self_approver") == "shop_self_approver"


def test_rendering_renames_the_template_roles_and_nothing_else() -> None:
    sql = (
        "GRANT SELECT ON qinglong.t TO qinglong_runtime, qinglong_self_approver;\n"
        "-- pg_notify('qinglong_dispatch_due'), 'qinglong_operator', qinglong_runtimes\n"
    )
    assert installation.render(sql, "shop") == (
        "GRANT SELECT ON qinglong.t TO shop_runtime, shop_self_approver;\n"
        "-- pg_notify('qinglong_dispatch_due'), 'shop_operator', qinglong_runtimes\n"
    )
    assert installation.render(sql, installation.LEGACY) == sql
