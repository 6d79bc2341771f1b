"""Runtime plumbing shared by every process: settings, connections, the local stack, the CLI."""
