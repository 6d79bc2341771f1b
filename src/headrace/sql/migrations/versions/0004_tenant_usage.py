"""Per-tenant usage by minute (requests, tokens, device time, cache hits), moved here from
Redis, and the flush keys already applied (so a flush is applied once).

Revision ID: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenant_usage",
        sa.Column("tenant", sa.String(200), primary_key=True),
        sa.Column("minute", sa.BigInteger, primary_key=True),  # unix seconds // 60
        sa.Column("requests", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("device_ms", sa.Float, nullable=False, server_default="0"),
        sa.Column("cache_hits", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.create_index("ix_tenant_usage_minute", "tenant_usage", ["minute"])
    op.create_table(
        "usage_flushes",
        sa.Column("flush_key", sa.String(400), primary_key=True),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("usage_flushes")
    op.drop_index("ix_tenant_usage_minute", "tenant_usage")
    op.drop_table("tenant_usage")
