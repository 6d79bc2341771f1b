"""Files (uploaded inputs, job outputs) and API keys (only their SHA-256 is stored);
jobs learn their input, output and error file ids.

Revision ID: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "files",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(200), nullable=False, index=True),
        sa.Column("purpose", sa.String(32), nullable=False),
        sa.Column("filename", sa.Text, nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("location", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "api_keys",
        sa.Column("key_hash", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("label", sa.String(200), nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    with op.batch_alter_table("jobs") as jobs:
        jobs.add_column(sa.Column("input_file_id", sa.String(64)))
        jobs.add_column(sa.Column("output_file_id", sa.String(64)))
        jobs.add_column(sa.Column("error_file_id", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.drop_column("error_file_id")
        jobs.drop_column("output_file_id")
        jobs.drop_column("input_file_id")
    op.drop_table("api_keys")
    op.drop_table("files")
