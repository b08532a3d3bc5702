"""Fixture text ↔ validated documents: YAML/JSON parsing, line numbers, YAML output.

Pure functions over text; the database side lives in ``staticagents.services``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import yaml
from pydantic import Field, field_validator

from staticagents.core.storable import (
    HugeNumber,
    Trail,
    noting_repeats,
    parse_json_int,
    path_of,
    repeated_json_keys,
)
from staticagents.document import schema
from staticagents.document.terms import MAX_FIXTURE_BYTES, DocumentInvalid, FieldError

SafeLoader: Any
SafeDumper: Any
try:  # libyaml is several times faster on large fixtures
    SafeLoader, SafeDumper = yaml.CSafeLoader, yaml.CSafeDumper
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    SafeLoader, SafeDumper = yaml.SafeLoader, yaml.SafeDumper


class _Loader(SafeLoader):  # type: ignore[misc]
    """The safe loader, keeping an integer too long for ``int()`` as a ``HugeNumber``."""


def _construct_int(loader: Any, node: yaml.ScalarNode) -> Any:
    text = loader.construct_scalar(node)
    if len(text) > 40:
        return HugeNumber(text)
    return yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)

# Far more than a 10,000-rule fixture needs, far less than a YAML bomb expands to.
MAX_EXPANDED_NODES = 5_000_000


def load_fixture(
    data: str | bytes, source: str = "<fixture>", *, max_bytes: int = MAX_FIXTURE_BYTES
) -> dict[str, Any]:
    """Parse and validate a fixture (YAML, JSON, or the ADK test-agent format)."""
    if len(data) > max_bytes:
        message = f"fixture is {len(data):,} bytes; the limit is {max_bytes:,} bytes"
        raise DocumentInvalid([FieldError("", message, "too_large")], source)
    text = _decode(data, source)
    parsed, duplicates = _parse(text, source)
    try:
        if is_adk_document(parsed):
            document = schema.validate_document(adk_document(parsed))
        else:
            document = schema.validate_document(parsed)
    except DocumentInvalid as exc:
        errors = _with_lines(exc.errors, text)
        raise DocumentInvalid(_in_line_order(duplicates + errors), source) from None
    if duplicates:
        raise DocumentInvalid(duplicates, source)
    return document


def dump_fixture(document: dict[str, Any], fmt: str = "yaml") -> str:
    """Serialize a normalized document with stable key order."""
    if fmt == "json":
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    return yaml.dump(document, Dumper=_BlockDumper, sort_keys=False, allow_unicode=True, width=100)


def is_adk_document(data: Any) -> bool:
    return isinstance(data, dict) and "replies" in data and "rules" not in data


class AdkReply(schema.Strict):
    """One problem's reply in the ADK test-agent format: ``replies.<problem id>``."""

    text: str = ""
    error: schema.ErrorSpec | None = None
    word_delay_ms: int | None = Field(default=None, ge=0, le=600_000)
    first_delay_ms: int | None = Field(default=None, ge=0, le=600_000)
    tool: schema.ToolCallSpec | None = None
    fail_first: int | None = Field(default=None, ge=0, le=schema.COLUMN_INT_MAX)

    @field_validator("error", mode="before")
    @classmethod
    def _error_message(cls, value: Any) -> Any:
        return {"message": value} if isinstance(value, str) else value

    @field_validator("tool", mode="before")
    @classmethod
    def _tool_name(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value


def adk_document(data: dict[str, Any]) -> dict[str, Any]:
    """Translate the ADK test-agent format into rules: one ``contains`` rule per problem id.

    Errors name the ADK document's own paths (``replies.P-17.colour: unknown key``).
    """
    errors = [
        FieldError(key, "unknown key", "unknown_key")
        for key in data
        if key not in ("version", "replies")
    ]
    version = data.get("version", 1)
    if type(version) is not int or version != 1:  # True == 1, but it is not a version
        message = f"unsupported version {version!r} (only 1 is supported)"
        errors.append(FieldError("version", message, "invalid"))
    replies = data.get("replies")
    if not isinstance(replies, dict):
        errors.append(FieldError("replies", "must be a mapping of problem id to reply", "type"))
        raise DocumentInvalid(errors)
    errors.extend(_empty_ids(replies))
    errors.extend(_overlapping_ids([str(problem) for problem in replies if problem != ""]))
    rules: list[dict[str, Any]] = []
    names: set[str] = set()
    for problem, reply in replies.items():
        try:
            spec = schema.validate_part(AdkReply, reply, prefix=f"replies.{problem}")
        except DocumentInvalid as exc:
            errors.extend(exc.errors)
            continue
        rules.append(_adk_rule(str(problem), spec, _unique_name(str(problem), names)))
    if errors:
        raise DocumentInvalid(errors)
    return {"version": 1, "rules": rules}


def _adk_rule(problem: str, reply: dict[str, Any], name: str) -> dict[str, Any]:
    """The problem's script: the tool call (if any), then the text or the error.

    ``fail_first`` makes the problem's first step fail that many times (with
    ``error`` when given) before it answers, as a flaky model would.
    """
    timing = {k: reply[k] for k in ("first_delay_ms", "word_delay_ms") if k in reply}
    answer: dict[str, Any] = {"content": reply.get("text", "")}
    steps = [answer]
    if "tool" in reply:
        steps.insert(0, {"tool_calls": [reply["tool"]]})
    if "fail_first" in reply:
        steps[0]["fail_first"] = reply["fail_first"]
        if "error" in reply:
            steps[0]["error"] = reply["error"]
    elif "error" in reply:
        answer["error"] = reply["error"]
    for step in steps:
        if timing:
            step["stream"] = timing
    rule: dict[str, Any] = {"name": name, "match": {"contains": problem}}
    if len(steps) > 1:
        rule["responses"] = steps
    else:
        rule["response"] = answer
    return rule


def _unique_name(problem: str, taken: set[str]) -> str:
    """A rule name from the problem id; ids that slug alike ("P 1", "P-1") get a suffix."""
    base = re.sub(r"[^-a-zA-Z0-9_]", "-", problem)[:190] or "problem"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    taken.add(name)
    return name


def _empty_ids(replies: dict[Any, Any]) -> Iterator[FieldError]:
    if "" in replies:
        yield FieldError("replies", "a problem id must not be empty", "invalid")


def _overlapping_ids(ids: list[str]) -> Iterator[FieldError]:
    """Two ids where one occurs in the other: a question naming the longer matches both."""
    for i, first in enumerate(ids):
        for second in ids[i + 1 :]:
            if first in second or second in first:
                inner, outer = (first, second) if first in second else (second, first)
                yield FieldError(
                    f"replies.{outer}",
                    f"problem ids {inner!r} and {outer!r} overlap: {inner!r} occurs in {outer!r}",
                    "overlap",
                )


# -- parsing ------------------------------------------------------------------


def _decode(data: str | bytes, source: str) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DocumentInvalid(
            [
                FieldError(
                    "", f"not UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start}", "encoding"
                )
            ],
            source,
        ) from None


def _parse(text: str, source: str) -> tuple[Any, list[FieldError]]:
    """The parsed document, and its duplicate keys (where both formats let the last one win)."""
    if text.lstrip().startswith(("{", "[")):
        repeated: list[str] = []
        try:
            parsed = json.loads(
                text, parse_int=parse_json_int, object_pairs_hook=noting_repeats(repeated)
            )
            return parsed, _json_duplicates(text, repeated)
        except json.JSONDecodeError as exc:
            if not _looks_like_flow_yaml(exc):
                raise DocumentInvalid(
                    [FieldError("", f"invalid JSON: {exc.msg}", "syntax", exc.lineno)], source
                ) from None
        except RecursionError:  # the json module recurses once per level of nesting
            message = "invalid JSON: nested too deeply"
            raise DocumentInvalid([FieldError("", message, "syntax")], source) from None
    try:
        loader = _Loader(text)
        try:
            root = loader.get_single_node()
            if root is None:
                return None, []
            _check_expansion(root, source)
            duplicates = _duplicate_keys(root)  # before construction merges "<<" keys in
            return loader.construct_document(root), duplicates
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        message = f"invalid YAML: {_yaml_problem(exc, text)}"
        raise DocumentInvalid([FieldError("", message, "syntax", line)], source) from None
    except yaml.YAMLError as exc:
        raise DocumentInvalid([FieldError("", f"invalid YAML: {exc}", "syntax")], source) from None


def _check_expansion(root: yaml.Node, source: str) -> None:
    """Reject documents whose aliases expand to an enormous tree (a "YAML bomb").

    Aliases share nodes, so the parsed graph stays small while validating it
    would visit every expansion; the expanded size is counted on the graph in
    linear time, before anything walks the tree.
    """
    sizes: dict[int, int] = {}
    order: list[yaml.Node] = []
    stack = [root]
    while stack:  # post-order over the graph, each shared node once
        node = stack.pop()
        if id(node) in sizes:
            continue
        sizes[id(node)] = 0
        order.append(node)
        stack.extend(_children(node))
    for node in reversed(order):
        sizes[id(node)] = 1 + sum(sizes[id(child)] for child in _children(node))
        if sizes[id(node)] > MAX_EXPANDED_NODES:
            line = node.start_mark.line + 1
            message = (
                f"document expands to more than {MAX_EXPANDED_NODES:,} nodes through "
                "aliases (a YAML bomb?)"
            )
            raise DocumentInvalid([FieldError("", message, "too_large", line)], source)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _yaml_problem(exc: yaml.MarkedYAMLError, text: str) -> str:
    """PyYAML's words, but a tab is named (PyYAML: "character that cannot start any token")."""
    mark = exc.problem_mark
    if mark is not None:
        lines = text.splitlines()
        row = lines[mark.line] if mark.line < len(lines) else ""
        if row[mark.column : mark.column + 1] == "\t":
            column = mark.column + 1
            return f"a tab character at column {column}: YAML indents with spaces, never tabs"
    return str(exc.problem or exc.context)


def json_duplicates(text: str | bytes) -> list[FieldError]:
    """The keys given twice in one object of ``text``, valid JSON (a request body), each
    with its path and line, as a fixture's are reported."""
    repeated = repeated_json_keys(text)
    return _json_duplicates(text if isinstance(text, str) else text.decode(), repeated)


def _json_duplicates(text: str, repeated: list[str]) -> list[FieldError]:
    """The repeated keys of a JSON document, with paths and lines (JSON is YAML flow style)."""
    if not repeated:
        return []
    try:
        root = yaml.compose(text, Loader=SafeLoader)
    except yaml.YAMLError:
        root = None
    found = _duplicate_keys(root) if root is not None else []
    message = "duplicate key: the last one would silently win"
    return found or [FieldError(key, message, "duplicate") for key in repeated]


def _duplicate_keys(root: yaml.Node) -> list[FieldError]:
    """Keys given twice in one mapping, each with its path and the line of the repeat."""
    errors: list[FieldError] = []
    visited: set[int] = set()
    stack: list[tuple[yaml.Node, Trail]] = [(root, None)]
    while stack:
        node, trail = stack.pop()
        if id(node) in visited:  # an alias: its node was checked where it is defined
            continue
        visited.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first_line: dict[str, int] = {}
            for key, value in node.value:
                if not isinstance(key, yaml.ScalarNode):
                    continue
                line = key.start_mark.line + 1
                if key.value in first_line and key.value != "<<":
                    message = (
                        f"duplicate key {key.value!r} (first at line {first_line[key.value]}): "
                        "the last one would silently win"
                    )
                    errors.append(
                        FieldError(path_of("", (trail, key.value)), message, "duplicate", line)
                    )
                first_line.setdefault(key.value, line)
                stack.append((value, (trail, key.value)))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, (trail, i)) for i, item in enumerate(node.value))
    return _in_line_order(errors)


