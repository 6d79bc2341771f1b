"""The dispatcher: bucket topics in, batches out to the Celery queues.

- ``core``: every delivery rule, no IO: events in (``events``), actions out;
- ``records``, ``routing``, ``refusals``: records in (counted, routed, admitted, or
  answered); ``flights``, ``recovery``, ``redelivery``: what the core holds and when it
  sends again; ``observer``: the hooks metrics plug into;
- ``shell``: the process around it (``Dispatcher``): polls, feeds the core, carries out its
  actions, with ``answers`` (error replies), ``settling`` (reply-topic scans off the poll
  thread), ``control`` (cancellations) and ``metrics`` (Prometheus).
"""
