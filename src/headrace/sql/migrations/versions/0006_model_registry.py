"""The model registry: registered versions with their manifests, each model's traffic policy
(which versions serve and how; ``revision`` counts its changes), and the history of those
changes (deploy, promote, rollback, and who or what made them).

Revision ID: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "model_versions",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("version", sa.String(64), primary_key=True),
        sa.Column("task", sa.String(16), nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("backend", sa.String(16), nullable=False),
        sa.Column("pooling", sa.String(16), nullable=False),
        sa.Column("normalize", sa.Boolean, nullable=False),
        sa.Column("max_tokens", sa.Integer, nullable=False),
        sa.Column("label", sa.Text, nullable=False, server_default=""),
        sa.Column("manifest", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "traffic_policies",
        sa.Column("model", sa.String(200), primary_key=True),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("policy", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "model_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("detail", sa.JSON, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_model_events_model", "model_events", ["model", "id"])


def downgrade() -> None:
    op.drop_index("ix_model_events_model", "model_events")
    op.drop_table("model_events")
    op.drop_table("traffic_policies")
    op.drop_table("model_versions")
