-- Subscriptions by target prefix (docs/notifications.md#subscriptions), as the PostgreSQL
-- schema has them.
-- 1. A subscription may name a target prefix, as an approval policy may (migration 0032): 1 to
--    128 printable ASCII characters, no space, no wildcard. It hears an event whose target
--    begins with it, byte for byte; an event without a target is not heard by it. A
--    subscription without one hears any target, and events without one.
-- 2. The event's target is the database's, never a caller's: the deliverer's reading of the
--    outbox joins it from the plan (an approval's events, through the request) or the dispatch
--    (the rest); neither ever changes.

ALTER TABLE notification_subscriptions ADD COLUMN target_prefix TEXT
    CONSTRAINT notification_subscriptions_target_prefix CHECK (
        target_prefix IS NULL OR (
            typeof(target_prefix) = 'text'
            AND length(target_prefix) BETWEEN 1 AND 128
            AND target_prefix NOT GLOB '*[^!-~]*'
            AND instr(target_prefix, '*') = 0 AND instr(target_prefix, '?') = 0
            AND instr(target_prefix, '%') = 0));
