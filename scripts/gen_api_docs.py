"""Generate docs/openapi.json and docs/api.md from the service's app, so the API docs cannot
drift.

Usage: python scripts/gen_api_docs.py [--check]
(--check exits 1 when either file is out of date; tests/test_api_docs.py runs the same check.)

The schema is ``create_app(Config()).openapi()``: FastAPI builds it from the routes and the
records without running the app's lifespan, so nothing is opened, loaded or served. It is
pinned as it comes: its ``info.version`` is the API version (``v1``, the version in the
paths; :data:`medverify.service.app.API_VERSION`), the same in the live ``/openapi.json``,
so a release bump does not make the pinned copy stale; ``GET /healthz`` reports the package
version. The auth role of each endpoint is read from its dependencies
(``medverify.service.auth.role``), and the error codes from the service's source (every
``ApiError(STATUS, ErrorCode.X, ...)`` and ``error_response(STATUS, ErrorCode.X, ...)``) and
its table of domain errors (``medverify.service.errors.DOMAIN_ERRORS``). Every
``ErrorCode`` has a line in CODE_TEXT and every line an ``ErrorCode`` (a test checks), so a
new code or role cannot go undocumented: rendering fails until it has a line here.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

import medverify.service
from medverify.config import Config, ServiceSettings
from medverify.service.app import API_VERSION, create_app
from medverify.service.error_codes import ErrorCode
from medverify.service.errors import _STATUS_CODES, DOMAIN_ERRORS
from medverify.store.access import Role

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_FILE = ROOT / "docs" / "openapi.json"
DOC = ROOT / "docs" / "api.md"

HEADER = f"""# HTTP API reference

Generated from the code by `python scripts/gen_api_docs.py`, with the OpenAPI schema it
pins, [openapi.json](openapi.json); a test fails when either is out of date. A running
service serves the same schema at `/openapi.json` (`info.version` is the API version,
`{API_VERSION}`, in both; `GET /healthz` reports the package version) and an interactive page
at `/docs`. Error responses are JSON on every endpoint, the HTML report's included.
How to run the service, keys, jobs and limits in prose: [service.md](service.md).

