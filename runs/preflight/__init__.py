"""A target's wire checked before a run: the probe calls, their findings (usage, streaming, cache
details) and what the plan review warns about."""
