"""An API key may carry a default priority class for the requests made with it
(``headrace api-key create --priority``); none: ``default``.

Revision ID: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as keys:
        keys.add_column(sa.Column("priority", sa.String(20), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as keys:
        keys.drop_column("priority")
