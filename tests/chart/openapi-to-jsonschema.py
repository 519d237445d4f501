#!/usr/bin/env python3
"""Writes kubeconform's schema layout from a live API server's OpenAPI v2 document.

Usage: kubectl get --raw /openapi/v2 | openapi-to-jsonschema.py OUT_DIR

One standalone, strict JSON schema per kind, named as kubeconform looks them up:
`{kind}-{group prefix}-{version}.json` (`{kind}-{version}.json` for the core group), every
`$ref` inlined and `additionalProperties: false` on objects with declared properties. The
schemas then describe exactly the API server the tests run, with no download.
"""

import copy
import json
import os
import sys


def inline(node, definitions, seen):
    if isinstance(node, list):
        return [inline(item, definitions, seen) for item in node]
    if not isinstance(node, dict):
        return node
    if isinstance(node.get("$ref"), str):
        name = node["$ref"].split("/")[-1]
        if name in seen:  # recursive types (JSONSchemaProps): stop with an open schema
            return {}
        return inline(copy.deepcopy(definitions[name]), definitions, seen | {name})
    out = {k: inline(v, definitions, seen) for k, v in node.items()}
    if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    # int-or-string and quantities are `format` hints in OpenAPI, unions in JSON schema.
    if out.get("format") == "int-or-string":
        out.pop("type", None)
        out["oneOf"] = [{"type": "string"}, {"type": "integer"}]
    return out


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    doc = json.load(sys.stdin)
    definitions = doc["definitions"]
    written = 0
    for name, schema in definitions.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            group, version, kind = gvk["group"], gvk["version"], gvk["kind"]
            suffix = f"-{group.split('.')[0]}-{version}" if group else f"-{version}"
            full = inline(copy.deepcopy(schema), definitions, {name})
            for key in ("apiVersion", "kind"):
                full.get("properties", {}).get(key, {}).pop("enum", None)
            path = os.path.join(out_dir, f"{kind.lower()}{suffix.lower()}.json")
            with open(path, "w") as f:
                json.dump(full, f)
            written += 1
    print(f"wrote {written} schemas to {out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
