-- The other lock kinds (semaphores, read-write locks, multi-key locks,
-- leader election), same schema, same rules: expiries from the server's
-- clock_timestamp(), fencing tokens and terms from "verrou".fence_seq.

-- Names of semaphores and read-write locks: one row each, locked FOR
-- UPDATE by every decision about the name, so concurrent acquires of one
-- name are decided one after the other. `size` is a semaphore's size
-- (fixed while any permit is held).
CREATE TABLE IF NOT EXISTS "verrou".names (
    kind  "char" NOT NULL,
    name  text NOT NULL,
    size  int NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, name)
);

-- Holders: a semaphore's (kind 's', with their permits) and a read-write
-- lock's (kind 'w'; role 'r' reader, 'u' the upgradeable reader, 'w'
-- writer, 'i' a waiting writer's or upgrade's intent).
CREATE TABLE IF NOT EXISTS "verrou".holders (
    kind       "char" NOT NULL,
    name       text NOT NULL,
    holder     bytea NOT NULL,
    role       "char" NOT NULL,
    permits    int NOT NULL DEFAULT 0,
    fence      bigint NOT NULL DEFAULT 0,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (kind, name, holder, role)
);

-- Semaphore holders released while missing (a clean-up that overtook its
-- acquire): their late acquire is refused until the entry expires.
CREATE TABLE IF NOT EXISTS "verrou".gone (
    name       text NOT NULL,
    holder     bytea NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (name, holder)
);

-- Leader election: the leader's token, identity and term.
-- The same columns as "verrou".locks (fence is the term), plus identity.
CREATE TABLE IF NOT EXISTS "verrou".leaders (
    key        text PRIMARY KEY,
    owner      bytea NOT NULL,
    fence      bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    identity   bytea NOT NULL
);

