-- Who acts, answered with fewer look-ups (docs/security.md#the-api-process): the two
-- functions of 0015 give the same answers on every path, for less. Every approval, dispatch
-- and audit row asks them several times, so their cost is a large part of a submit's.
-- 1. `acting_role` finds roles by oid through the catalog's cache (regrole) and reads
--    pg_auth_members by its (roleid, member) key, instead of joining the pg_roles view by
--    name. A principal still counts only when qinglong_api was granted it directly.
-- 2. `acting_principal` asks for the acting role once: in 0015 the sub-select was expanded at
--    each of its references, so every principal cost two role look-ups.

CREATE OR REPLACE FUNCTION qinglong.acting_role() RETURNS pg_catalog.text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    api pg_catalog.oid := pg_catalog.to_regrole('qinglong_api');
BEGIN
    IF CURRENT_USER IS DISTINCT FROM SESSION_USER
            AND pg_catalog.starts_with(CURRENT_USER::pg_catalog.text,
                pg_catalog.regexp_replace('qinglong_api', 'api$', 'p_'))
            AND EXISTS (
                SELECT 1 FROM pg_catalog.pg_auth_members AS m
                WHERE m.roleid = pg_catalog.quote_ident(CURRENT_USER)::pg_catalog.regrole
                  AND m.member = api) THEN
        RETURN CURRENT_USER::pg_catalog.text;
    END IF;
    -- The API's login acting as itself is nobody: it may only become a principal.
    IF EXISTS (
            SELECT 1 FROM pg_catalog.pg_auth_members AS m
            WHERE m.roleid = api
              AND m.member = pg_catalog.quote_ident(SESSION_USER)::pg_catalog.regrole) THEN
        RETURN NULL;
    END IF;
    RETURN SESSION_USER::pg_catalog.text;
END
$$;

CREATE OR REPLACE FUNCTION qinglong.acting_principal() RETURNS pg_catalog.text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    acting pg_catalog.text := qinglong.acting_role();
BEGIN
    IF acting IS DISTINCT FROM SESSION_USER::pg_catalog.text THEN
        -- A principal role's name without its prefix (`shop_p_alice` → `alice`); NULL stays.
        RETURN pg_catalog.substr(acting, pg_catalog.length(
            pg_catalog.regexp_replace('qinglong_api', 'api$', 'p_')) OPERATOR(pg_catalog.+) 1);
    END IF;
    RETURN acting;
END
$$;
