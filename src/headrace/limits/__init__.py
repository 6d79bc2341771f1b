"""Bounded queues and per-tenant limits: the policy (pure), its counts in Redis (``store``),
and the check before producing (``gate``)."""
