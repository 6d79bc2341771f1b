"""Conversation sessions: history kept in tiers (L1 in process, Redis, S3 zstd once idle),
one version per session, compare-and-set writes."""
