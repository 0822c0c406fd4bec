"""The ``ray:`` section of params.yaml: where ``engine: ray`` stages run (``tasks/common/runtime/raycluster.py``).

It changes where the work runs, never what it computes (the Ray engines are byte-identical to ``local``), so
no stage lists it among its DVC params.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from tasks.config.base import StrictModel


class RayParams(StrictModel):
    """How a stage with ``engine: ray`` reaches Ray."""

    address: str | None = Field(
        None,
        description="null: start a local Ray instance on this machine; 'auto' or 'host:port': join that cluster",
    )
    num_cpus: int | None = Field(
        None, ge=1, description="CPUs of a local instance (null: all of this machine's); ignored with an address"
    )
    include_dashboard: bool = Field(False, description="start the Ray dashboard with a local instance")
    dashboard_host: str = Field(
        "127.0.0.1", description="interface the dashboard binds to; 0.0.0.0 exposes it to the network"
    )
    dashboard_port: int = Field(8265, ge=1, le=65535, description="port of the dashboard of a local instance")
    object_store_mib: int | None = Field(
        None, ge=64, description="object store of a local instance, MiB (null: Ray's default, 30% of RAM)"
    )

    @field_validator("address")
    @classmethod
    def _address_form(cls, value: str | None) -> str | None:
        if value is not None and value != "auto" and not value.startswith("ray://") and ":" not in value:
            raise ValueError(f"ray.address {value!r}: expected null, 'auto', 'host:port' or 'ray://host:port'")
        return value
