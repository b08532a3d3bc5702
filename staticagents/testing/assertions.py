"""Assertions over what an agent sent, read from the journal (``client.requests()``).

Each helper takes the recorded requests (or a client, whose session's requests
it reads) and fails with an ``AssertionError`` naming the request ("request 2
of 3: openai /v1/chat/completions ...") and the place in its body
(``messages[1].content``). A check over no requests at all fails too: an empty
journal usually means the agent missed the test's session, and a check
of nothing must not pass.

The body shapes understood are those of the dialects the service speaks:
OpenAI Chat Completions, OpenAI Responses, Anthropic Messages, Gemini
``generateContent``, the Google ADK ``/run`` body and the WebSocket message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from staticagents.core.credentials import credentials_in
from staticagents.testing.client import RecordedRequest, StaticAgentsClient

Requests = StaticAgentsClient | Iterable[RecordedRequest]


@dataclass(frozen=True)
class Finding:
    """A credential found in a request body."""

    where: str  # the path in the body, e.g. messages[1].content
    what: str  # e.g. "an OpenAI API key 'sk-p…' (51 characters)"


# -- credentials ---------------------------------------------------------------------------


def assert_no_credentials(requests: Requests, secrets: Iterable[str] = ()) -> None:
    """Fail when any request body holds something that looks like a credential.

    Looks for API keys (OpenAI, Anthropic, Google, AWS, GitHub, Slack), bearer
    tokens, JSON Web Tokens, private keys, passwords in URLs, and every string
    in ``secrets`` (passwords and tokens the test gave the agent). Strings
    inside the JSON body are searched after decoding, so escaping hides
    nothing. The failure message masks what it found.
    """
    named = list(secrets)
    if any(not isinstance(secret, str) or not secret for secret in named):
        raise ValueError("every secret must be a non-empty string")
    recorded = _recorded(requests, "assert_no_credentials")
    problems = []
    for index, request in enumerate(recorded):
        for finding in _credentials_in(request.body, named):
            problems.append(f"{_label(index, recorded)}: {finding.where}: {finding.what}")
    if problems:
        raise AssertionError("credentials found in request bodies:\n  " + "\n  ".join(problems))


def _credentials_in(body: Any, secrets: Sequence[str]) -> Iterator[Finding]:
    for where, value in _strings(body, ""):
        for number, secret in enumerate(secrets, start=1):
            if secret in value:
                yield Finding(where, f"secret #{number} given to the check ({_masked(secret)})")
        for what, match in credentials_in(value):
            yield Finding(where, f"{what} {_masked(match.group(0))}")


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every string in a JSON value (keys too), with its path; the body itself if text."""
    if isinstance(value, str):
        yield (path or "(body)", value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            child = f"{path}.{key}" if path else str(key)
            yield (f"{child} (the key)", str(key))
            yield from _strings(item, child)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}[{index}]")


def _masked(secret: str) -> str:
    """The first four characters and the length: enough to recognise it, not to use it."""
    return f"'{secret[:4]}…' ({len(secret)} characters)"


# -- tool results --------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolResult:
    """A tool result an agent sent back: the call it answers, its text, where it was."""

    call_id: str | None
    text: str
    where: str


def assert_tool_result_sent(
    requests: Requests, call_id: str, *, contains: str | None = None
) -> RecordedRequest:
    """Fail unless some request sent back a tool result for ``call_id``; return that request.

    ``contains``: the result's text must also contain this. Tool results are
    OpenAI ``tool`` messages (``tool_call_id``), Responses ``function_call_output``
    items (``call_id``), Anthropic ``tool_result`` blocks (``tool_use_id``), and
    Gemini's and ADK's ``functionResponse`` parts (``id``).
    """
    recorded = _recorded(requests, "assert_tool_result_sent")
    seen: list[str] = []
    for index, request in enumerate(recorded):
        for result in tool_results(request.body):
            if result.call_id == call_id and (contains is None or contains in result.text):
                return request
            seen.append(
                f"{_label(index, recorded)}: {result.where}: call {result.call_id!r}"
                f" -> {_clip(result.text)!r}"
            )
    wanted = f"for call {call_id!r}" + (f" containing {contains!r}" if contains else "")
    if not seen:
        raise AssertionError(
            f"no tool result {wanted} was sent: none of the {len(recorded)} request(s) "
            "carried a tool result"
        )
    raise AssertionError(
        f"no tool result {wanted} was sent; tool results sent:\n  " + "\n  ".join(seen)
    )


def tool_results(body: Any) -> list[ToolResult]:
    """The tool results a request body carries, in any dialect the service speaks."""
    if not isinstance(body, Mapping):
        return []
    found = [*_openai_and_anthropic_results(body), *_responses_results(body)]
    message = body.get("newMessage", body.get("new_message"))
    if isinstance(message, Mapping):
        found += _function_responses(message, "newMessage")
    contents = body.get("contents")
    for index, content in enumerate(contents if isinstance(contents, list) else ()):
        if isinstance(content, Mapping):
            found += _function_responses(content, f"contents[{index}]")
    if isinstance(body.get("tool_result"), str):  # the WebSocket message: no call id
        found.append(ToolResult(None, body["tool_result"], "tool_result"))
    return found


def _openai_and_anthropic_results(body: Mapping[str, Any]) -> Iterator[ToolResult]:
    messages = body.get("messages")
    for index, message in enumerate(messages if isinstance(messages, list) else ()):
        if not isinstance(message, Mapping):
            continue
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id")
            yield ToolResult(call_id, _text_of(message.get("content")), f"messages[{index}]")
        content = message.get("content")
        for block_index, block in enumerate(content if isinstance(content, list) else ()):
            if isinstance(block, Mapping) and block.get("type") == "tool_result":
                yield ToolResult(
                    block.get("tool_use_id"),
                    _text_of(block.get("content")),
                    f"messages[{index}].content[{block_index}]",
                )


