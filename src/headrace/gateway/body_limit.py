"""Bodies past a route's size limit are refused before they are read.

Seen: an unauthenticated 300 MB POST to /v1/embeddings grew the gateway by ~560 MB before its
401; an authenticated 40 MB string, by 2.4 GB and 25 s before its 400. Now a body is counted
before anything reads it, authentication included: ``POST /v1/files`` may carry
``max_file_bytes`` (and the multipart envelope), every other route ``max_body_bytes``. A
``Content-Length`` past the limit is answered 413 at once, in OpenAI's error shape; a chunked
body is counted as it arrives and refused when it passes the limit.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from headrace.gateway.error_body import error_response

MULTIPART_SLACK = 1024 * 1024  # a file upload's form fields and boundaries


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int, max_file_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_file_bytes = max_file_bytes

    def limit_for(self, method: str, path: str) -> int:
        if method == "POST" and path.rstrip("/") == "/v1/files":
            return self.max_file_bytes + MULTIPART_SLACK
        return self.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope.get("method", ""), scope.get("path", ""))
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                response = error_response(400, "Content-Length is not a number", "invalid_value")
                await response(scope, receive, send)
                return
            if length > limit:
                await _refuse(scope, receive, send, limit)
                return
        seen = 0
        started = refused = False

        async def counted() -> Message:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:  # answered now; the route reads on as if the client left
                    refused = True
                    if not started:
                        await _refuse(scope, receive, send, limit)
                    return {"type": "http.disconnect"}
            return message

        async def sending(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the 413 went out already
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, counted, sending)


async def _refuse(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
    message = f"the request body is larger than {limit} bytes"
    await error_response(413, message, "request_too_large")(scope, receive, send)
