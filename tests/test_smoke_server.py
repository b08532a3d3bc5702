import httpx


def test_live_server_serves_the_admin_login(live_url: str) -> None:
    response = httpx.get(f"{live_url}/admin/login/")
    assert response.status_code == 200
    assert "Static Agents" in response.text or "Django" in response.text