-- Lock the row of (kind, name), creating it first when needed (again when
-- a release or the sweep removed it while this call waited for it). The
-- backend runs every write at READ COMMITTED, so each statement after this
-- one sees what the previous holder of the row lock committed.
CREATE OR REPLACE FUNCTION "verrou".lock_name(k "char", n text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE s int;
BEGIN
    LOOP
        INSERT INTO "verrou".names (kind, name) VALUES (k, n) ON CONFLICT DO NOTHING;
        SELECT t.size INTO s FROM "verrou".names AS t WHERE t.kind = k AND t.name = n FOR UPDATE;
        EXIT WHEN FOUND;
    END LOOP;
    DELETE FROM "verrou".holders AS h WHERE h.kind = k AND h.name = n AND h.expires_at <= clock_timestamp();
    RETURN s;
END $$;

-- Under the name's row lock: remove the name's row when nobody holds,
-- reserves or waits for it any more.
CREATE OR REPLACE FUNCTION "verrou".forget_name(k "char", n text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM "verrou".holders AS h WHERE h.kind = k AND h.name = n) THEN
        DELETE FROM "verrou".names AS t WHERE t.kind = k AND t.name = n;
    END IF;
END $$;

-- Semaphore acquire: fence when granted (or refreshed), else retry_ms, or
-- stored_size when the request's size differs from the held one.
CREATE OR REPLACE FUNCTION "verrou".sem_acquire(n text, h bytea, sz int, req int, waiting boolean, ttl_ms bigint)
RETURNS TABLE (fence bigint, retry_ms bigint, stored_size int) LANGUAGE plpgsql AS $$
DECLARE cur int; used int; rsv_holder bytea; rsv_permits int := 0;
BEGIN
    cur := "verrou".lock_name('s', n);
    -- Holders have role 's'; a waiting request that was refused leaves one
    -- reservation per name (role 'v'), which counts as taken for everyone
    -- else, so single-permit churn cannot starve a larger request.
    SELECT COALESCE(sum(t.permits), 0) INTO used FROM "verrou".holders AS t
     WHERE t.kind = 's' AND t.name = n AND t.role = 's';
    SELECT t.holder, t.permits INTO rsv_holder, rsv_permits FROM "verrou".holders AS t
     WHERE t.kind = 's' AND t.name = n AND t.role = 'v' LIMIT 1;
    IF used = 0 THEN
        UPDATE "verrou".names AS t SET size = sz WHERE t.kind = 's' AND t.name = n;
    ELSIF cur <> sz THEN
        fence := NULL; retry_ms := NULL; stored_size := cur; RETURN NEXT; RETURN;
    END IF;
    stored_size := NULL;
    UPDATE "verrou".holders AS t SET expires_at = clock_timestamp() + ttl_ms * interval '1 millisecond'
     WHERE t.kind = 's' AND t.name = n AND t.holder = h AND t.role = 's' RETURNING t.fence INTO fence;
    IF FOUND THEN retry_ms := NULL; RETURN NEXT; RETURN; END IF;
    IF used + req + (CASE WHEN rsv_holder IS NOT NULL AND rsv_holder <> h THEN COALESCE(rsv_permits, 0) ELSE 0 END) > sz THEN
        IF waiting AND (rsv_holder IS NULL OR rsv_holder = h OR COALESCE(rsv_permits, 0) < req) THEN
            -- Keep (or take over, for a larger request) the one reservation.
            DELETE FROM "verrou".holders AS t WHERE t.kind = 's' AND t.name = n AND t.role = 'v';
            INSERT INTO "verrou".holders (kind, name, holder, role, permits, expires_at)
            VALUES ('s', n, h, 'v', req, clock_timestamp() + ttl_ms * interval '1 millisecond');
        END IF;
        fence := NULL;
        SELECT GREATEST(1, CEIL(EXTRACT(EPOCH FROM min(t.expires_at) - clock_timestamp()) * 1000))::int8
          INTO retry_ms FROM "verrou".holders AS t WHERE t.kind = 's' AND t.name = n AND t.role = 's';
        retry_ms := COALESCE(retry_ms, 1);
        RETURN NEXT; RETURN;
    END IF;
    DELETE FROM "verrou".gone AS g WHERE g.expires_at <= clock_timestamp();
    IF EXISTS (SELECT 1 FROM "verrou".gone AS g WHERE g.name = n AND g.holder = h) THEN
        fence := NULL; retry_ms := 1; RETURN NEXT; RETURN;
    END IF;
    DELETE FROM "verrou".holders AS t WHERE t.kind = 's' AND t.name = n AND t.holder = h AND t.role = 'v';
    INSERT INTO "verrou".holders (kind, name, holder, role, permits, fence, expires_at)
    VALUES ('s', n, h, 's', req, nextval('"verrou".fence_seq'), clock_timestamp() + ttl_ms * interval '1 millisecond')
    RETURNING holders.fence INTO fence;
    retry_ms := NULL;
    RETURN NEXT;
END $$;

-- Semaphore release: 0 released, 2 missing (and remembered as gone).
CREATE OR REPLACE FUNCTION "verrou".sem_release(n text, h bytea, gone_ms bigint) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
    PERFORM "verrou".lock_name('s', n);
    DELETE FROM "verrou".holders AS t WHERE t.kind = 's' AND t.name = n AND t.holder = h AND t.role = 's';
    IF FOUND THEN PERFORM "verrou".forget_name('s', n); RETURN 0; END IF;
    -- A waiter giving up: its reservation goes, and its token is remembered
    -- as gone so a delayed acquire of it cannot take a permit later.
    DELETE FROM "verrou".holders AS t WHERE t.kind = 's' AND t.name = n AND t.holder = h AND t.role = 'v';
    INSERT INTO "verrou".gone (name, holder, expires_at)
    VALUES (n, h, clock_timestamp() + gone_ms * interval '1 millisecond')
    ON CONFLICT (name, holder) DO UPDATE SET expires_at = excluded.expires_at;
    PERFORM "verrou".forget_name('s', n);
    RETURN 2;
END $$;

-- Read-write release: drops the holder's hold and intent; 0 released when a
-- live hold went, else 2. It does not wait for the name's row lock (a
-- release queued behind acquires could outlive its lease): the name's row
-- goes only when that lock is free now, else the sweep takes it later.
CREATE OR REPLACE FUNCTION "verrou".rw_release(n text, h bytea) RETURNS int LANGUAGE plpgsql AS $$
DECLARE live boolean;
BEGIN
    WITH g AS (DELETE FROM "verrou".holders AS t WHERE t.kind = 'w' AND t.name = n AND t.holder = h
        RETURNING t.role, t.expires_at > clock_timestamp() AS live)
    SELECT bool_or(g.live AND g.role IN ('r', 'u', 'w')) INTO live FROM g;
    PERFORM 1 FROM "verrou".names AS t WHERE t.kind = 'w' AND t.name = n FOR UPDATE SKIP LOCKED;
    IF FOUND THEN PERFORM "verrou".forget_name('w', n); END IF;
    RETURN CASE WHEN live THEN 0 ELSE 2 END;
