"""Reports over the ledger: the typed report and its JSON, the benchmarks' official metrics, the
reconciliation of usage (effective usage and cost), the live results, the report kept at run end
and the run export. Reached by the engine only through the hooks it is given (runs.ledger.hooks)."""
