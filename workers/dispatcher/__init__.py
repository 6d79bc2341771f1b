"""The dispatcher: bucket topics in, batches out to the Celery queues.

Every module here is pure policy (no client of any service: ``.importlinter`` checks it);
the IO is in ``io``.

- ``core``: every delivery rule, no IO: events in (``events``), actions out;
- ``records``, ``intake``, ``routing``, ``refusals``: records in (parsed, counted, routed,
  admitted, or answered); ``batcher``: a bucket's batches; ``offsets``: what may be
  committed; ``health``: a bucket's failing state; ``flights``, ``recovery``,
  ``redelivery``: what the core holds and when it sends again; ``observer``: the hooks
  metrics plug into;
- ``io.shell``: the process around it (``Dispatcher``): polls, feeds the core, carries out
  its actions, with the rest of ``io``.
"""
