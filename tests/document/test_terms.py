"""The plain terms (``document.terms``, loaded at start-up) say what the schema's models say."""

from __future__ import annotations

from typing import get_args

from staticagents.document import schema, terms


def literals(model: type[schema.Strict], field: str) -> tuple[str, ...]:
    literal, _none = get_args(model.model_fields[field].annotation)
    return get_args(literal)


def test_the_response_keys_are_the_response_models_fields_in_order() -> None:
    assert tuple(schema.ResponseSpec.model_fields) == terms.RESPONSE_KEYS


def test_the_choices_are_the_response_models_literals() -> None:
    assert literals(schema.ResponseSpec, "confidence") == terms.CONFIDENCES
    assert literals(schema.ResponseSpec, "finish_reason") == terms.FINISH_REASONS
    assert literals(schema.MatchSpec, "dialect") == terms.DIALECTS
