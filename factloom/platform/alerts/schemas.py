"""Bodies of ``/v1/alerts``: Alertmanager's webhook payload (version 4) in, stored alerts out.

The payload is Alertmanager's `webhook_config` body
(https://prometheus.io/docs/alerting/latest/configuration/#webhook_config): a notification for one
alert group, each alert with its labels, annotations, start, end and fingerprint. Only what is stored
is held to a rule; fields Alertmanager may add later are ignored. Every text refuses a NUL (PostgreSQL
cannot store it).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, WithJsonSchema, model_validator

from factloom.ledger.tables import AlertEvent
from factloom.platform.types import NO_NUL, Instant, Timestamp

__all__ = ["MAX_ALERTS", "AlertLabels", "AlertIn", "AlertmanagerWebhook", "AlertsReceived", "AlertOut", "AlertPage"]

MAX_ALERTS = 1000  # alerts in one notification; deploy/alertmanager/alertmanager.yml sends at most 100
MAX_PAIRS = 64  # labels, or annotations, of one alert

LabelValue = Annotated[str, StringConstraints(max_length=1000, pattern=NO_NUL)]
AnnotationValue = Annotated[str, StringConstraints(max_length=10_000, pattern=NO_NUL)]
PairName = Annotated[str, StringConstraints(min_length=1, max_length=200)]
AlertName = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=NO_NUL)]
Fingerprint = Annotated[str, StringConstraints(pattern=r"^[0-9A-Za-z]{1,64}$")]


def _no_end(value: Any) -> Any:
    """Alertmanager's zero time (``0001-01-01T00:00:00Z``), and any end out of range in UTC, mean no known end."""
    if not isinstance(value, str) or not value[:4].isdigit():
        return value  # Instant refuses it, saying why
    try:
        moment = datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
        moment.astimezone(UTC)
    except ValueError:
        return value
    except OverflowError:
        return None
    return None if moment.year == 1 or value.startswith("9999-12-31") else value


EndsAt = Annotated[
    Instant | None,
    BeforeValidator(_no_end),
    WithJsonSchema({"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}],
                    "description": "RFC 3339 with its zone; Alertmanager's zero time 0001-01-01T00:00:00Z "
                                   "means no end"}),
]


class AlertLabels(BaseModel):
    """An alert's labels: ``alertname`` always; ``severity`` and ``kb`` where the rule sets them."""

    model_config = ConfigDict(extra="allow", json_schema_extra={
        "maxProperties": MAX_PAIRS, "propertyNames": {"minLength": 1, "maxLength": 200}})
    __pydantic_extra__: dict[PairName, LabelValue] = Field(init=False)  # type: ignore[assignment]

    alertname: AlertName

    @model_validator(mode="after")
    def _few(self) -> AlertLabels:
        if 1 + len(self.model_extra or {}) > MAX_PAIRS:
            raise ValueError(f"at most {MAX_PAIRS} labels")
        return self

    def as_dict(self) -> dict[str, str]:
        return {"alertname": self.alertname, **(self.model_extra or {})}


class AlertIn(BaseModel):
    status: Literal["firing", "resolved"]
    labels: AlertLabels
    annotations: Annotated[dict[PairName, AnnotationValue], Field(max_length=MAX_PAIRS)] = Field(default_factory=dict)
    startsAt: Instant  # noqa: N815 - Alertmanager's field names
    endsAt: EndsAt = None  # noqa: N815
    generatorURL: Annotated[str, StringConstraints(max_length=2000)] = ""  # noqa: N815
    fingerprint: Fingerprint


class AlertmanagerWebhook(BaseModel):
    """One notification: an alert group's alerts as Alertmanager sends them to a webhook receiver."""

    model_config = ConfigDict(extra="ignore")

    version: Literal["4"]
    status: Literal["firing", "resolved"]
    receiver: Annotated[str, StringConstraints(max_length=200)] = ""
    groupKey: Annotated[str, StringConstraints(max_length=10_000)] = ""  # noqa: N815
    alerts: Annotated[list[AlertIn], Field(max_length=MAX_ALERTS)]


class AlertsReceived(BaseModel):
    received: int = Field(description="alerts in the notification, each stored (or updated) once")
    firing: int
    resolved: int


class AlertOut(BaseModel):
    id: int
    fingerprint: str
    alertname: str
    status: Literal["firing", "resolved"]
    severity: str | None
    kb: str | None
    summary: str
    description: str | None = Field(description="the rule's description annotation")
    runbook: str | None = Field(description="where docs/operations.md says what to do")
    labels: dict[str, str]
    starts_at: Timestamp
    ends_at: Timestamp | None = Field(description="when it resolved; null while firing")
    received_at: Timestamp = Field(description="when Alertmanager last posted it")

    @classmethod
    def of(cls, row: AlertEvent) -> AlertOut:
        notes = row.annotations or {}
        return cls(id=row.id, fingerprint=row.fingerprint, alertname=row.alertname,
                   status="resolved" if row.status == "resolved" else "firing", severity=row.severity, kb=row.kb,
                   summary=row.summary, description=notes.get("description"), runbook=notes.get("runbook"),
                   labels=dict(row.labels or {}), starts_at=row.starts_at, ends_at=row.ends_at,
                   received_at=row.received_at)


class AlertPage(BaseModel):
    items: list[AlertOut]
    next_before: int | None = Field(description="pass as ?before= for the next (older) page; null at the end")

