#!/usr/bin/env python3
"""Validates the OpenAPI document of the API (docs/openapi.json).

    scripts/check-openapi.py [docs/openapi.json]

1. The document against the official OpenAPI 3.1 schema (scripts/openapi/oas-3.1-schema.json,
   https://spec.openapis.org/oas/3.1/schema/2022-10-07) with jsonschema's Draft202012Validator.
2. Every schema under components/schemas is a valid JSON Schema 2020-12 schema.
3. Every $ref resolves inside the document.
4. What the meta-schema cannot see: operationIds are unique, every {name} of a path template is
   a path parameter of each of its operations (and no other path parameter is declared), every
   operation has x-ql-permission and a sorted, duplicate-free x-ql-error-codes whose codes all
   have a status in x-ql-error-code-statuses that the operation documents a response for.

Needs Debian's python3-jsonschema (scripts/install-deps.sh). Before trusting a pass, it checks
that the validator does refuse a broken copy of the document. Exits 1 on any failure. Whether
the document matches the route table is checked by src/ql/http/openapi_test.cc.
"""

import copy
import json
import os
import re
import sys

try:
    import jsonschema
    from jsonschema import Draft202012Validator
except ImportError:  # pragma: no cover
    sys.exit("check-openapi: python3-jsonschema is missing (scripts/install-deps.sh installs it)")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OAS_SCHEMA = os.path.join(HERE, "openapi", "oas-3.1-schema.json")
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
PERMISSIONS = {"public", "authenticated", "viewer", "operator", "admin", "owner",
               "installation_admin", "self"}


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def format_checker():
    checker = getattr(Draft202012Validator, "FORMAT_CHECKER", None)
    if checker is None:  # jsonschema < 4.13 (Debian 12 has 4.10)
        checker = getattr(jsonschema, "draft202012_format_checker", None)
    return checker


def oas_errors(oas_validator, doc):
    # The deepest first: they name what is wrong; their ancestors only say "unevaluated".
    return sorted(oas_validator.iter_errors(doc),
                  key=lambda e: (-len(e.absolute_path), [str(p) for p in e.absolute_path]))


def where(error):
    return "/" + "/".join(str(p) for p in error.absolute_path)


def resolve_pointer(doc, pointer):
    node = doc
    for raw in pointer.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return False
    return True


def check_refs(doc, failures):
    def walk(node, path):
        if isinstance(node, dict):
            target = node.get("$ref")
            if isinstance(target, str):
                if not target.startswith("#"):
                    failures.append(f"{path}: $ref {target!r} leaves the document")
                elif not resolve_pointer(doc, target[1:]):
                    failures.append(f"{path}: $ref {target!r} does not resolve")
            for key, value in node.items():
                walk(value, f"{path}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}/{i}")
    walk(doc, "")


def deref(doc, node):
    """Follows local $refs; an unresolvable one (reported by check_refs) gives {}."""
    for _ in range(32):
        if not (isinstance(node, dict) and isinstance(node.get("$ref"), str)
                and node["$ref"].startswith("#/")):
            return node
        target = doc
        for raw in node["$ref"][2:].split("/"):
            token = raw.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or token not in target:
                return {}
            target = target[token]
        node = target
    return {}


