"""The OpenAPI document tells the truth: every status a route can answer is listed, every $ref resolves.

Statuses that come from shared machinery rather than from one route are added here, once:
401/403 wherever a bearer token is checked, 400 (a body that is not UTF-8 JSON) and 413 (the body
size limit) wherever there is a body, 503 (connection pool exhausted) on every route that reads
the database. Pydantic's nested `$defs` in hand-written request bodies move to components.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from service.text import NO_NUL

ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}
METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ERROR_REF}}}


def _hoist_defs(node: Any, schemas: dict[str, Any]) -> Any:
    """Move every nested `$defs` into components/schemas and point its refs there."""
    if isinstance(node, dict):
        for name, schema in node.pop("$defs", {}).items():
            schemas.setdefault(name, _hoist_defs(schema, schemas))
        for key, value in list(node.items()):
            if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/"):
                node[key] = "#/components/schemas/" + value.removeprefix("#/$defs/")
            else:
                node[key] = _hoist_defs(value, schemas)
    elif isinstance(node, list):
        return [_hoist_defs(item, schemas) for item in node]
    return node


def _forbid_nul(schema: dict[str, Any]) -> None:
    """Free-text parameters say what QueryTextGuard enforces (anyOf covers optional ones)."""
    for option in schema.get("anyOf", [schema]):
        if option.get("type") == "string" and "pattern" not in option and "enum" not in option:
            option["pattern"] = NO_NUL


def complete_document(generated: dict[str, Any]) -> dict[str, Any]:
    document = copy.deepcopy(generated)  # route-level openapi_extra dicts are shared between apps
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for path, item in document.get("paths", {}).items():
        for method in METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            responses = operation.setdefault("responses", {})
            for parameter in operation.get("parameters", []):
                _forbid_nul(parameter.get("schema", {}))
            if operation.get("security"):
                responses.setdefault("401", _error("missing, unknown or revoked bearer token"))
                responses.setdefault("403", _error("the token lacks the scope this route needs"))
            if "requestBody" in operation:
                responses.setdefault("400", _error("the body is not UTF-8 text in the declared content type"))
                responses.setdefault("413", _error("the body is larger than TUNEBASE_MAX_BODY_BYTES"))
                responses.setdefault("422", _error("invalid input; `fields` names each offending field"))
            if path.startswith("/v1/"):
                responses.setdefault("503", _error("every database connection stayed busy; retry later"))
            for status, response in responses.items():
                # errors leave as JSON even from routes whose success is text/plain (the .inc routes)
                content = response.get("content")
                if status[0] in "45" and content is not None and "application/json" not in content:
                    response["content"] = {"application/json": {"schema": ERROR_REF}}
    _hoist_defs(document["paths"], schemas)
    return document


def install_openapi(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            app.openapi_schema = complete_document(document)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
