"""Run in a subprocess by tests/system/test_ledger_page.py, with Airflow configured by its environment
(LocalAirflow.environment: SimpleAuthManager with the user admin, the ledger connection): the
api-server's own app (plugins included) under FastAPI's test client.

    python -m tests.support.ledger_page_probe PASSWORD CORRELATION_ID   -> JSON: statuses and pages
"""

from __future__ import annotations

import json
import sys

from fastapi.testclient import TestClient


def main(password: str, correlation_id: str) -> None:
    from airflow.api_fastapi.app import create_app

    client = TestClient(create_app())
    page = "/ackstore/ledger/"
    token = client.post("/auth/token", json={"username": "admin", "password": password})
    bearer = {"Authorization": f"Bearer {token.json()['access_token']}"}
    wrong = client.post("/auth/token", json={"username": "admin", "password": password + "x"})
    views = client.get("/api/v2/plugins", headers=bearer).json()
    found = client.get(page, params={"correlation_id": correlation_id}, headers=bearer)
    print(json.dumps({
        "anonymous": client.get(page).status_code,
        "anonymous_search": client.get(page, params={"correlation_id": correlation_id}).status_code,
        "forged": client.get(page, headers={"Authorization": "Bearer not-a-token"}).status_code,
        "wrong_password": wrong.status_code,
        "token": token.status_code,
        "page_status": client.get(page, headers=bearer).status_code,
        "page": client.get(page, headers=bearer).text,
        "cookie_page_status": client.get(page, cookies={"_token": token.json()["access_token"]}).status_code,
        "search_status": found.status_code,
        "search": found.text,
        "unknown": client.get(page, params={"correlation_id": "no\u0000such" + "x" * 5000}, headers=bearer).text,
        "plugins": [plugin for plugin in views["plugins"] if plugin["name"] == "ackstore"],
    }))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
