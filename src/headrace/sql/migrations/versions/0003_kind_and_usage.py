"""Jobs learn their kind (``batch`` from /v1/batches and the CLI, ``job`` from /v1/jobs), so
a list of batches pages in SQL, and their token usage (input and output tokens).

Revision ID: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.add_column(sa.Column("kind", sa.String(16), nullable=False, server_default="batch"))
        jobs.add_column(
            sa.Column("input_tokens", sa.BigInteger, nullable=False, server_default="0")
        )
        jobs.add_column(
            sa.Column("output_tokens", sa.BigInteger, nullable=False, server_default="0")
        )
        jobs.create_index("ix_jobs_tenant_kind_created", ["tenant", "kind", "created_at"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.drop_index("ix_jobs_tenant_kind_created")
        jobs.drop_column("output_tokens")
        jobs.drop_column("input_tokens")
        jobs.drop_column("kind")
