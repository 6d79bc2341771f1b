"""Health of a long-running process: the readiness handshake (``ready``), and whether the
services a command needs can be reached (``reach``)."""
