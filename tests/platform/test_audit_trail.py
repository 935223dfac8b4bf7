"""``GET /v1/audit`` on the live platform: every write leaves a row naming who did what to what."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

pytestmark = pytest.mark.integration

KB = "audit"


def test_writes_are_audited_and_read_back_newest_first_by_admins_only(
    api: httpx.Client, client_with: Callable[[str], httpx.Client]
) -> None:
    ingest = client_with("ingest")
    facts = [{"subject": "Vertigo", "predicate": "directed_by", "object": "Alfred Hitchcock", "source": "audit-test"},
             {"subject": "Psycho", "predicate": "directed_by", "object": "Alfred Hitchcock", "source": "audit-test"}]
    batch = ingest.post("/v1/facts", json={"kb": KB, "facts": facts})
    assert batch.status_code == 202, batch.text
    made = api.post("/v1/keys", json={"name": "audited", "scopes": ["query"]}).json()
    assert api.post(f"/v1/keys/{made['id']}/revoke").status_code == 200

    events = api.get("/v1/audit", params={"limit": 50}).json()["items"]
    ids = [e["id"] for e in events]
    assert ids == sorted(ids, reverse=True)
    taken = next(e for e in events if e["target"] == f"batch:{batch.json()['batch_id']}")
    assert taken["action"] == "ingest.batch" and taken["details"] == {"kb": KB, "count": 2, "duplicates": 0}
    assert taken["actor"].startswith("key:test-ingest#") and taken["at"].endswith(("Z", "+00:00"))

    keys = api.get("/v1/audit", params={"action": "key", "target": f"key:{made['id']}"}).json()["items"]
    assert [e["action"] for e in keys] == ["key.revoke", "key.create"]
    one = api.get("/v1/audit", params={"action": "key.revoke", "target": f"key:{made['id']}"}).json()["items"]
    assert [e["action"] for e in one] == ["key.revoke"]

    page = api.get("/v1/audit", params={"limit": 1}).json()
    older = api.get("/v1/audit", params={"limit": 1, "before": page["next_before"]}).json()
    assert older["items"][0]["id"] < page["items"][0]["id"]

    assert ingest.get("/v1/audit").status_code == 403
    narrow = api.post("/v1/keys", json={"name": "narrow-admin", "scopes": ["admin"], "kbs": [KB]}).json()["key"]
    refused = httpx.get(f"{api.base_url}/v1/audit", headers={"Authorization": f"Bearer {narrow}"})
    assert refused.status_code == 403 and refused.headers["content-type"] == "application/problem+json"