END $$;

-- Remove up to lim rows of each table that no longer mean anything: expired
-- locks, leaders, store keys, queue entries and gone records, and names
-- whose holders all expired (with those holders). Each row is taken with
-- SKIP LOCKED, so the sweep never waits for a decision, and a name is
-- re-checked under its row lock. Answers the number of rows removed.
CREATE OR REPLACE FUNCTION "verrou".sweep(lim int) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE total bigint := 0; c bigint; r record;
BEGIN
    DELETE FROM "verrou".locks AS l WHERE l.key IN (SELECT x.key FROM "verrou".locks AS x
        WHERE x.expires_at <= clock_timestamp() LIMIT lim FOR UPDATE SKIP LOCKED)
      AND l.expires_at <= clock_timestamp();
    GET DIAGNOSTICS c = ROW_COUNT; total := total + c;
    DELETE FROM "verrou".leaders AS l WHERE l.key IN (SELECT x.key FROM "verrou".leaders AS x
        WHERE x.expires_at <= clock_timestamp() LIMIT lim FOR UPDATE SKIP LOCKED)
      AND l.expires_at <= clock_timestamp();
    GET DIAGNOSTICS c = ROW_COUNT; total := total + c;
    DELETE FROM "verrou".kv AS t WHERE t.key IN (SELECT x.key FROM "verrou".kv AS x
        WHERE x.expires_at <= clock_timestamp() LIMIT lim FOR UPDATE SKIP LOCKED)
      AND t.expires_at <= clock_timestamp();
    GET DIAGNOSTICS c = ROW_COUNT; total := total + c;
    DELETE FROM "verrou".queue AS q WHERE (q.key, q.waiter) IN (SELECT x.key, x.waiter FROM "verrou".queue AS x
        WHERE x.expires_at <= clock_timestamp() LIMIT lim FOR UPDATE SKIP LOCKED)
      AND q.expires_at <= clock_timestamp();
    GET DIAGNOSTICS c = ROW_COUNT; total := total + c;
    DELETE FROM "verrou".gone AS g WHERE g.expires_at <= clock_timestamp();
    GET DIAGNOSTICS c = ROW_COUNT; total := total + c;
    FOR r IN SELECT t.kind, t.name FROM "verrou".names AS t
        WHERE NOT EXISTS (SELECT 1 FROM "verrou".holders AS h
            WHERE h.kind = t.kind AND h.name = t.name AND h.expires_at > clock_timestamp())
        LIMIT lim FOR UPDATE SKIP LOCKED
    LOOP
        DELETE FROM "verrou".holders AS h WHERE h.kind = r.kind AND h.name = r.name AND h.expires_at <= clock_timestamp();
        GET DIAGNOSTICS c = ROW_COUNT; total := total + c;
        IF NOT EXISTS (SELECT 1 FROM "verrou".holders AS h WHERE h.kind = r.kind AND h.name = r.name) THEN
            DELETE FROM "verrou".names AS t WHERE t.kind = r.kind AND t.name = r.name;
            total := total + 1;
        END IF;
    END LOOP;
    RETURN total;
END $$;

