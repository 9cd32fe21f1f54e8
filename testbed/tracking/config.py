"""The scenario's `tracking` section: which experiment trackers mirror the run, and where.

Off by default. Secrets are never settings: Weights & Biases reads WANDB_API_KEY from the
environment itself, and nothing here is ever logged as a parameter.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from testbed.extras import require_extra

Backend = Literal["tensorboard", "mlflow", "wandb"]
BACKENDS: tuple[Backend, ...] = ("tensorboard", "mlflow", "wandb")
# The library each backend imports, for the missing-extra message (testbed/extras.py)
MODULES: dict[str, tuple[str, ...]] = {
    "tensorboard": ("tensorboard",),
    "mlflow": ("mlflow", "sqlalchemy", "alembic"),
    "wandb": ("wandb",),
}


class TrackingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backends: list[Backend] = Field(
        default_factory=list, description="trackers that mirror the run's rows as it runs (none by default)"
    )
    mlflow_uri: str | None = Field(
        default=None, description="an MLflow tracking URI; default: a SQLite store in RUN/mlflow/ (artifacts beside it)"
    )
    experiment: str | None = Field(
        default=None, description="MLflow experiment / W&B project (default: the scenario's name)"
    )
    wandb_mode: Literal["offline", "online"] = Field(
        default="offline", description="online needs WANDB_API_KEY in the environment (never a setting, never logged)"
    )
    wandb_entity: str | None = None
    group: str | None = Field(
        default=None, description="the W&B group (default: the run directory's name; a sweep: its name)"
    )
    parent_run: str | None = Field(
        default=None,
        description="an MLflow run to nest this run under (a sweep sets it: one parent, a child per point)",
    )
    flush_seconds: float = Field(
        default=10.0, gt=0, description="the background writer flushes every backend this often"
    )
    rolling_window: int = Field(default=128, ge=1, description="episodes in the rolling reward")
    rolling_every: int = Field(default=32, ge=1, description="judged episodes between two points of the rolling reward")
    queue_size: int = Field(
        default=100_000, ge=1, description="points waiting for the writer; past it, points are dropped"
    )

    @field_validator("backends")
    @classmethod
    def _unique(cls, value: list[Backend]) -> list[Backend]:
        if len(set(value)) != len(value):
            raise ValueError(f"each backend once, got {value}")
        return value


def check_extras(config: TrackingConfig) -> None:
    """MissingExtra (naming `pip install 'testbed[track]'`) for a backend whose library is missing."""
    for backend in config.backends:
        require_extra("track", f"tracking: {backend}", MODULES[backend])