def _responses_results(body: Mapping[str, Any]) -> Iterator[ToolResult]:
    items = body.get("input")
    for index, item in enumerate(items if isinstance(items, list) else ()):
        if isinstance(item, Mapping) and item.get("type") == "function_call_output":
            yield ToolResult(item.get("call_id"), _text_of(item.get("output")), f"input[{index}]")


def _function_responses(message: Mapping[str, Any], where: str) -> Iterator[ToolResult]:
    """The ``functionResponse`` parts of a Gemini or ADK content."""
    parts = message.get("parts")
    for index, part in enumerate(parts if isinstance(parts, list) else ()):
        if not isinstance(part, Mapping):
            continue
        response = part.get("functionResponse", part.get("function_response"))
        if isinstance(response, Mapping):
            place = f"{where}.parts[{index}].functionResponse"
            yield ToolResult(response.get("id"), _text_of(response.get("response")), place)


# -- system prompts ------------------------------------------------------------------------


def assert_system_prompt(
    requests: Requests,
    contains: str | None = None,
    *,
    equals: str | None = None,
    every: bool = False,
) -> RecordedRequest:
    """Fail unless a request (``every=True``: every request) used the given system prompt.

    The prompt must contain ``contains`` and/or be exactly ``equals``. It is
    read from OpenAI ``system``/``developer`` messages, Anthropic's ``system``
    and Gemini's ``systemInstruction``. Returns the first request that used it.
    """
    if contains is None and equals is None:
        raise ValueError("assert_system_prompt needs contains= or equals=")
    recorded = _recorded(requests, "assert_system_prompt")
    prompts = [system_prompt(request.body) for request in recorded]
    fits = [_prompt_fits(prompt, contains, equals) for prompt in prompts]
    if all(fits) if every else any(fits):
        return recorded[fits.index(True)]
    wanted = []
    if contains is not None:
        wanted.append(f"containing {contains!r}")
    if equals is not None:
        wanted.append(f"equal to {equals!r}")
    quantity = "not every request" if every else "no request"
    lines = [
        f"{_label(index, recorded)}: "
        + ("no system prompt" if prompt is None else f"system prompt {_clip(prompt, 120)!r}")
        for index, prompt in enumerate(prompts)
        if not fits[index]
    ]
    head = f"{quantity} used a system prompt {' and '.join(wanted)}"
    raise AssertionError(f"{head}:\n  " + "\n  ".join(lines))


def system_prompt(body: Any) -> str | None:
    """The system prompt of an OpenAI (chat or Responses), Anthropic or Gemini request body;
    None when it has none."""
    if not isinstance(body, Mapping):
        return None
    instruction = body.get("systemInstruction", body.get("system_instruction"))
    if isinstance(instruction, Mapping):
        return _text_of(instruction.get("parts"))
    if "system" in body and body["system"] is not None:
        return _text_of(body["system"])
    messages = body.get("messages", body.get("input"))
    instructions = body.get("instructions")
    texts = [instructions] if isinstance(instructions, str) else []
    texts += [
        _text_of(message.get("content"))
        for message in (messages if isinstance(messages, list) else ())
        if isinstance(message, Mapping) and message.get("role") in ("system", "developer")
    ]
    return "\n".join(texts) if texts else None


def _prompt_fits(prompt: str | None, contains: str | None, equals: str | None) -> bool:
    if prompt is None:
        return False
    return (contains is None or contains in prompt) and (equals is None or prompt == equals)


# -- shared --------------------------------------------------------------------------------


def _recorded(requests: Requests, check: str) -> list[RecordedRequest]:
    if isinstance(requests, StaticAgentsClient):
        recorded = requests.requests()
        where = f" in session {requests.session!r}"
    else:
        recorded = list(requests)
        where = ""
    if not recorded:
        raise AssertionError(
            f"{check}: no requests to check{where}. Did the agent use the session's base "
            "URL (the client's .openai_base_url, ...) or send X-Static-Session (.headers)?"
        )
    return recorded


def _label(index: int, recorded: Sequence[RecordedRequest]) -> str:
    return f"request {index + 1} of {len(recorded)} ({recorded[index].describe()})"


def _text_of(content: Any) -> str:
    """Text of a message's content: a string, text blocks/parts, or JSON for the rest."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            block["text"]
            for block in content
            if isinstance(block, Mapping) and isinstance(block.get("text"), str)
        ]
        if texts:
            return "\n".join(texts)
    return json.dumps(content, ensure_ascii=False, sort_keys=True)


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_requests(requests: Sequence[RecordedRequest], body_limit: int = 2000) -> str:
    """The requests as readable text: one header line each, then the body (clipped)."""
    if not requests:
        return "(no requests)"
    blocks = []
    for index, request in enumerate(requests):
        body = (
            json.dumps(request.body, indent=2, ensure_ascii=False)
            if not isinstance(request.body, str)
            else request.body
        )
        if len(body) > body_limit:
            body = f"{body[:body_limit]}\n… ({len(body) - body_limit} more characters)"
        header = f"#{index + 1} {request.describe()}"
        if request.query:
            header += f"\n   query: {_clip(request.query, 200)!r}"
        blocks.append(f"{header}\n{_indent(body)}")
    return "\n".join(blocks)


def _indent(text: str, prefix: str = "   ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())
