"""What each tenant used: requests, tokens, device time and cache hits, counted per minute
in Redis as replies go out (``meter``) and moved to the SQL store by ``headrace.jobs.usage``."""
