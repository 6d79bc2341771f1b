"""Wire contracts: messages, error codes, topic names and buckets. JSON on the wire.

The public names are re-exported once, from ``headrace`` itself."""
