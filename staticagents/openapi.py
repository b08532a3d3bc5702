"""What the OpenAPI descriptions of the DRF routes share (Galaxy's API, the control API).

drf-spectacular serves the schema at ``/api/schema/``. The views read their
bodies themselves (through pydantic models or a raw read), so it cannot guess
them: each API describes its views in a ``schema`` module of its own
(``dialects/galaxy/schema.py``, ``control/schema.py``) with ``describe``, a
drf-spectacular view extension, rather than in decorators spread over the views;
``DescribedGenerator`` (the generator drf-spectacular is set to use) imports them,
so nothing loads them, or drf-spectacular, before a schema is asked for.
Request bodies come from the same pydantic models that validate them, so the
description cannot drift from what the views accept. Every error is declared
with its route's error shape; the fuzz tests (tests/test_fuzz.py) hold the
service to it.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, cast

from drf_spectacular.extensions import OpenApiViewExtension
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.utils import (
    extend_schema_view,
)
from pydantic import BaseModel

from staticagents.document import schema as fixture_schema

Schema = dict[str, Any]
COMPONENT_PREFIX = "Fixture"  # pydantic's models, beside drf-spectacular's own components


# -- small schema builders ----------------------------------------------------------------


def obj(required: dict[str, Schema], optional: dict[str, Schema] | None = None) -> Schema:
    return {
        "type": "object",
        "required": list(required),
        "properties": {**required, **(optional or {})},
    }


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def array(items: Schema) -> Schema:
    return {"type": "array", "items": items}


STRING: Schema = {"type": "string"}
INTEGER: Schema = {"type": "integer"}
NUMBER: Schema = {"type": "number"}
BOOLEAN: Schema = {"type": "boolean"}
OBJECT: Schema = {"type": "object"}
MESSAGE = obj({"message": STRING})


def model_schema(model: type[BaseModel]) -> Schema:
    """A pydantic model's JSON schema, its nested models pointing at components."""
    found = model.model_json_schema(
        ref_template=f"#/components/schemas/{COMPONENT_PREFIX}{{model}}"
    )
    found.pop("$defs", None)
    return found


def pydantic_components() -> dict[str, Schema]:
    """The fixture schema's models, as components (added by ``add_components``)."""
    found = fixture_schema.RuleSpec.model_json_schema(
        ref_template=f"#/components/schemas/{COMPONENT_PREFIX}{{model}}"
    )
    components = {f"{COMPONENT_PREFIX}{name}": s for name, s in found.pop("$defs", {}).items()}
    components[f"{COMPONENT_PREFIX}RuleSpec"] = found
    return components


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


# Shapes used by many operations: components, added by ``add_components``.
SHARED: dict[str, Schema] = {}


def shared(name: str, schema: Schema) -> Schema:
    SHARED[name] = schema
    return ref(name)


def add_components(result: Schema, **kwargs: Any) -> Schema:
    """drf-spectacular postprocessing hook (settings SPECTACULAR_SETTINGS)."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(pydantic_components())
    schemas.update(SHARED)
    return result


RULE_REF = ref(f"{COMPONENT_PREFIX}RuleSpec")


class _Described(OpenApiViewExtension):  # type: ignore[no-untyped-call]
    """A view extension that wraps the target view in ``extend_schema_view(**methods)``."""

    methods: dict[str, Any] = {}

    def view_replacement(self) -> type:
        view = cast(type, self.target_class)  # drf-spectacular has imported the dotted path
        # The view's own docstring only: a base class's says nothing about this route.
        own = {"__doc__": view.__dict__.get("__doc__") or ""}
        described: type = extend_schema_view(**self.methods)(type(view.__name__, (view,), own))
        return described


def describe(target: str, **methods: Any) -> None:
    """Describe the view class at dotted path ``target``, one ``extend_schema`` per method."""
    name = target.rsplit(".", 1)[-1] + "Description"
    type(name, (_Described,), {"target_class": target, "methods": methods})


DESCRIPTIONS = ("staticagents.control.schema", "staticagents.dialects.galaxy.schema")


class DescribedGenerator(SchemaGenerator):
    """drf-spectacular's generator, the views' descriptions imported first."""

    def get_schema(self, request: Any = None, public: bool = False) -> Schema:
        for module in DESCRIPTIONS:
            import_module(module)
        schema: Schema = super().get_schema(request=request, public=public)  # type: ignore[no-untyped-call]
        return schema
