"""Dispatcher (policy: bucket -> batches) and Celery workers (execution: model backends)."""
