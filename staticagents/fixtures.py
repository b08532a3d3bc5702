"""Fixture text ↔ validated documents: YAML/JSON parsing, line numbers, YAML output.

Pure functions over text; the database side lives in ``staticagents.services``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import yaml

from staticagents import schema
from staticagents.schema import DocumentInvalid, FieldError

SafeLoader: Any
SafeDumper: Any
try:  # libyaml is several times faster on large fixtures
    SafeLoader, SafeDumper = yaml.CSafeLoader, yaml.CSafeDumper
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    SafeLoader, SafeDumper = yaml.SafeLoader, yaml.SafeDumper

# A 10,000-rule fixture is about 3 MB; larger files are refused before parsing.
MAX_FIXTURE_BYTES = 20 * 1024 * 1024
# Far more than a 10,000-rule fixture needs, far less than a YAML bomb expands to.
MAX_EXPANDED_NODES = 5_000_000
ADK_REPLY_KEYS = ("text", "error", "word_delay_ms", "first_delay_ms", "tool", "fail_first")


def load_fixture(
    data: str | bytes, source: str = "<fixture>", *, max_bytes: int = MAX_FIXTURE_BYTES
) -> dict[str, Any]:
    """Parse and validate a fixture (YAML, JSON, or the ADK test-agent format)."""
    if len(data) > max_bytes:
        message = f"fixture is {len(data):,} bytes; the limit is {max_bytes:,} bytes"
        raise DocumentInvalid([FieldError("", message, "too_large")], source)
    text = _decode(data, source)
    parsed = _parse(text, source)
    try:
        if is_adk_document(parsed):
            return schema.validate_document(adk_document(parsed))
        return schema.validate_document(parsed)
    except DocumentInvalid as exc:
        raise DocumentInvalid(_with_lines(exc.errors, text), source) from None


def dump_fixture(document: dict[str, Any], fmt: str = "yaml") -> str:
    """Serialize a normalized document with stable key order."""
    if fmt == "json":
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    return yaml.dump(document, Dumper=_BlockDumper, sort_keys=False, allow_unicode=True, width=100)


def is_adk_document(data: Any) -> bool:
    return isinstance(data, dict) and "replies" in data and "rules" not in data


def adk_document(data: dict[str, Any]) -> dict[str, Any]:
    """Translate the ADK test-agent format into rules: one ``contains`` rule per problem id."""
    errors = [
        FieldError(key, "unknown key", "unknown_key")
        for key in data
        if key not in ("version", "replies")
    ]
    if data.get("version", 1) != 1:
        errors.append(
            FieldError(
                "version",
                f"unsupported version {data['version']!r} (only 1 is supported)",
                "invalid",
            )
        )
    replies = data.get("replies")
    if not isinstance(replies, dict):
        errors.append(FieldError("replies", "must be a mapping of problem id to reply", "type"))
        raise DocumentInvalid(errors)
    errors.extend(_overlapping_ids(list(replies)))
    rules = []
    for problem, reply in replies.items():
        rule, problems = _adk_rule(str(problem), reply)
        errors.extend(problems)
        rules.append(rule)
    if errors:
        raise DocumentInvalid(errors)
    return {"version": 1, "rules": rules}


def _adk_rule(problem: str, reply: Any) -> tuple[dict[str, Any], list[FieldError]]:
    path = f"replies.{problem}"
    if not isinstance(reply, dict):
        return {}, [FieldError(path, "must be a mapping", "type")]
    errors = [
        FieldError(f"{path}.{key}", "unknown key", "unknown_key")
        for key in reply
        if key not in ADK_REPLY_KEYS
    ]
    answer: dict[str, Any] = {"content": reply.get("text", "")}
    stream = {k: reply[k] for k in ("first_delay_ms", "word_delay_ms") if k in reply}
    if stream:
        answer["stream"] = stream
    if "error" in reply:
        error = reply["error"]
        answer["error"] = {"message": error} if isinstance(error, str) else error
    if "fail_first" in reply:
        answer["fail_first"] = reply["fail_first"]
    name = re.sub(r"[^-a-zA-Z0-9_]", "-", problem) or "problem"
    rule: dict[str, Any] = {"name": name, "match": {"contains": problem}}
    if "tool" in reply:
        tool = reply["tool"]
        call = {"name": tool} if isinstance(tool, str) else tool
        rule["responses"] = [{"tool_calls": [call]}, answer]
    else:
        rule["response"] = answer
    return rule, errors


def _overlapping_ids(ids: list[str]) -> Iterator[FieldError]:
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


def _parse(text: str, source: str) -> Any:
    if text.lstrip().startswith(("{", "[")):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            if not _looks_like_flow_yaml(exc):
                raise DocumentInvalid(
                    [FieldError("", f"invalid JSON: {exc.msg}", "syntax", exc.lineno)], source
                ) from None
    try:
        loader = SafeLoader(text)
        try:
            root = loader.get_single_node()
            if root is None:
                return None
            _check_expansion(root, source)
            return loader.construct_document(root)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        message = f"invalid YAML: {exc.problem or exc.context}"
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
