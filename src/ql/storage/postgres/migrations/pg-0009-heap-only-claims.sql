-- Claims as heap-only updates. A claim writes the claim fence, the state version and
-- updated_at_ms, none of which any index covers once the index of live claims by expiry is gone;
-- with free room on each page PostgreSQL then keeps the new row version on the same page and
-- adds no index entry, so a burst of claims no longer grows every index of the table. The
-- coordinator's "when does the next claim free up" reads the due rows through
-- trigger_schedules_due instead (a live claim only ever sits on a due row). Pages written from
-- now on keep 30% free for these updates.

DROP INDEX ql3.trigger_schedules_claims;
ALTER TABLE ql3.trigger_schedules SET (fillfactor = 70);
