"""What happens to a run after its calls: recovery of cells a worker left, regrade (0 model calls),
re-judge children and the lineage of child runs."""
