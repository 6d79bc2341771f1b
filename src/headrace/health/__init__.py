"""Health of a long-running process: the readiness handshake (``ready``)."""
