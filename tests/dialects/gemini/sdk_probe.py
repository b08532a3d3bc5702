"""Run by test_sdk_3.py in a subprocess whose path puts another google-genai major first.

Usage: ``python sdk_probe.py BASE_URL SESSION``. Prints one JSON object: the
SDK's version and what each call returned, with the API version left to the SDK.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from google import genai
from google.genai import errors, types
from google.genai import version as genai_version


def main(base_url: str, session: str) -> dict[str, Any]:
    client = genai.Client(
        api_key="AIzaSyStaticAgentsNotARealKey0123456789",
        http_options=types.HttpOptions(base_url=base_url, headers={"X-Static-Session": session}),
    )
    lookup = types.FunctionDeclaration(name="lookup", parameters_json_schema={"type": "object"})
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[lookup])])
    question = types.Content(role="user", parts=[types.Part.from_text(text="#tool weather?")])
    called = client.models.generate_content(
        model="gemini-2.5-flash", contents=[question], config=config
    )
    [call] = called.function_calls or []
    answer = types.Part.from_function_response(name="lookup", response={"result": "sunny"})
    history = [question, called.candidates[0].content, types.Content(role="user", parts=[answer])]
    reported = client.models.generate_content(
        model="gemini-2.5-flash", contents=history, config=config
    )
    streamed = client.models.generate_content_stream(model="gemini-2.5-flash", contents="one two")
    try:
        client.models.generate_content(model="gemini-2.5-flash", contents="#error")
        error = None
    except errors.APIError as raised:
        error = [raised.code, raised.status]
    return {
        "version": genai_version.__version__,
        "text": client.models.generate_content(model="gemini-2.5-flash", contents="hello").text,
        "call": [call.name, call.args],
        "reported": reported.text,
        "stream": [chunk.text for chunk in streamed],
        "tokens": client.models.count_tokens(
            model="gemini-2.5-flash", contents="a b c"
        ).total_tokens,
        "models": [model.name for model in client.models.list()],
        "error": error,
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
