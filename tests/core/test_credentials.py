"""Which header and query parameter names carry a credential, and how they are masked."""

from __future__ import annotations

import pytest

from staticagents.core.inquiry import is_credential_name, mask_headers


@pytest.mark.parametrize(
    "name",
    [
        "Authorization",
        "x-api-key",
        "openai-api-key",
        "api_key",
        "key",
        "X-Auth-Token",
        "x-amz-security-token",
        "client_secret",
        "Cookie",
        "set-cookie",
        "x-db-password",
        "sec-websocket-key",
    ],
)
def test_a_name_that_suggests_a_credential_is_one(name: str) -> None:
    assert is_credential_name(name)


@pytest.mark.parametrize(
    "name", ["content-type", "x-static-session", "user-agent", "keep-alive", "x-agent-type"]
)
def test_other_names_are_not(name: str) -> None:
    assert not is_credential_name(name)


def test_masking_keeps_the_scheme_of_an_authorization_and_lowers_the_names() -> None:
    masked = mask_headers({"Authorization": "Bearer sk-1", "X-Auth-Token": "t", "Accept": "x"})

    assert masked == {"authorization": "Bearer ***", "x-auth-token": "***", "accept": "x"}
