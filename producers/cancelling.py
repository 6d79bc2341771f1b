"""Cancelling requests from the SDK: ``cancel``, ``cancel_many`` and ``abandon``, mixed into
``Client``. A cancel is a ``Control`` record on ``<prefix>.control`` (signed with the
tenant's key when it has one); the dispatchers and workers act on it (docs/producing.md)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from headrace.schemas.control import Control
from headrace.schemas.signing import control_signature
from headrace.schemas.topics import Topics
from headrace.transport import Writer

if TYPE_CHECKING:
    from headrace.consumers.replies import ReplyListener

log = logging.getLogger(__name__)


class _Client(Protocol):
    """What the mixin uses of ``Client``."""

    tenant: str
    topics: Topics
    _key: bytes | None
    _producer: Writer
    _produce_lock: threading.Lock
    _listener: ReplyListener | None

    def cancel_many(self, request_ids: Sequence[str], *, tenant: str | None = None) -> None: ...


class CancelMixin:
    def cancel(self: _Client, request_id: str, *, tenant: str | None = None) -> None:
        """Ask the pipeline to cancel a request. Not yet computed: it is not computed and its
        reply is the error ``cancelled``. Computing right now: it finishes, but the reply is
        still ``cancelled``. Already answered: nothing changes."""
        self.cancel_many([request_id], tenant=tenant)

    def cancel_many(
        self: _Client, request_ids: Sequence[str], *, tenant: str | None = None
    ) -> None:
        """``cancel`` for each of ``request_ids``, acknowledged by the broker together."""
        with self._produce_lock:
            for request_id in request_ids:
                control = Control(
                    action="cancel", tenant=tenant or self.tenant, request_id=request_id
                )
                if self._key is not None and control.tenant == self.tenant:
                    signature = control_signature(
                        self._key, control.action, control.tenant, request_id
                    )
                    control = control.model_copy(update={"signature": signature})
                self._producer.send(
                    self.topics.control,
                    control.model_dump_json().encode(),
                    key=request_id.encode(),
                )
            self._producer.flush()

    def abandon(self: _Client, request_ids: Sequence[str]) -> None:
        """Requests whose caller stopped waiting (a timeout, a stream's reader gone): their
        replies are no longer awaited, their places under ``client_max_pending`` are free
        again, and the pipeline is asked to cancel them (what was not computed is not)."""
        if self._listener is not None:
            for request_id in request_ids:
                future = self._listener.forget(self.tenant, request_id)
                if future is not None:
                    future.cancel()  # its done callback frees the slot, ends its resends
        try:
            self.cancel_many(request_ids)
        except Exception:  # the control topic unreachable: the replies come and are dropped
            log.warning("could not cancel %d abandoned requests", len(request_ids), exc_info=True)