Every request and response body is JSON (`Content-Type: application/json`) except the HTML
report; bodies with fields a record does not know are refused (422). Times are ISO-8601 in
UTC.
"""

ROLE_TEXT = {
    Role.CLIENT: "check, risk, audit and fact-check; its own jobs, and the runs of its own "
    "requests and jobs",
    Role.REVIEWER: "what a client may, and the clinician review queue (`/v1/review/...`: "
    "items, labels, agreement, progress)",
    Role.ADMIN: "everything: keys, the audit log, every job and run",
}

CODE_TEXT = {
    "bad_request": "the framework refused the request (not sent today: a body it cannot "
    "parse is `invalid_json`)",
    "conflict": "the framework refused the request as a conflict (not sent today: the "
    "service's conflicts have their own codes)",
    "error": "a status the framework answered that has no code of its own (not sent today)",
    "invalid_json": "the body is not valid JSON in UTF-8",
    "unauthorized": "no key, a malformed, unknown or wrong one, or a revoked one "
    "(`WWW-Authenticate: Bearer`)",
    "forbidden": "the key's role is too low for the endpoint",
    "not_found": "no such job, run, key, review item or KB change for this key (another "
    "key's job or run is not found too, unless the key is an admin's), or no such path",
    "method_not_allowed": "the path exists, not with this method",
    "not_configured": "the endpoint needs configuration the service lacks (`POST /v1/risk` "
    "without a `[risk] classifier`)",
    "too_large": "the body is over `max_body_bytes` (also when its length is not declared), "
    "or a job has more than `max_answers_per_job` answers",
    "unsupported_media_type": "a POST body that is not `application/json`",
    "invalid_request": "the body or a parameter does not validate; `detail` lists every "
    "problem (`loc`, `msg`, `type`)",
    "invalid_input": "an answer the checker refuses (empty, or over `max_answer_chars`; a "
    "job's answers are checked when it is submitted), or a review label's `source_url` whose "
    "host is not public",
    "item_closed": "the review item is closed: it takes no more labels",
    "already_labelled": "this key has labelled the review item already (an adjudicator must "
    "be a third reviewer)",
    "own_key": "an admin key cannot revoke itself (another admin key, or `medverify keys "
    "revoke` on the server, can)",
    "last_admin": "the key is the last active admin key: revoking it would lock every admin "
    "out of the API; create another admin key first",
    "rate_limited": "over the key's rate limit, or over the client address's limit on "
    "requests without a valid key (checked before the key); `Retry-After` says when to try "
    "again, in the same whole seconds as the message",
    "overloaded": "no check slot came free within `queue_wait_s`; nothing was checked or "
    "recorded, `Retry-After` says when the queue should have room",
    "too_long": "the answer should take longer to check than `sync_work_share` of "
    "`request_timeout_s`, even alone (its sentences times the time of one, learnt from the "
    "checks so far); refused at once, nothing checked or recorded, no `Retry-After`: submit "
    "it as a job (`POST /v1/jobs/check`)",
    "internal": "an unexpected error; the message names its type, the server log has "
    "the details",
    "not_ready": "the knowledge base or a model did not load; `GET /readyz` says what",
    "timeout": "no result within `request_timeout_s`: submit long work as a job",
    "store_unavailable": "the shared store's database server (PostgreSQL) cannot be reached; "
    "nothing was half-written, `Retry-After` says when to try again (docs/scale.md)",
}

FRAMEWORK_STATUSES = (404, 405)
"""Statuses FastAPI answers itself (unknown path, wrong method), in the one error shape."""

LIMITS = [
    ("max_body_bytes", "larger request bodies: 413 `too_large`"),
    ("max_answers_per_job", "answers (or audit inputs) in one job; more: 413 `too_large`"),
    ("request_timeout_s", "seconds `POST /v1/check` and `POST /v1/risk` may work (a check's "
     "clock starts when its slot is granted); then 504 `timeout`"),
    ("queue_wait_s", "seconds a check waits for a slot; then 503 `overloaded` with "
     "`Retry-After`, nothing checked or recorded"),
    ("sync_work_share", "share of `request_timeout_s` a check's predicted time may take: a "
     "longer answer gets 503 `too_long` at once; a long one that fits takes several slots "
     "so that fewer checks share the cores with it"),
    ("rate_per_minute", "requests a minute per key (per worker process); over it: 429"),
    ("rate_burst", "requests a key may make at once before the rate applies"),
    ("auth_failures_per_minute", "requests without a valid key a minute per client address "
     "(per worker process); over it: 429 before any key is read"),
    ("auth_failure_burst", "such requests an address may make at once"),
]

_PATTERN = re.compile(r'(?:ApiError|error_response)\(\s*(\d{3}),\s*'
                      r'(?:ErrorCode\.([A-Z_]+)|"([a-z_]+)")')
_METHODS = ("get", "post", "put", "patch", "delete")
_BODY_METHODS = ("POST", "PUT", "PATCH")
_VOCABULARY = ("medverify.service.records", "medverify.store.jobs", "medverify.store.access")


# ----------------------------------------------------------------------- the schema


def build() -> tuple[FastAPI, dict[str, Any]]:
    """The app (never started) and its OpenAPI schema, as pinned."""
    app = create_app(Config())
    schema = json.loads(json.dumps(app.openapi()))  # a copy: FastAPI caches its own
    return app, schema


def render_schema(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# ----------------------------------------------------------------------- facts from code


def route_role(route: APIRoute) -> Role | None:
    """The role an endpoint needs: the ``needed`` of its ``auth.role`` dependency."""
    pending = list(route.dependant.dependencies)
    while pending:
        dep = pending.pop()
        pending.extend(dep.dependencies)
        if dep.call is not None and inspect.isfunction(dep.call):
            needed = inspect.getclosurevars(dep.call).nonlocals.get("needed")
            if isinstance(needed, Role):
                return needed
    return None


def error_codes() -> list[tuple[int, str]]:
    """(status, code) of every error the service answers, sorted by status."""
    found: set[tuple[int, str]] = set()
    for path in sorted(Path(medverify.service.__file__).parent.rglob("*.py")):
        text = path.read_text("utf-8")
        found |= {(int(status), (ErrorCode[name] if name else ErrorCode(code)).value)
                  for status, name, code in _PATTERN.findall(text)}
    found |= {(row.status, row.code.value) for row in DOMAIN_ERRORS.values()}
    found |= {(status, _STATUS_CODES[status].value) for status in FRAMEWORK_STATUSES}
    missing = sorted({code for _, code in found} - set(CODE_TEXT))
    if missing:
        raise SystemExit(f"error codes without a line in CODE_TEXT: {', '.join(missing)}")
    return sorted(found)


def _vocabulary() -> set[str]:
    """Names of the records the service adds (documented field by field below)."""
    names: set[str] = set()
    for module in _VOCABULARY:
        names |= {name for name, value in vars(sys.modules[module]).items()
                  if inspect.isclass(value) and value.__module__ == module}
    return names


# ----------------------------------------------------------------------- markdown


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^a-z0-9 _-]", "", heading.lower())
    return text.replace(" ", "-")


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def type_of(schema: dict[str, Any]) -> str:
    """A schema as a short phrase, records linked to their section."""
    if "$ref" in schema:
        name = _ref_name(schema["$ref"])
        return f"[`{name}`](#{anchor(name)})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            parts = [type_of(s) for s in schema[key]]
            return " or ".join(dict.fromkeys(parts))
    kind = schema.get("type")
    if kind == "string" and "format" in schema:
        return f"`string` ({schema['format']})"
    if kind == "array":
        return f"list of {type_of(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {type_of(schema['additionalProperties'])}"
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return "one of " + ", ".join(f"`{v}`" for v in schema["enum"])
    return f"`{kind or 'any'}`"


def _constraints(schema: dict[str, Any]) -> str:
    words = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">",
             "exclusiveMaximum": "<", "minLength": "length >=", "maxLength": "length <=",
             "minItems": "items >=", "maxItems": "items <="}
    parts = [f"{words[k]} {schema[k]}" for k in words if k in schema]
    if "default" in schema and schema["default"] not in ([], {}):
        parts.append(f"default `{json.dumps(schema['default'])}`")
    return ", ".join(parts)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _first_sentence(text: str) -> str:
    flat = " ".join(text.split())
    match = re.match(r"(.+?\.)(\s|$)", flat)
    return match.group(1) if match else flat


def _summary(operation: dict[str, Any]) -> str:
    """An endpoint's first paragraph (its docstring's first line)."""
    text = operation.get("description") or operation.get("summary", "")
    return " ".join(text.split("\n\n")[0].split())


def _roles_from(role: Role) -> str:
    """``role`` and the ones above it."""
    roles = [f"`{r.value}`" for r in list(Role)[list(Role).index(role):]]
    return roles[0] if len(roles) == 1 else ", ".join(roles[:-1]) + " or " + roles[-1]


def _body_of(operation: dict[str, Any]) -> dict[str, Any] | None:
    content = operation.get("requestBody", {}).get("content", {})
    return content.get("application/json", {}).get("schema")


def _responses(operation: dict[str, Any]) -> list[tuple[str, str]]:
    """(status, what) of the success responses."""
    out = []
    for status, response in sorted(operation["responses"].items()):
        if not status.startswith("2"):
            continue
        content = response.get("content", {})
        what = ", ".join(f"{type_of(c.get('schema', {}))} (`{kind}`)"
                         for kind, c in content.items()) or "no body"
        out.append((status, what))
    return out


def _errors(method: str, route: APIRoute, operation: dict[str, Any]) -> str:
    """The errors every endpoint of this shape can answer (its description adds its own)."""
    parts: list[tuple[int, str]] = []
    role = route_role(route)
    if role is not None:
        parts += [(401, "unauthorized"), (429, "rate_limited")]
        if role is not next(iter(Role)):  # a higher role than the lowest: 403 possible
            parts.append((403, "forbidden"))
    if method in _BODY_METHODS:
        parts += [(413, "too_large"), (415, "unsupported_media_type")]
    if _body_of(operation) is not None:
        parts.append((400, "invalid_json"))
    if _body_of(operation) is not None or operation.get("parameters"):
        parts.append((422, "invalid_request"))
    if any(p["in"] == "path" for p in operation.get("parameters", [])):
        parts.append((404, "not_found"))
    return ", ".join(f"{status} `{code}`" for status, code in sorted(parts))


def _parameters(operation: dict[str, Any]) -> list[str]:
    params = operation.get("parameters", [])
    if not params:
        return []
    lines = ["| parameter | in | type | notes |", "|---|---|---|---|"]
    for p in params:
        notes = _constraints(p.get("schema", {}))
        if p.get("required"):
            notes = ", ".join(x for x in ("required", notes) if x)
        lines.append(f"| `{p['name']}` | {p['in']} | {type_of(p.get('schema', {}))} | "
                     f"{_cell(notes)} |")
    return [*lines, ""]


def _endpoint(method: str, path: str, route: APIRoute, operation: dict[str, Any]) -> str:
    role = route_role(route)
    lines = [f"### `{method} {path}`", "", operation.get("description", "").strip(), ""]
    auth = f"a key with role {_roles_from(role)}" if role is not None else "none (no key)"
    lines.append(f"- **Auth:** {auth}")
    body = _body_of(operation)
    if body is not None:
        lines.append(f"- **Request body:** {type_of(body)}")
    for status, what in _responses(operation):
        lines.append(f"- **Response {status}:** {what}")
    errors = _errors(method, route, operation)
    lines += [f"- **Errors:** {errors}"] if errors else []
    lines.append("")
    return "\n".join([*lines, *_parameters(operation)])


def _operations(app: FastAPI, schema: dict[str, Any]) -> list[tuple[str, str, APIRoute,
                                                                     dict[str, Any]]]:
    """(METHOD, path, route, operation) in the app's order."""
    out = []
    for route in app.routes:
        if not isinstance(route, APIRoute) or not route.include_in_schema:
            continue
        for method in _METHODS:
            if method.upper() in route.methods:
                out.append((method.upper(), route.path, route,
                            schema["paths"][route.path][method]))
    return out


