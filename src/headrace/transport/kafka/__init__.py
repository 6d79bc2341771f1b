"""The kafka-python transport (``transport.KafkaTransport``) and every workaround for
kafka-python 3.0.12 and for tansu, the local stack's broker, in one place.

- ``clients``: client options from the settings (group timeouts by broker flavor);
- ``reader`` / ``delivery``: ``Reader`` and ``Writer`` on KafkaConsumer / KafkaProducer;
- ``scan``: read a topic to the end it had when the scan began;
- ``fetch_wait``, ``fetch_watch``: tansu's fetch waits and stalled fetches (pure policy);
- ``fixes``, ``diagnostics``: kafka-python internals (a resume bug; partition state).
"""
