"""The spend ledger: one row per finished request, durable in PostgreSQL (issue 43; docs/design/029).

model.py      SpendRow: the row, and its compact encoding in the spool
config.py     LedgerConfig: the policy's `ledger` section
spool.py      Spool: the buffer between replicas and PostgreSQL (RedisSpool: a stream shared by every
              replica; MemorySpool: one process)
writer.py     Ledger: `record` on the hot path (a deque append), the flush task (memory -> spool),
              the drainer (spool -> PostgreSQL, retention)
store.py      SpendStore: asyncpg, idempotent batch writes, migrations under an advisory lock,
              retention, the audit log; `database_url` (LLMGW_DATABASE_URL / _FILE)
report.py     spend_report: totals by org, app, key, tag, user, alias, pool, per day or month
cli.py        `llmgw db migrate`, `llmgw spend`
migrations/   NNN_name.sql, applied in order once each
"""