def _in_line_order(errors: list[FieldError]) -> list[FieldError]:
    return sorted(errors, key=lambda e: (e.line is None, e.line or 0))


def _looks_like_flow_yaml(exc: json.JSONDecodeError) -> bool:
    # "{rules: []}" is valid YAML flow style but not JSON: let YAML have a go.
    return "property name" in exc.msg


def _with_lines(errors: list[FieldError], text: str) -> list[FieldError]:
    if all(e.line is not None for e in errors):
        return errors
    lines = _line_map(text)
    return [
        FieldError(
            e.path, e.message, e.code, e.line if e.line is not None else _line_of(e.path, lines)
        )
        for e in errors
    ]


def _line_of(path: str, lines: dict[str, int]) -> int | None:
    while path:
        if path in lines:
            return lines[path]
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return None


def _line_map(text: str) -> dict[str, int]:
    """Path in the document → 1-based line, from the YAML node tree."""
    try:
        root = yaml.compose(text, Loader=SafeLoader)
    except yaml.YAMLError:
        return {}
    lines: dict[str, int] = {}
    stack: list[tuple[str, yaml.Node]] = [("", root)] if root is not None else []
    while stack:
        path, node = stack.pop()
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                child = f"{path}.{key.value}" if path else str(key.value)
                lines.setdefault(child, key.start_mark.line + 1)
                stack.append((child, value))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                child = f"{path}[{index}]"
                lines.setdefault(child, item.start_mark.line + 1)
                stack.append((child, item))
    return lines


class _BlockDumper(SafeDumper):  # type: ignore[misc]
    """Writes multi-line strings as literal blocks, so exported tool YAML stays readable."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value and not value.endswith((" ", "\t")) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _represent_str)
