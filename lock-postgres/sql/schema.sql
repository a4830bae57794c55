-- verrou's tables for PostgreSQL (crate lock-postgres), for the default
-- schema "verrou". Safe to run again (IF NOT EXISTS / OR REPLACE). To use
-- another schema, replace every "verrou" (with its quotes) by your quoted
-- schema name, or take the text from `lock_postgres::schema_sql(name)`.
--
-- Every expiry is the server's clock_timestamp(): client clocks never count.

CREATE SCHEMA IF NOT EXISTS "verrou";

-- Fencing tokens and election terms: a sequence only grows (values taken by
-- a failed attempt leave gaps, which fencing does not mind). It starts at
-- the server's time in microseconds, so a schema dropped and created again
-- issues tokens above the old ones (unless those were drawn faster than a
-- million a second on average, far beyond what one server grants).
DO $$ BEGIN
    IF to_regclass('"verrou".fence_seq') IS NULL THEN
        EXECUTE format('CREATE SEQUENCE "verrou".fence_seq START WITH %s',
            (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    END IF;
END $$;

-- One row per lock key: the holder's 16-byte token, its fencing token and
-- its expiry. An expired row is free; the next acquire takes it over.
CREATE TABLE IF NOT EXISTS "verrou".locks (
    key        text PRIMARY KEY,
    owner      bytea NOT NULL,
    fence      bigint NOT NULL,
    expires_at timestamptz NOT NULL
);
-- `waited`: a waiter found the lease held (or its holder had waited for the
-- key), so the release wakes the waiters; a release nobody waits for sends
-- no notification (a commit that notifies holds a database-wide lock while
-- it flushes, so every notifying release queues behind the others).
ALTER TABLE "verrou".locks ADD COLUMN IF NOT EXISTS waited boolean NOT NULL DEFAULT false;

-- Fair (FIFO) mode: waiters of a key, in ticket order; an entry lives until
-- its expiry (the waiter's claim after its last attempt).
CREATE TABLE IF NOT EXISTS "verrou".queue (
    key        text NOT NULL,
    waiter     bytea NOT NULL,
    ticket     bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (key, waiter)
);
CREATE INDEX IF NOT EXISTS queue_by_ticket ON "verrou".queue (key, ticket);
-- `inbox`: the waiter's own notification channel (its process listens on
-- it), NULL without notifications: a release names the head of the queue
-- to its process alone, instead of waking every listening process.
ALTER TABLE "verrou".queue ADD COLUMN IF NOT EXISTS inbox text;

-- The versioned store: versions come from a sequence, so a key deleted and
-- created again never gets a version it had before; it starts at the
-- server's time in microseconds, as fence_seq, so a schema created again
-- does not repeat versions either.
DO $$ BEGIN
    IF to_regclass('"verrou".version_seq') IS NULL THEN
        EXECUTE format('CREATE SEQUENCE "verrou".version_seq START WITH %s',
            (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    END IF;
END $$;
CREATE TABLE IF NOT EXISTS "verrou".kv (
    key        text PRIMARY KEY,
    value      bytea NOT NULL,
    version    bigint NOT NULL,
    expires_at timestamptz -- NULL: no expiry
);

-- Compare-and-set: kind 0 written (version), 1 conflict (current value and
-- version, read after the failed update, so never older than it), 2 missing.
-- ttl_ms: NULL keeps the expiry, -1 removes it, else milliseconds from now.
CREATE OR REPLACE FUNCTION "verrou".kv_cas(k text, expected bigint, v bytea, ttl_ms bigint)
RETURNS TABLE (kind int, version bigint, value bytea) LANGUAGE plpgsql AS $$
BEGIN
    UPDATE "verrou".kv AS t
       SET value = v,
           version = nextval('"verrou".version_seq'),
           expires_at = CASE WHEN ttl_ms IS NULL THEN t.expires_at
                             WHEN ttl_ms < 0 THEN NULL
                             ELSE clock_timestamp() + ttl_ms * interval '1 millisecond' END
     WHERE t.key = k AND t.version = expected
       AND (t.expires_at IS NULL OR t.expires_at > clock_timestamp())
    RETURNING 0, t.version, NULL::bytea INTO kind, version, value;
    IF FOUND THEN RETURN NEXT; RETURN; END IF;
    SELECT 1, t.version, t.value INTO kind, version, value FROM "verrou".kv AS t
     WHERE t.key = k AND (t.expires_at IS NULL OR t.expires_at > clock_timestamp());
    IF NOT FOUND THEN kind := 2; version := NULL; value := NULL; END IF;
    RETURN NEXT;
END $$;

-- Delete if at version: kind 0 deleted, 1 conflict (current version), 2 missing.
CREATE OR REPLACE FUNCTION "verrou".kv_delete(k text, expected bigint)
RETURNS TABLE (kind int, version bigint) LANGUAGE plpgsql AS $$
DECLARE live boolean;
BEGIN
    DELETE FROM "verrou".kv AS t WHERE t.key = k AND t.version = expected
    RETURNING t.expires_at IS NULL OR t.expires_at > clock_timestamp() INTO live;
    IF FOUND AND live THEN kind := 0; version := expected; RETURN NEXT; RETURN; END IF;
    SELECT 1, t.version INTO kind, version FROM "verrou".kv AS t
     WHERE t.key = k AND (t.expires_at IS NULL OR t.expires_at > clock_timestamp());
    IF NOT FOUND THEN kind := 2; version := NULL; END IF;
    RETURN NEXT;
END $$;

-- Fair (FIFO) acquire: keep the waiter's queue entry alive for claim_ms (it
-- keeps its ticket across attempts), drop dead entries, and take the key
-- (as the plain acquire does) only when the waiter heads the queue of live
-- waiters. Answers the fencing token when taken, else the holder's
-- remaining milliseconds (NULL when the key is free but another waiter is
-- ahead). `box`: the waiter's inbox (see the queue), or NULL. (An older
-- schema's five-argument acquire_fair is left as it was, for clients of
-- that release.)
CREATE OR REPLACE FUNCTION "verrou".acquire_fair(k text, tok bytea, ttl_ms bigint, w bytea, claim_ms bigint, box text)
RETURNS TABLE (fence bigint, retry_ms bigint) LANGUAGE plpgsql AS $$
DECLARE my_ticket bigint;
BEGIN
    INSERT INTO "verrou".queue AS q (key, waiter, ticket, expires_at, inbox)
    VALUES (k, w, nextval('"verrou".fence_seq'), clock_timestamp() + claim_ms * interval '1 millisecond', box)
    ON CONFLICT (key, waiter) DO UPDATE SET expires_at = excluded.expires_at, inbox = excluded.inbox
    RETURNING q.ticket INTO my_ticket;
    DELETE FROM "verrou".queue AS q WHERE q.key = k AND q.expires_at <= clock_timestamp();
    IF NOT EXISTS (SELECT 1 FROM "verrou".queue AS q WHERE q.key = k AND q.ticket < my_ticket) THEN
        -- The token drawn under a transaction lock on the key (see
        -- fence_sql in src/schema.rs): tokens of a key grow in grant order.
        INSERT INTO "verrou".locks AS l (key, owner, fence, expires_at)
        VALUES (k, tok,
            CASE WHEN pg_advisory_xact_lock(hashtext('"verrou".locks'), hashtext(k))::text IS NOT NULL
            THEN nextval('"verrou".fence_seq') END,
            clock_timestamp() + ttl_ms * interval '1 millisecond')
        ON CONFLICT (key) DO UPDATE SET owner = excluded.owner,
            fence = CASE WHEN l.owner = excluded.owner THEN l.fence ELSE excluded.fence END,
            expires_at = excluded.expires_at
        WHERE l.expires_at <= clock_timestamp() OR l.owner = excluded.owner
        RETURNING l.fence INTO fence;
        IF FOUND THEN
            DELETE FROM "verrou".queue AS q WHERE q.key = k AND q.waiter = w;
            retry_ms := NULL;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    -- Not granted: the transaction only kept the waiter's entry, which
    -- orders waiters (a crash that loses it costs its place, never
    -- exclusion), so it commits without waiting for its flush.
    PERFORM set_config('synchronous_commit', 'off', true);
    fence := NULL;
    IF (SELECT count(*) FROM (SELECT 1 FROM "verrou".queue AS q
            WHERE q.key = k AND q.ticket < my_ticket LIMIT 2) AS ahead) < 2 THEN
        -- The head, or right behind it, and the key held: 0 tells the
        -- caller to poll on its backoff (nothing may wake it) rather than
        -- wait out the holder. Behind the head too: once the head takes
        -- the key, nothing tells the next one that it heads the queue.
        retry_ms := 0;
    ELSE
        SELECT GREATEST(1, CEIL(EXTRACT(EPOCH FROM h.expires_at - clock_timestamp()) * 1000))::int8 INTO retry_ms
          FROM "verrou".locks AS h WHERE h.key = k AND h.expires_at > clock_timestamp();
    END IF;
    RETURN NEXT;
END $$;

-- Acquire with release notifications on: the plain acquire (lease_sql in
-- src/schema.rs) that also marks a lease held by another as `waited`, so
-- that its release wakes this waiter. `had_waited`: the caller waited for k
-- lately, so others may still wait: its own lease starts marked. A lease
-- seen held by another (in this statement's snapshot) is answered without
-- locking its row: waiters of a hot key do not queue on it, nor on the
-- key's fencing lock. The mark is a hint (a lost one costs a waiter its
-- timer, never exclusion), and an attempt that was refused grants nothing,
-- so it commits without waiting for its flush. Answers as the plain
-- acquire: (fence, NULL) taken, (NULL, the holder's remaining ms) held, no
-- row when the holder just went away.
CREATE OR REPLACE FUNCTION "verrou".acquire_marking(k text, tok bytea, ttl_ms bigint, had_waited boolean)
RETURNS TABLE (fence bigint, retry_ms bigint) LANGUAGE plpgsql AS $$
DECLARE holder bytea; held_until timestamptz; marked boolean;
BEGIN
    SELECT h.owner, h.expires_at, h.waited INTO holder, held_until, marked
      FROM "verrou".locks AS h WHERE h.key = k;
    IF NOT FOUND OR holder = tok OR held_until <= clock_timestamp() THEN
        -- The token drawn under a transaction lock on the key, as the
        -- plain acquire draws it (fence_sql in src/schema.rs).
        INSERT INTO "verrou".locks AS l (key, owner, fence, expires_at, waited)
        VALUES (k, tok,
            CASE WHEN pg_advisory_xact_lock(hashtext('"verrou".locks'), hashtext(k))::text IS NOT NULL
            THEN nextval('"verrou".fence_seq') END,
            clock_timestamp() + ttl_ms * interval '1 millisecond', had_waited)
        ON CONFLICT (key) DO UPDATE SET owner = excluded.owner,
            fence = CASE WHEN l.owner = excluded.owner THEN l.fence ELSE excluded.fence END,
            expires_at = excluded.expires_at,
            waited = l.waited OR excluded.waited
        WHERE l.expires_at <= clock_timestamp() OR l.owner = excluded.owner
        RETURNING l.fence INTO fence;
        IF FOUND THEN
            retry_ms := NULL;
            RETURN NEXT;
            RETURN;
        END IF;
        -- Taken by another since the read.
        SELECT h.expires_at, h.waited INTO held_until, marked
          FROM "verrou".locks AS h WHERE h.key = k;
        IF NOT FOUND THEN
            RETURN;
        END IF;
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    IF NOT marked THEN
        UPDATE "verrou".locks AS h SET waited = true
         WHERE h.key = k AND NOT h.waited AND h.expires_at > clock_timestamp();
    END IF;
    fence := NULL;
    retry_ms := GREATEST(0, CEIL(EXTRACT(EPOCH FROM held_until - clock_timestamp()) * 1000))::int8;
    RETURN NEXT;
END $$;

-- The payload of a broadcast release notification for key k: 'h', the hex
-- id of the live head of k's fair queue (other than `leaving`, a waiter
-- that is leaving it; NULL for none) and ':', then k; or 'k' and k when
-- nobody heads the queue. Listeners wake one plain waiter of k and the
-- named head only. PL/pgSQL keeps the query's plan for the session. (This
-- release wakes through `wake`; the statements of an earlier release's
-- clients still call this.)
CREATE OR REPLACE FUNCTION "verrou".wake_payload(k text, leaving bytea)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE head bytea;
BEGIN
    SELECT q.waiter INTO head FROM "verrou".queue AS q
     WHERE q.key = k AND q.expires_at > clock_timestamp() AND q.waiter IS DISTINCT FROM leaving
     ORDER BY q.ticket LIMIT 1;
    IF FOUND THEN RETURN 'h' || encode(head, 'hex') || ':' || k; END IF;
    RETURN 'k' || k;
END $$;

-- Wakes k's waiters: the live head of k's fair queue (other than
-- `leaving`, a waiter that is leaving it), named in its inbox alone when it
-- has one ('h', its hex id, ':', k), else on `channel` with the plain
-- waiters (wake_payload); and, when `plain`, one plain waiter of k in every
-- listening process ('k' and k on `channel`).
CREATE OR REPLACE FUNCTION "verrou".wake(k text, leaving bytea, channel text, plain boolean)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE head bytea; box text;
BEGIN
    SELECT q.waiter, q.inbox INTO head, box FROM "verrou".queue AS q
     WHERE q.key = k AND q.expires_at > clock_timestamp() AND q.waiter IS DISTINCT FROM leaving
     ORDER BY q.ticket LIMIT 1;
    IF FOUND AND box IS NOT NULL THEN
        PERFORM pg_notify(box, 'h' || encode(head, 'hex') || ':' || k);
        IF plain THEN
            PERFORM pg_notify(channel, 'k' || k);
        END IF;
    ELSIF FOUND THEN
        PERFORM pg_notify(channel, 'h' || encode(head, 'hex') || ':' || k);
    ELSIF plain THEN
        PERFORM pg_notify(channel, 'k' || k);
    END IF;
END $$;

-- Release with notifications: delete k if tok holds it and, when that freed
-- a live lease that someone waits for (marked `waited`, or a live entry in
-- k's fair queue), wake them (wake). 0 released, 1 held by
-- another, 2 missing (our own expired row is deleted too, but answers
-- missing), as the plain release statement, and like it committed without
-- waiting for its flush (lease_sql in src/schema.rs says why that is safe).
CREATE OR REPLACE FUNCTION "verrou".release_notify(k text, tok bytea, channel text)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE live boolean; wanted boolean;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    DELETE FROM "verrou".locks AS l WHERE l.key = k AND l.owner = tok
    RETURNING l.expires_at > clock_timestamp(), l.waited INTO live, wanted;
    IF FOUND THEN
        IF live THEN
            PERFORM "verrou".wake(k, NULL, channel, wanted);
            RETURN 0;
        END IF;
        RETURN 2;
    END IF;
    IF EXISTS (SELECT 1 FROM "verrou".locks AS l WHERE l.key = k AND l.expires_at > clock_timestamp()) THEN
        RETURN 1;
    END IF;
    RETURN 2;
END $$;

-- Batched renewal: keys[i] renewed for owners[i] when it holds a live lease
-- on it; one answer per item, in order: 0 renewed, 1 held by another, 2
-- missing (as the single renewal). One primary-key lookup per item, whatever
-- the statistics: after a burst of locks came and went, autovacuum can
-- analyze the table while it holds a few rows but keeps its pages, and a
-- join of the batch with the table was then planned as a nested loop
-- comparing every row with every key until the next analyze. Sequential
-- scans are off inside, so no cached plan scans the table per key either.
CREATE OR REPLACE FUNCTION "verrou".renew_many(keys text[], owners bytea[], ttl_ms bigint)
RETURNS SETOF int LANGUAGE plpgsql SET enable_seqscan = off AS $$
BEGIN
    FOR i IN 1 .. coalesce(array_length(keys, 1), 0) LOOP
        UPDATE "verrou".locks AS l SET expires_at = clock_timestamp() + ttl_ms * interval '1 millisecond'
         WHERE l.key = keys[i] AND l.owner = owners[i] AND l.expires_at > clock_timestamp();
        IF FOUND THEN
            RETURN NEXT 0;
        ELSIF EXISTS (SELECT 1 FROM "verrou".locks AS l
                       WHERE l.key = keys[i] AND l.owner <> owners[i] AND l.expires_at > clock_timestamp()) THEN
            RETURN NEXT 1;
        ELSE
            RETURN NEXT 2;
        END IF;
    END LOOP;
END $$;
