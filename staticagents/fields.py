"""Form fields that fit the data: JSON that says where its syntax error is, literals one
per line, and lists of items (tool calls, suggestions) typed in rows of small fields.

A field here only reads what was typed; the model's ``clean()`` then judges the value
through the fixture schema, exactly as it judges an imported rule.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from django import forms
from django.contrib.admin.widgets import AdminTextareaWidget
from django.core.exceptions import ValidationError
from django.forms.fields import InvalidJSONInput

from staticagents.document.terms import ACTION_PARAMETERS, CONFIDENCES

COMPACT_JSON_WIDTH = 60
EDIT_CSS = "staticagents/edit.css"


def parse_json(text: str) -> Any:
    """The value of JSON text; a syntax error names its line and column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(
            "line %(line)s, column %(column)s: %(problem)s",
            code="invalid_json",
            params={"line": exc.lineno, "column": exc.colno, "problem": exc.msg},
        ) from None
    except RecursionError:
        raise ValidationError("nested too deeply", code="invalid_json") from None


def json_text(value: Any) -> str:
    """JSON on one line when short, indented when long."""
    compact = json.dumps(value, ensure_ascii=False)
    if len(compact) <= COMPACT_JSON_WIDTH:
        return compact
    return json.dumps(value, ensure_ascii=False, indent=2)


