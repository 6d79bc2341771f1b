"""Reading what the pipeline produces: replies for SDK futures and streaming users, and
cache invalidation events."""
