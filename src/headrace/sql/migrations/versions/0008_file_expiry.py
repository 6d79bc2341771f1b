"""A file may expire (OpenAI's ``expires_after``): after ``expires_at`` it is gone for its
tenant and a runner pool removes it.

Revision ID: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("files") as files:
        files.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("files") as files:
        files.drop_column("expires_at")
