-- Schema version 1 of the shared store: tokens, brokers, sessions, grants
-- and questions. Applied once, in one transaction, under the migration lock
-- (see schema.rs); `toolgate_schema` records it. Never edit a migration that
-- has shipped: add the next one.
--
-- Times are the server's (`now()`): every broker compares leases and
-- expiries against the one clock of the store. Every row that brokers
-- follow carries a `revision` from one sequence, set by a trigger on each
-- insert and update, so a broker that reconnects reads what changed since
-- the last revision it saw. The same triggers NOTIFY one channel per table
-- with a small hint; the tables are the truth, a notification only wakes.

CREATE SEQUENCE toolgate_revision;

-- Bearer tokens: only the SHA-256 of the token is kept.
CREATE TABLE toolgate_tokens (
    id          uuid PRIMARY KEY,
    name        text NOT NULL CHECK (name <> ''),
    hash        bytea NOT NULL UNIQUE CHECK (octet_length(hash) = 32),
    role        text NOT NULL CHECK (role IN ('agent', 'approver', 'observer', 'admin')),
    project     text CHECK (project <> ''),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz,
    revoked_at  timestamptz,
    revision    bigint NOT NULL
);
-- A name names one live token, so `tokens revoke NAME` is never ambiguous;
-- a revoked token's name may be used again.
CREATE UNIQUE INDEX toolgate_tokens_live_name ON toolgate_tokens (name) WHERE revoked_at IS NULL;

-- The brokers sharing the store. A broker renews its lease; once it has
-- lapsed, any broker may cancel the questions it held.
CREATE TABLE toolgate_brokers (
    id          uuid PRIMARY KEY,
    host        text NOT NULL,
    pid         integer NOT NULL,
    version     text NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    lease_until timestamptz NOT NULL
);

-- Sessions, per project root: what the state directory keeps of one
-- (parent, own mode, narrowing, started) and whether it is closed.
CREATE TABLE toolgate_sessions (
    project     text NOT NULL,
    session_id  text NOT NULL,
    parent_id   text,
    mode        text,
    permissions jsonb,
    started     boolean NOT NULL DEFAULT false,
    closed      text CHECK (closed IN ('ended', 'refused')),
    closed_at   timestamptz,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    revision    bigint NOT NULL,
    PRIMARY KEY (project, session_id),
    CHECK ((closed IS NULL) = (closed_at IS NULL))
);

-- Questions put to approvers. `state` moves once, from open to answered or
-- cancelled, by a conditional update (`WHERE state = 'open'`): the first
-- answer wins on every broker, and a late one changes nothing.
CREATE TABLE toolgate_questions (
    id           uuid PRIMARY KEY,
    broker_id    uuid NOT NULL,
    project      text NOT NULL,
    session_id   text NOT NULL,
    lease_until  timestamptz NOT NULL,
    state        text NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'answered', 'cancelled')),
    request      jsonb NOT NULL,
    answer       jsonb,
    answered_by  text,
    answered_at  timestamptz,
    cancelled    text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    revision     bigint NOT NULL,
    CHECK ((state = 'answered') = (answer IS NOT NULL AND answered_by IS NOT NULL AND answered_at IS NOT NULL)),
    CHECK ((state = 'cancelled') = (cancelled IS NOT NULL))
);
CREATE INDEX toolgate_questions_open ON toolgate_questions (lease_until) WHERE state = 'open';
CREATE INDEX toolgate_questions_revision ON toolgate_questions (revision);

-- Grants (`always` answers), per project root. A revoked grant stays, with
-- `revoked_at`, so brokers that held it learn of the revocation.
CREATE TABLE toolgate_grants (
    id          text PRIMARY KEY CHECK (id <> ''),
    project     text NOT NULL,
    session_id  text NOT NULL,
    scope       text NOT NULL CHECK (scope IN ('project', 'session')),
    permission  text NOT NULL,
    pattern     text NOT NULL,
    literal     integer NOT NULL CHECK (literal >= 0),
    plan_only   boolean NOT NULL DEFAULT false,
    question_id uuid REFERENCES toolgate_questions (id),
    made_by     text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz,
    revoked_at  timestamptz,
    revoked_by  text,
    revision    bigint NOT NULL
);
CREATE INDEX toolgate_grants_project ON toolgate_grants (project) WHERE revoked_at IS NULL;
CREATE INDEX toolgate_grants_revision ON toolgate_grants (revision);
CREATE INDEX toolgate_sessions_revision ON toolgate_sessions (revision);

-- Each insert and update takes the next revision.
CREATE FUNCTION toolgate_next_revision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.revision := nextval('toolgate_revision');
    RETURN NEW;
END
$$;

-- Each change wakes the brokers listening on the table's channel: the
-- channel is the table's name, the payload `{"revision":N}` a hint only.
CREATE FUNCTION toolgate_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_NAME, json_build_object('revision', NEW.revision)::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER toolgate_tokens_revision BEFORE INSERT OR UPDATE ON toolgate_tokens
    FOR EACH ROW EXECUTE FUNCTION toolgate_next_revision();
CREATE TRIGGER toolgate_sessions_revision BEFORE INSERT OR UPDATE ON toolgate_sessions
    FOR EACH ROW EXECUTE FUNCTION toolgate_next_revision();
CREATE TRIGGER toolgate_questions_revision BEFORE INSERT OR UPDATE ON toolgate_questions
    FOR EACH ROW EXECUTE FUNCTION toolgate_next_revision();
CREATE TRIGGER toolgate_grants_revision BEFORE INSERT OR UPDATE ON toolgate_grants
    FOR EACH ROW EXECUTE FUNCTION toolgate_next_revision();

CREATE TRIGGER toolgate_tokens_notify AFTER INSERT OR UPDATE ON toolgate_tokens
    FOR EACH ROW EXECUTE FUNCTION toolgate_notify();
CREATE TRIGGER toolgate_sessions_notify AFTER INSERT OR UPDATE ON toolgate_sessions
    FOR EACH ROW EXECUTE FUNCTION toolgate_notify();
CREATE TRIGGER toolgate_questions_notify AFTER INSERT OR UPDATE ON toolgate_questions
    FOR EACH ROW EXECUTE FUNCTION toolgate_notify();
CREATE TRIGGER toolgate_grants_notify AFTER INSERT OR UPDATE ON toolgate_grants
    FOR EACH ROW EXECUTE FUNCTION toolgate_notify();
