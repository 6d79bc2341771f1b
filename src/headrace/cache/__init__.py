"""The tiered result cache: L1 in-process LRU, L2 Redis, L3 S3 (zstd), with absolute, sliding
and tag expiry, and generation counters that keep invalidated results out."""
