"""The control topic (``<prefix>.control``): cancellations.

Every dispatcher reads every control record (the topic is assigned, not shared in a group),
because the request a record names may sit in any dispatcher's batcher. Applying a record is
idempotent, so the offset is committed under one group id for all of them: a restarted
dispatcher resumes there instead of re-reading the topic.
"""

from __future__ import annotations

import logging

from pydantic import ValidationError

from headrace.config.settings import Settings
from headrace.schemas.control import Control
from headrace.schemas.signing import Keys, control_signature, signed_by
from headrace.schemas.topics import Topics
from headrace.transport.base import Partition, Transport

log = logging.getLogger(__name__)


class ControlReader:
    def __init__(self, transport: Transport, settings: Settings) -> None:
        topic = Topics(settings.topic_prefix).control
        transport.ensure_topics([topic], partitions=1)
        self._reader = transport.reader(f"{settings.topic_prefix}.control")
        self._partitions: list[Partition] = self._reader.assign([topic], start="committed")
        self._dirty = False

    def poll(self, tenant_keys: Keys) -> list[Control]:
        """Control records that arrived since the last call; never blocks. A record of a
        tenant that signs its records (``tenant_keys``) counts only when signed by it (the
        others are logged and left out)."""
        out: list[Control] = []
        for records in self._reader.poll(timeout_ms=0).values():
            for record in records:
                try:
                    control = Control.model_validate_json(record.value)
                except ValidationError as exc:
                    log.warning("unreadable control record at offset %d: %s", record.offset, exc)
                else:
                    if _signed(control, tenant_keys):
                        out.append(control)
                self._dirty = True
        return out

    def commit(self) -> None:
        if not self._dirty:
            return
        positions = {p: self._reader.position(p) for p in self._partitions}
        self._reader.commit({p: o for p, o in positions.items() if o is not None}, sync=False)
        self._dirty = False

    def close(self) -> None:
        try:
            self.commit()
        finally:
            self._reader.close()


def _signed(control: Control, tenant_keys: Keys) -> bool:
    if signed_by(
        tenant_keys,
        control.tenant,
        control.signature,
        lambda key: control_signature(key, control.action, control.tenant, control.request_id),
    ):
        return True
    log.warning("unsigned cancellation of %s/%s ignored", control.tenant, control.request_id)
    return False
