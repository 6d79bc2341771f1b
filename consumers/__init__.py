"""Reading what the pipeline produces: replies for SDK futures and for streaming users."""

from consumers.replies import ReplyListener, stream_replies

__all__ = ["ReplyListener", "stream_replies"]