def check_operations(doc, failures):
    statuses = doc.get("x-ql-error-code-statuses")
    if not isinstance(statuses, dict) or not statuses:
        failures.append("x-ql-error-code-statuses: missing or empty")
        statuses = {}
    seen_ids = {}
    count = 0
    for path, item in doc.get("paths", {}).items():
        template = set(re.findall(r"\{([^}/]+)\}", path))
        shared = [deref(doc, p) for p in item.get("parameters", [])]
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            count += 1
            here = f"{method.upper()} {path}"
            op_id = op.get("operationId")
            if not op_id:
                failures.append(f"{here}: no operationId")
            elif op_id in seen_ids:
                failures.append(f"{here}: operationId {op_id!r} also on {seen_ids[op_id]}")
            else:
                seen_ids[op_id] = here
            params = shared + [deref(doc, p) for p in op.get("parameters", [])]
            declared = {p.get("name") for p in params if p.get("in") == "path"}
            for name in sorted(template - declared):
                failures.append(f"{here}: path parameter {{{name}}} is not declared")
            for name in sorted(declared - template):
                failures.append(f"{here}: path parameter {name!r} is not in the path")
            keys = [(p.get("in"), p.get("name")) for p in params]
            if len(keys) != len(set(keys)):
                failures.append(f"{here}: a parameter is declared twice")
            permission = op.get("x-ql-permission")
            if permission not in PERMISSIONS:
                failures.append(f"{here}: x-ql-permission {permission!r} is not one of "
                                + ", ".join(sorted(PERMISSIONS)))
            if permission == "public" and op.get("security") != []:
                failures.append(f"{here}: a public operation needs security: []")
            if permission != "public" and "security" in op:
                failures.append(f"{here}: an authenticated operation keeps the document's security")
            codes = op.get("x-ql-error-codes")
            if (not isinstance(codes, list) or not codes
                    or not all(isinstance(c, str) and re.fullmatch(r"[a-z][a-z0-9_]*", c) for c in codes)):
                failures.append(f"{here}: x-ql-error-codes must be a non-empty list of snake_case codes")
                continue
            if codes != sorted(set(codes)):
                failures.append(f"{here}: x-ql-error-codes must be sorted and without duplicates")
            responses = set(op.get("responses", {}).keys())
            for code in codes:
                known = statuses.get(code)
                if not known:
                    failures.append(f"{here}: {code} has no entry in x-ql-error-code-statuses")
                elif not any(str(s) in responses for s in known):
                    failures.append(f"{here}: {code} answers {known}, a status the operation "
                                    "documents no response for")
    return count


def main(argv):
    doc_path = argv[1] if len(argv) > 1 else os.path.join(ROOT, "docs", "openapi.json")
    failures = []
    oas = load(OAS_SCHEMA)
    Draft202012Validator.check_schema(oas)
    oas_validator = Draft202012Validator(oas, format_checker=format_checker())

    # The validator must refuse what is broken, or a pass means nothing.
    sample = {"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": {}}
    if oas_errors(oas_validator, sample):
        failures.append("self-test: a minimal valid document was refused")
    for broken in ({"openapi": "3.1.0", "paths": {}},
                   dict(sample, paths={"/x": {"get": {"responses": {"200": {}}}}}),
                   dict(sample, paths={"/x": {"get": {"responses": {}, "x": 1}}})):
        if not oas_errors(oas_validator, broken):
            failures.append("self-test: the validator accepted a broken document: "
                            + json.dumps(broken))

    try:
        doc = load(doc_path)
    except (OSError, ValueError) as e:
        print(f"check-openapi: {doc_path}: {e}", file=sys.stderr)
        return 1

    for error in oas_errors(oas_validator, doc)[:50]:
        failures.append(f"OpenAPI 3.1 schema: {where(error)}: {error.message}")
    broken = copy.deepcopy(doc)
    broken.pop("info", None)
    if not oas_errors(oas_validator, broken):
        failures.append("self-test: the document without info was accepted")

    schemas = doc.get("components", {}).get("schemas", {})
    for name, schema in schemas.items():
        try:
            Draft202012Validator.check_schema(schema)
        except jsonschema.exceptions.SchemaError as e:
            failures.append(f"components/schemas/{name}: not a JSON Schema 2020-12 schema: "
                            f"{e.message}")
    check_refs(doc, failures)
    operations = check_operations(doc, failures)

    if failures:
        for failure in failures:
            print("check-openapi: " + failure, file=sys.stderr)
        print(f"check-openapi: {doc_path}: {len(failures)} problem(s)", file=sys.stderr)
        return 1
    print(f"check-openapi: {doc_path}: valid OpenAPI {doc.get('openapi')} "
          f"({operations} operations, {len(schemas)} schemas; jsonschema {jsonschema_version()})")
    return 0


def jsonschema_version():
    try:
        from importlib.metadata import version
        return version("jsonschema")
    except Exception:  # pragma: no cover
        return "?"


if __name__ == "__main__":
    sys.exit(main(sys.argv))
