-- The database clock (`qinglong.db_now_ms()`, migration 0011) as PL/pgSQL: the same value,
-- for less. A SQL function with a SET clause is never inlined and PostgreSQL plans its body
-- again at every call from a new statement, so a submit of one plan spent some 55 us of its
-- server time on its four calls; PL/pgSQL keeps the expression's plan for the session
-- (docs/performance.md#submit).
CREATE OR REPLACE FUNCTION qinglong.db_now_ms() RETURNS pg_catalog.int8
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (pg_catalog.date_part('epoch', pg_catalog.clock_timestamp())
        OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8;
END
$$;
