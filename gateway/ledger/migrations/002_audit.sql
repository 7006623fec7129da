-- The audit log of admin changes (keys, budgets): who changed what, the value before and after.
CREATE TABLE llmgw_audit (
    id     bigserial PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT now(),
    actor  text NOT NULL,
    action text NOT NULL,
    target text NOT NULL,
    before jsonb,
    after  jsonb
);

CREATE INDEX llmgw_audit_target_at ON llmgw_audit (target, at);
