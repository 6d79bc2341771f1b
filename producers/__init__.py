"""The client SDK: validate, count tokens, pick the bucket, produce, and await replies."""

from producers.client import Client, Submission

__all__ = ["Client", "Submission"]
