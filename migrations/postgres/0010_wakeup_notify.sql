-- Wake-up on submit: every replica LISTENs on `qinglong_dispatch_due` on a
-- connection of its own and ticks at once when notified, instead of waiting for its cadence.
-- The database notifies, so every path that makes an execution due now is covered, whoever
-- wrote it: a consumed approval inserts the execution pending@v0, and a shutdown yield puts a
-- claimed but unstarted one back to pending for another replica to take. NOTIFY is delivered
-- only at commit (a rolled-back consume wakes nobody) and identical notifications of one
-- transaction are sent once, so a submit of many approvals is one wake-up.
-- Retries and expired leases become due later, not now: the cadence finds those.
--
-- Amended in place: every function pins pg_temp last (migration 0011 says why). A
-- database that applied the first text of this file matches this checksum:
-- amends checksum b2a4cd9c505d464dbd55d7e6a313a56dfc5826c68b1e2a18c143908c45c818a4
-- Amended again, to point its comments at docs/ (the SQL is unchanged):
-- amends checksum f9d0dec4efd484b2b559abb93c5a82a0436fa3e20de001de8c2522eba5a86d38

CREATE FUNCTION qinglong.notify_dispatch_due() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_catalog.pg_notify('qinglong_dispatch_due', '');
    RETURN NULL;
END
$$;

-- Per statement: an INSERT … SELECT of many rows notifies once, not once a row.
CREATE TRIGGER approved_action_dispatch_executions_due_insert
    AFTER INSERT ON qinglong.approved_action_dispatch_executions
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.notify_dispatch_due();

-- Per row, filtered by WHEN: claims, starts and completions (the hot path) never call the
-- function; only a row that becomes pending (a yield) does.
CREATE TRIGGER approved_action_dispatch_executions_due_yield
    AFTER UPDATE ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW
    WHEN (NEW.status = 'pending' AND OLD.status IS DISTINCT FROM 'pending')
    EXECUTE FUNCTION qinglong.notify_dispatch_due();
