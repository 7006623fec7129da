"""The policy's `ledger` section: the spend ledger in PostgreSQL (docs/design/029).

```yaml
ledger:
  enabled: true            # also needs LLMGW_DATABASE_URL (or LLMGW_DATABASE_URL_FILE)
  retention_days: 400      # older rows are deleted by the drainer, a bounded batch a minute
  batch_rows: 500          # rows per INSERT batch
  flush_ms: 200            # a replica hands its buffered rows to the spool at least this often
  memory_rows: 50000       # rows a replica holds while the spool is unreachable (beyond: dropped, counted)
  spool_max_rows: 2000000  # the shared Redis spool's bound (~170 bytes a row in Redis)
  migrate_on_start: true   # the drainer applies the schema migrations before its first write
```

Frozen, unknown keys rejected, like every section of `gateway.config`. Imports nothing of the gateway, so
`gateway.config` can include it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["LedgerConfig"]


class LedgerConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(False, description="write one row per finished request to PostgreSQL")
    retention_days: int = Field(
        400, ge=1, le=36_500, description="rows older than this are deleted (in bounded batches)"
    )
    batch_rows: int = Field(500, ge=1, le=10_000, description="rows per INSERT batch")
    flush_ms: int = Field(
        200,
        ge=10,
        le=60_000,
        description="a replica hands its buffered rows to the spool at least this often",
    )
    memory_rows: int = Field(
        50_000, ge=1, description="in-process buffer bound: rows waiting for the spool (beyond: dropped)"
    )
    spool_max_rows: int = Field(
        2_000_000, ge=1, description="bound of the shared spool (Redis stream) of rows waiting for PostgreSQL"
    )
    migrate_on_start: bool = Field(True, description="apply the schema migrations before the first write")

    @model_validator(mode="after")
    def _batch_fits(self) -> LedgerConfig:
        # A batch larger than the spool could never be read whole; larger than memory, never be flushed whole.
        if self.batch_rows > min(self.memory_rows, self.spool_max_rows):
            raise ValueError(
                f"batch_rows ({self.batch_rows}) must not exceed memory_rows ({self.memory_rows}) "
                f"or spool_max_rows ({self.spool_max_rows})"
            )
        return self
