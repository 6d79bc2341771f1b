"""The dispatcher's IO: everything in it talks to a service or a thread; everything in the
package above it is pure policy (checked by the import contract in ``.importlinter``).

- ``shell``: the process (``Dispatcher``): polls, feeds the core, carries out its actions;
- ``answers`` (error replies and dead letters), ``settling`` (reply-topic scans off the poll
  thread), ``control`` (cancellations), ``cache_rung`` (the ladder's cache lookups),
  ``model_watch`` (the served version and its traffic policy), ``lag`` (the backlog
  published for scaling), ``metrics`` (Prometheus), ``loop_watch`` (the loop's own watch).
"""
