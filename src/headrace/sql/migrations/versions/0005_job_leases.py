"""Jobs hold a lease while a runner carries them out: the runner's id and when its lease runs
out. A job whose lease ran out (or that never had one) is picked up by any live runner.

Revision ID: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.add_column(sa.Column("lease_owner", sa.String(64), nullable=True))
        jobs.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))
        jobs.create_index("ix_jobs_status_lease", ["status", "lease_expires_at"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.drop_index("ix_jobs_status_lease")
        jobs.drop_column("lease_expires_at")
        jobs.drop_column("lease_owner")