def text_rows(text: str) -> int:
    """Rows for a textarea holding ``text``: 3 to 20, long lines counted as wrapped."""
    lines = sum(1 + len(line) // 90 for line in text.splitlines())
    return min(max(3, lines), 20)


class GrowingTextarea(AdminTextareaWidget):
    """A textarea tall enough for the text it holds (3 to 20 lines)."""

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context: dict[str, Any] = super().get_context(name, value, attrs)
        context["widget"]["attrs"]["rows"] = text_rows(str(context["widget"]["value"] or ""))
        return context


class CodeTextarea(GrowingTextarea):
    """A growing textarea in a monospace font, for JSON and literals."""

    class Media:
        css = {"all": [EDIT_CSS]}

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__({"class": "vLargeTextField code", "spellcheck": "false", **(attrs or {})})


class OptionalJSONField(forms.JSONField):
    """JSON shown blank when absent (not ``null``), indented when long, in a monospace
    textarea; a syntax error names its line and column."""

    widget = CodeTextarea

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and value.strip():
            parse_json(value)  # raises with the position; Django's own error has none
        return super().to_python(value)

    def bound_data(self, data: Any, initial: Any) -> Any:
        try:
            return super().bound_data(data, initial)
        except RecursionError:  # Django's own reading catches only syntax errors
            return InvalidJSONInput(data)

    def prepare_value(self, value: Any) -> Any:
        if value is None:
            return ""
        if isinstance(value, InvalidJSONInput):
            return value  # what the user typed, to correct
        return json_text(value)


class Typed(str):
    """Text as the curator typed it (shown again as it is, never reformatted)."""


class LiteralsField(forms.Field):
    """``contains``: one literal, or one per line (surrounding spaces and blank lines
    ignored); text that is a whole JSON string or list is read as JSON."""

    widget = CodeTextarea

    def bound_data(self, data: Any, initial: Any) -> Any:
        return Typed(data or "")

    def to_python(self, value: Any) -> Any:
        text = str(value or "").strip()
        if not text:
            return None
        if text[0] in '["':
            try:
                parsed = parse_json(text)
            except ValidationError:
                if text.startswith('["'):  # meant as a JSON list: say where it breaks
                    raise
            else:
                if isinstance(parsed, str | list):
                    return parsed
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return lines[0] if len(lines) == 1 else lines

    def prepare_value(self, value: Any) -> Any:
        if value is None:
            return ""
        if isinstance(value, Typed):
            return value
        shown = value if isinstance(value, str) else None
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            shown = "\n".join(value)
        try:
            if shown is not None and self.to_python(shown) == value:
                return shown
        except ValidationError:
            pass
        return json.dumps(value, ensure_ascii=False)  # what lines cannot say exactly


@dataclass(frozen=True)
class Column:
    """One field of an item typed in a row: its key, and how its text is read."""

    key: str
    kind: Literal["text", "json", "choice", "number"] = "text"
    choices: tuple[str, ...] = ()

    def fits(self, value: Any) -> bool:
        """Whether the row can show ``value`` so that reading it back gives it again."""
        if self.kind == "json":
            return True
        if self.kind == "choice":
            return value in self.choices
        if self.kind == "number":
            return isinstance(value, int) and not isinstance(value, bool)
        # a text input holds one line, and its surrounding spaces are not kept
        return isinstance(value, str) and value == value.strip() != "" and "\n" not in value

    def show(self, value: Any) -> str:
        return json_text(value) if self.kind == "json" else str(value)

    def read(self, text: str) -> Any:
        if self.kind == "json":
            return parse_json(text)
        if self.kind == "number":
            try:
                return int(text)
            except ValueError:
                raise ValidationError("enter a whole number", code="invalid") from None
        return text  # a choice the schema does not know is its error to report


@dataclass(frozen=True)
class ItemsInput:
    """What the curator typed: one mapping key → text per row, and the JSON box."""

    rows: tuple[Mapping[str, str], ...]
    json: str


class ItemsWidget(forms.Widget):
    """Rows of small fields (one item each, plus a blank row to add one) and a JSON box
    for the whole list; the JSON box carries the field's own name, so posting JSON
    under that name still works."""

    template_name = "staticagents/widgets/items.html"

    class Media:
        css = {"all": [EDIT_CSS]}

    def __init__(self, columns: tuple[Column, ...], noun: str) -> None:
        super().__init__()
        self.columns = columns
        self.noun = noun

    def value_from_datadict(self, data: Any, files: Any, name: str) -> ItemsInput:
        rows: list[dict[str, str]] = []
        while any(f"{name}-{len(rows)}-{column.key}" in data for column in self.columns):
            index = len(rows)
            rows.append({c.key: str(data.get(f"{name}-{index}-{c.key}", "")) for c in self.columns})
        return ItemsInput(tuple(rows), str(data.get(name, "")))

    def value_omitted_from_data(self, data: Any, files: Any, name: str) -> bool:
        return name not in data and not self.value_from_datadict(data, files, name).rows

    def id_for_label(self, id_: str) -> str:
        return f"{id_}-0-{self.columns[0].key}" if id_ else ""

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context: dict[str, Any] = super().get_context(name, None, attrs)
        typed = value if isinstance(value, ItemsInput) else ItemsInput((), "")
        filled = [row for row in typed.rows if any(text.strip() for text in row.values())]
        blank = {column.key: "" for column in self.columns}
        field_id = context["widget"]["attrs"].get("id", "")
        context["widget"].update(
            columns=self.columns,
            noun=self.noun,
            json=typed.json,
            json_rows=text_rows(typed.json),
            rows=[
                [
                    {
                        "column": column,
                        "name": f"{name}-{index}-{column.key}",
                        "id": f"{field_id}-{index}-{column.key}" if field_id else "",
                        "value": row.get(column.key, ""),
                        "lines": min(text_rows(row.get(column.key, "")), 8) - 1,
                    }
                    for column in self.columns
                ]
                for index, row in enumerate([*filled, blank])
            ],
        )
        return context


class ItemsField(forms.Field):
    """A list of mappings typed in rows (``columns``) or as JSON. Rows are offered when
    every item fits them exactly; anything else is shown, and kept, as JSON."""

    def __init__(self, *, columns: tuple[Column, ...], noun: str, **kwargs: Any) -> None:
        kwargs["widget"] = ItemsWidget(columns, noun)
        super().__init__(**kwargs)
        self.columns = columns
        self.noun = noun

    def prepare_value(self, value: Any) -> ItemsInput:
        if isinstance(value, ItemsInput):
            return value
        if value is None:
            return ItemsInput((), "")
        if isinstance(value, list) and value and all(self._fits(item) for item in value):
            shown = tuple(
                {c.key: c.show(item[c.key]) if c.key in item else "" for c in self.columns}
                for item in value
            )
            return ItemsInput(shown, "")
        return ItemsInput((), json.dumps(value, ensure_ascii=False, indent=2))

    def _fits(self, item: Any) -> bool:
        keys = {column.key: column for column in self.columns}
        return (
            isinstance(item, dict)
            and bool(item)
            and all(key in keys and keys[key].fits(value) for key, value in item.items())
        )

    def to_python(self, value: Any) -> list[Any] | None:
        typed = value if isinstance(value, ItemsInput) else self.prepare_value(value)
        rows = [row for row in typed.rows if any(text.strip() for text in row.values())]
        if typed.json.strip():
            if rows:
                raise ValidationError(
                    "Give the %(noun)ss in the rows or as JSON, not both.",
                    code="both",
                    params={"noun": self.noun},
                )
            parsed: list[Any] | None = parse_json(typed.json)
            return parsed
        return [self._read(number, row) for number, row in enumerate(rows, 1)] or None

    def _read(self, number: int, row: Mapping[str, str]) -> dict[str, Any]:
        item, errors = {}, []
        for column in self.columns:
            text = row.get(column.key, "").strip()
            if not text:
                continue
            try:
                item[column.key] = column.read(text)
            except ValidationError as exc:
                for message in exc.messages:
                    errors.append(f"{self.noun} {number}, {column.key}: {message}")
        if errors:
            raise ValidationError(errors, code="invalid")
        return item

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return bool(self.to_python(data) != initial)
        except ValidationError:
            return True


def tool_calls_field() -> ItemsField:
    return ItemsField(
        columns=(Column("name"), Column("arguments", "json")),
        noun="tool call",
        required=False,
        help_text="One tool call per row: its name and its arguments as a JSON object "
        "(blank: none). Or the whole list as JSON: [{name, arguments, id?}].",
    )


def suggestions_field() -> ItemsField:
    return ItemsField(
        columns=(
            Column("action_type", "choice", tuple(ACTION_PARAMETERS)),
            Column("description"),
            Column("confidence", "choice", CONFIDENCES),
            Column("priority", "number"),
            Column("parameters", "json"),
        ),
        noun="suggestion",
        required=False,
        help_text="Galaxy ActionSuggestions, one per row; parameters as a JSON object "
        '(tool_run needs {"tool_id": …}, save_tool {"tool_yaml": …}, view_external '
        '{"url": …}, workflow_import {"trs_id": …}). Or the whole list as JSON.',
    )


def literals_field() -> LiteralsField:
    return LiteralsField(
        required=False,
        label="Contains",
        help_text="Text the question must contain: one literal, or one per line (all must "
        'occur); surrounding spaces are ignored. A JSON list (["a", "b"]) also works.',
    )
