"""The dispatcher: bucket topics in, batches out to the Celery queues.

- ``core``: every delivery rule, no IO: events in (``events``), actions out;
- ``flights``, ``redelivery``, ``observer``: what the core holds, when it sends again, and
  the hooks metrics plug into;
- ``shell``: the process around it (``Dispatcher``): polls, feeds the core, carries out its
  actions, with ``answers`` (error replies), ``settling`` (reply-topic scans off the poll
  thread), ``control`` (cancellations) and ``metrics`` (Prometheus).
"""
