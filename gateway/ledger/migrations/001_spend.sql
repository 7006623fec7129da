-- The spend ledger: one row per finished request (gateway/ledger/store.py; docs/design/029).
-- request_id is the gateway's x-request-id: a row written twice (a retried batch, a row claimed from a
-- replica that died after writing it) is kept once (INSERT ... ON CONFLICT DO NOTHING).
CREATE TABLE llmgw_spend (
    request_id     text PRIMARY KEY,
    at             timestamptz NOT NULL,
    org            text NOT NULL,
    app            text NOT NULL,
    key_id         text NOT NULL,
    tags           text[] NOT NULL DEFAULT '{}',
    end_user       text,
    alias          text NOT NULL,
    pool           text NOT NULL,
    adapter        text,
    tier           text,
    tokens_in      bigint NOT NULL,
    tokens_out     bigint NOT NULL,
    tokens_cached  bigint NOT NULL,
    cost_micro_usd bigint NOT NULL,
    status         integer NOT NULL,
    cache_hit      boolean NOT NULL
);

-- Reports and retention read by time; most reports are one org's.
CREATE INDEX llmgw_spend_at ON llmgw_spend (at);
CREATE INDEX llmgw_spend_org_at ON llmgw_spend (org, at);

-- When a periodic job (retention) last ran on any replica: one replica wins each period.
CREATE TABLE llmgw_ledger_jobs (
    name     text PRIMARY KEY,
    last_run timestamptz NOT NULL
);