-- Read-write acquire (writer-preferring): fence (0) when granted, else the
-- milliseconds until the earliest blocker leaves. A refused writer that is
-- waiting leaves its intent (one at a time), which holds new readers back.
-- An upgradeable reader ('u') is a reader that excludes other upgradeable ones.
CREATE OR REPLACE FUNCTION "verrou".rw_acquire(n text, h bytea, want "char", waiting boolean, ttl_ms bigint)
RETURNS TABLE (fence bigint, retry_ms bigint) LANGUAGE plpgsql AS $$
DECLARE until timestamptz := clock_timestamp() + ttl_ms * interval '1 millisecond';
BEGIN
    PERFORM "verrou".lock_name('w', n);
    -- A holder asking again (a re-sent acquire) refreshes its lease.
    UPDATE "verrou".holders AS t SET expires_at = until
     WHERE t.kind = 'w' AND t.name = n AND t.holder = h AND t.role = want;
    IF FOUND THEN
        -- A writer's re-sent acquire gets a fresh (higher) token: still above
        -- every earlier writer's.
        fence := CASE WHEN want = 'w' THEN nextval('"verrou".fence_seq') ELSE 0 END;
        retry_ms := NULL; RETURN NEXT; RETURN;
    END IF;
    IF want IN ('r', 'u') THEN
        SELECT min(t.expires_at) INTO until FROM "verrou".holders AS t
         WHERE t.kind = 'w' AND t.name = n
           AND (t.role = 'w' OR (t.role = 'i' AND t.holder <> h) OR (want = 'u' AND t.role = 'u'));
    ELSE
        SELECT min(t.expires_at) INTO until FROM "verrou".holders AS t
         WHERE t.kind = 'w' AND t.name = n AND t.role IN ('r', 'u', 'w');
        IF until IS NOT NULL AND waiting AND NOT EXISTS (SELECT 1 FROM "verrou".holders AS t
             WHERE t.kind = 'w' AND t.name = n AND t.role = 'i' AND t.holder <> h) THEN
            INSERT INTO "verrou".holders (kind, name, holder, role, expires_at)
            VALUES ('w', n, h, 'i', clock_timestamp() + ttl_ms * interval '1 millisecond')
            ON CONFLICT (kind, name, holder, role) DO UPDATE SET expires_at = excluded.expires_at;
        END IF;
    END IF;
    IF until IS NOT NULL THEN
        fence := NULL;
        retry_ms := GREATEST(1, CEIL(EXTRACT(EPOCH FROM until - clock_timestamp()) * 1000))::int8;
        RETURN NEXT; RETURN;
    END IF;
    IF want = 'w' THEN
        DELETE FROM "verrou".holders AS t WHERE t.kind = 'w' AND t.name = n AND t.role = 'i';
    END IF;
    INSERT INTO "verrou".holders (kind, name, holder, role, expires_at)
    VALUES ('w', n, h, want, clock_timestamp() + ttl_ms * interval '1 millisecond');
    -- Writers fence (from the locks' sequence, so tokens only grow); readers do not.
    fence := CASE WHEN want = 'w' THEN nextval('"verrou".fence_seq') ELSE 0 END;
    retry_ms := NULL;
    RETURN NEXT;
END $$;

-- Multi-key acquire: every key (the plain locks' rows, in sorted order) or
-- none; answers each key's fencing token, or the milliseconds until the
-- first key found held is free.
CREATE OR REPLACE FUNCTION "verrou".multi_acquire(ks text[], tok bytea, ttl_ms bigint)
RETURNS TABLE (fence bigint, retry_ms bigint) LANGUAGE plpgsql AS $$
DECLARE k text; f bigint; top bigint := 0; blocked text;
BEGIN
    BEGIN
        FOR k IN SELECT DISTINCT x FROM unnest(ks) AS x ORDER BY x LOOP
            -- Each key's token drawn under a transaction lock on it (see
            -- fence_sql in src/schema.rs), taken in sorted key order.
            INSERT INTO "verrou".locks AS l (key, owner, fence, expires_at)
            VALUES (k, tok,
                CASE WHEN pg_advisory_xact_lock(hashtext('"verrou".locks'), hashtext(k))::text IS NOT NULL
                THEN nextval('"verrou".fence_seq') END,
                clock_timestamp() + ttl_ms * interval '1 millisecond')
            ON CONFLICT (key) DO UPDATE SET owner = excluded.owner,
                fence = CASE WHEN l.owner = excluded.owner THEN l.fence ELSE excluded.fence END,
                expires_at = excluded.expires_at
            WHERE l.expires_at <= clock_timestamp() OR l.owner = excluded.owner
            RETURNING l.fence INTO f;
            top := GREATEST(top, f);
            IF NOT FOUND THEN
                blocked := k;
                RAISE EXCEPTION 'held' USING ERRCODE = 'VR001';
            END IF;
        END LOOP;
    EXCEPTION WHEN SQLSTATE 'VR001' THEN
        -- Everything this call wrote is rolled back with the block.
        fence := NULL;
        SELECT GREATEST(0, CEIL(EXTRACT(EPOCH FROM l.expires_at - clock_timestamp()) * 1000))::int8
          INTO retry_ms FROM "verrou".locks AS l WHERE l.key = blocked;
        RETURN NEXT; RETURN;
    END;
    -- The set's token: the highest of its keys' tokens, so it is above every
    -- earlier token of each key (the sequence only grows).
    fence := top; retry_ms := NULL;
    RETURN NEXT;
END $$;

-- Upgrade (want 'w': the holder's upgradeable read becomes the write once no
-- other reader is inside; refused meanwhile, leaving its intent as a waiting
-- writer does) or downgrade (want 'u': its write becomes the upgradeable
-- read at once). fence (0 for a downgrade) when done or already done, else
-- retry_ms; retry_ms -1 when the holder holds neither (nothing written).
CREATE OR REPLACE FUNCTION "verrou".rw_convert(n text, h bytea, want "char", ttl_ms bigint)
RETURNS TABLE (fence bigint, retry_ms bigint) LANGUAGE plpgsql AS $$
DECLARE until timestamptz := clock_timestamp() + ttl_ms * interval '1 millisecond'; other timestamptz;
BEGIN
    PERFORM "verrou".lock_name('w', n);
    -- Already converted (a re-sent call): refreshed.
    UPDATE "verrou".holders AS t SET expires_at = until
     WHERE t.kind = 'w' AND t.name = n AND t.holder = h AND t.role = want;
    IF FOUND THEN
        fence := CASE WHEN want = 'w' THEN nextval('"verrou".fence_seq') ELSE 0 END;
        retry_ms := NULL; RETURN NEXT; RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM "verrou".holders AS t WHERE t.kind = 'w' AND t.name = n AND t.holder = h
        AND t.role = CASE WHEN want = 'w' THEN 'u' ELSE 'w' END) THEN
        fence := NULL; retry_ms := -1; RETURN NEXT; RETURN;
    END IF;
    IF want = 'w' THEN
        SELECT min(t.expires_at) INTO other FROM "verrou".holders AS t
         WHERE t.kind = 'w' AND t.name = n AND t.role IN ('r', 'u', 'w') AND t.holder <> h;
        IF other IS NOT NULL THEN
            IF NOT EXISTS (SELECT 1 FROM "verrou".holders AS t
                 WHERE t.kind = 'w' AND t.name = n AND t.role = 'i' AND t.holder <> h) THEN
                INSERT INTO "verrou".holders (kind, name, holder, role, expires_at)
                VALUES ('w', n, h, 'i', until)
                ON CONFLICT (kind, name, holder, role) DO UPDATE SET expires_at = excluded.expires_at;
            END IF;
            fence := NULL;
            retry_ms := GREATEST(1, CEIL(EXTRACT(EPOCH FROM other - clock_timestamp()) * 1000))::int8;
            RETURN NEXT; RETURN;
        END IF;
        DELETE FROM "verrou".holders AS t WHERE t.kind = 'w' AND t.name = n AND t.role = 'i';
    END IF;
    UPDATE "verrou".holders AS t SET role = want, expires_at = until
     WHERE t.kind = 'w' AND t.name = n AND t.holder = h AND t.role = CASE WHEN want = 'w' THEN 'u' ELSE 'w' END;
    fence := CASE WHEN want = 'w' THEN nextval('"verrou".fence_seq') ELSE 0 END;
    retry_ms := NULL;
    RETURN NEXT;
END $$;
