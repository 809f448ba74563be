"""The ledger's rules (issue 36 item 1): the event stream, usage corrections, idempotency keys, the
accounting contract (prices, usage, worst-case cost), the reads every layer shares (selectors), who
may read a run (permissions) and the hooks through which layers above plug into a run."""