def _overview(ops: list[tuple[str, str, APIRoute, dict[str, Any]]]) -> str:
    lines = ["## Endpoints", "", "| endpoint | role | what |", "|---|---|---|"]
    for method, path, route, operation in ops:
        role = route_role(route)
        heading = f"`{method} {path}`"
        what = _summary(operation)
        lines.append(f"| [{heading}](#{anchor(heading)}) | "
                     f"{role.value if role else 'none'} | {_cell(what)} |")
    lines += ["", "The service also serves `GET /openapi.json` (this schema), `GET /docs` "
              "(an interactive page), `GET /docs/oauth2-redirect` (its helper) and "
              "`GET /redoc`, with no key.", ""]
    return "\n".join(lines)


def _auth() -> str:
    lines = ["## Keys and roles", "",
             "Every endpoint but `/healthz`, `/readyz` and the pages above needs an API key: "
             "`Authorization: Bearer <secret>` (or `X-API-Key: <secret>`). Create keys with "
             "`medverify keys create NAME --role ROLE` or `POST /v1/keys`. Each role may do "
             "what the ones above it in this table may:", "",
             "| role | may |", "|---|---|"]
    for role in Role:
        if role not in ROLE_TEXT:
            raise SystemExit(f"role {role.value} has no line in ROLE_TEXT")
        lines.append(f"| `{role.value}` | {ROLE_TEXT[role]} |")
    return "\n".join([*lines, ""])


