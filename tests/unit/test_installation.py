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


_PARTS = ("x", "p", "g", "self", "approver", "runtime", "plan", "reader", "api")


def _joined(most: int) -> list[str]:
    names = list(_PARTS)
    for _ in range(most - 1):
        names += [f"{a}_{b}" for a in names for b in _PARTS]
    return sorted(set(names))


def _owners(names: list[str], principals: list[str]) -> dict[str, set[str]]:
    """Every role name each installation of `names` could have, and whose it could be."""
    owners: dict[str, set[str]] = {}
    for name in names:
        for role in installation.roles(name):
            owners.setdefault(role, set()).add(name)
        for principal in principals:
            owners.setdefault(installation.principal_role(name, principal), set()).add(name)
            owners.setdefault(installation.group_role(name, principal), set()).add(name)
    return owners


def test_no_role_of_a_new_installation_is_named_like_anothers() -> None:
    names = [n for n in _joined(3) if installation.NAME.fullmatch(n)]
    principals = _joined(2)
    new = [n for n in names if installation.ambiguity(n) is None]
    assert "x" in new
    assert not {"x_p", "x_self", "x_p_x", "x_g", "x_g_x"} & set(new)
    shared = {role: who for role, who in _owners(new, principals).items() if len(who) > 1}
    assert shared == {}
    # Without the rule they would be: `x_p`'s approvers would be `x`'s principal `approver`.
    unruled = _owners(names, principals)
    assert unruled["x_p_approver"] == {"x", "x_p"}
    assert unruled["x_self_approver"] == {"x", "x_self"}
    assert unruled["x_g_approver"] == {"x", "x_g"}


def test_the_rule_holds_for_every_kind_there_is() -> None:
    # `ambiguity` argues from these two facts; a new kind that broke them would need a new rule.
    assert not any(kind.startswith("p_") or "_p_" in kind for kind in installation.KINDS)
    assert not any(kind.startswith("g_") or "_g_" in kind for kind in installation.KINDS)
    assert installation.SHARED_SUFFIXES == ("_self",)


@pytest.mark.parametrize("name", ["x_p", "x_p_y", "shop_self", "p_p", "x_g", "x_g_y"])
def test_a_new_installation_may_not_take_an_ambiguous_name(name: str) -> None:
    installation.check_name(name)  # a name an older release gave stays valid
    with pytest.raises(errors.ConfigurationError, match="choose another name"):
        installation.check_new_name(name)
    assert installation.check_new_name("p_shop_pp_selfish") == "p_shop_pp_selfish"