def _error_section(schema: dict[str, Any]) -> str:
    example = {"error": {"code": "rate_limited", "message": "over 600 requests a minute for "
                         "key 4de462d8fc12; retry after 1 s", "detail": None}}
    lines = ["## Errors", "",
             "Every 4xx and 5xx response has one shape, "
             f"{type_of({'$ref': 'ErrorResponse'})}:", "", "```json",
             json.dumps(example, indent=2), "```", "",
             "`code` is for programs, `message` for people (it says what to do); `detail` "
             "lists the per-field problems of a request that did not validate (422 "
             "`invalid_request`), else it is null. A request refused with an error writes "
             "nothing but its audit-log line. Each endpoint below lists the errors that "
             "every request of its kind can get (key, rate limit, body, parameters); its "
             "description names its own, and any request may end in 500 `internal`. The "
             "codes:", "",
             "| HTTP | code | when |", "|---|---|---|"]
    for status, code in error_codes():
        lines.append(f"| {status} | `{code}` | {_cell(CODE_TEXT[code])} |")
    lines += ["", "Headers: a 429 carries `Retry-After` (whole seconds, at least 1; the "
              "Python client waits it and retries, 3 times by default), and so does a 503 "
              "`overloaded` (not retried by the client; it raises `Overloaded`); a 503 "
              "`too_long` carries none (the client raises `TooLong`: send the answer as a "
              "job); a 401 carries "
              "`WWW-Authenticate: Bearer`. There are no `X-RateLimit-*` headers.", ""]
    return "\n".join(lines)


def _limits() -> str:
    fields = ServiceSettings.model_fields
    lines = ["## Limits", "",
             "Set in the `[service]` section of the config (file or "
             "`MEDVERIFY_SERVICE__<NAME>` environment variables; "
             "[configuration.md](configuration.md)):", "",
             "| setting | default | what |", "|---|---|---|"]
    for name, text in LIMITS:
        lines.append(f"| `{name}` | {fields[name].default} | {text} |")
    lines += ["", "The rate limit is a token bucket per key in each worker process: with "
              "`--workers N` a key may make up to N times as many requests.", ""]
    return "\n".join(lines)


def _record(name: str, record: dict[str, Any]) -> list[str]:
    lines = [f"### {name}", ""]
    if record.get("description"):
        lines += [" ".join(record["description"].split()), ""]
    if "enum" in record:
        return [*lines, "One of " + ", ".join(f"`{v}`" for v in record["enum"]) + ".", ""]
    props = record.get("properties", {})
    required = set(record.get("required", []))
    lines += ["| field | type | notes |", "|---|---|---|"]
    for field, prop in props.items():
        notes = [x for x in ("required" if field in required else "",
                             " ".join(prop.get("description", "").split()),
                             _constraints(prop)) if x]
        lines.append(f"| `{field}` | {type_of(prop)} | {_cell('; '.join(notes))} |")
    return [*lines, ""]


def _refs(node: Any) -> set[str]:
    """The record names a schema refers to, at any depth of the schema itself."""
    if isinstance(node, dict):
        found = {_ref_name(node["$ref"])} if "$ref" in node else set()
        for value in node.values():
            found |= _refs(value)
        return found
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node)) if node else set()
    return set()


def _documented(schema: dict[str, Any]) -> set[str]:
    """The records documented field by field: the service's own, everything a request body
    may hold, and the records a response returns (not what those hold)."""
    records = schema["components"]["schemas"]
    names = _vocabulary() & set(records)
    pending: list[str] = []
    for ops in schema["paths"].values():
        for operation in ops.values():
            pending += _refs(_body_of(operation) or {})
            for status, response in operation["responses"].items():
                if status.startswith("2"):
                    names |= _refs(response.get("content", {}))
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name not in seen:
            seen.add(name)
            pending += sorted(_refs(records[name]))
    return names | seen


def _records(schema: dict[str, Any]) -> str:
    records = schema["components"]["schemas"]
    ours = sorted(_documented(schema))
    others = sorted(set(records) - set(ours))
    lines = ["## Records", "",
             "The records of requests and responses, field by field: the service's own, "
             "everything a request may hold, and what a response returns. The records those "
             "hold in turn (the library's, inside a `Report`, an audit or a fact-check) are "
             "listed after them; [openapi.json](openapi.json) has every field of every "
             "record, and [report.md](report.md) and [architecture.md](architecture.md) say "
             "what they mean.", ""]
    for name in ours:
        lines += _record(name, records[name])
    lines += ["### The library's records", "", "| record | what |", "|---|---|"]
    for name in others:
        text = _first_sentence(records[name].get("description", ""))
        lines.append(f"| <a id=\"{anchor(name)}\"></a>`{name}` | {_cell(text)} |")
    return "\n".join([*lines, ""])


def render_markdown(app: FastAPI, schema: dict[str, Any]) -> str:
    ops = _operations(app, schema)
    parts = [HEADER, _overview(ops), _auth(), _error_section(schema), _limits()]
    tags: dict[str, list[str]] = {}
    for method, path, route, operation in ops:
        tag = (operation.get("tags") or ["other"])[0]
        tags.setdefault(tag, []).append(_endpoint(method, path, route, operation))
    for tag, endpoints in tags.items():
        parts.append(f"## Endpoints: {tag}\n\n" + "\n".join(endpoints))
    parts.append(_records(schema))
    return "\n".join(parts).rstrip("\n") + "\n"


def render() -> dict[Path, str]:
    """Each generated file and its text."""
    app, schema = build()
    return {SCHEMA_FILE: render_schema(schema), DOC: render_markdown(app, schema)}


if __name__ == "__main__":
    outputs = render()
    if "--check" in sys.argv:
        stale = [path for path, text in outputs.items()
                 if not path.exists() or path.read_text("utf-8") != text]
        for path in stale:
            print(f"{path.relative_to(ROOT)} is out of date: run python scripts/gen_api_docs.py",
                  file=sys.stderr)
        sys.exit(1 if stale else 0)
    for path, text in outputs.items():
        path.write_text(text, "utf-8")
        print(f"wrote {path}")
