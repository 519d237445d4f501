#!/usr/bin/env python3
"""Writes kubeconform's schema layout from a live API server's OpenAPI v2 document, or from
CustomResourceDefinitions of kinds the test cluster does not serve.

Usage: kubectl get --raw /openapi/v2 | openapi-to-jsonschema.py OUT_DIR
       openapi-to-jsonschema.py --crds OUT_DIR < crds.json   (a JSON array of CRD objects)

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


def strict_crd(node):
    """A CRD's structural schema made strict the same way (nullable and int-or-string too)."""
    if isinstance(node, list):
        return [strict_crd(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict_crd(v) for k, v in node.items()}
    if (
        out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out["oneOf"] = [{"type": "string"}, {"type": "integer"}]
    if out.pop("nullable", False) and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def crds(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    written = 0
    for crd in json.load(sys.stdin):
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = strict_crd(version["schema"]["openAPIV3Schema"])
            name = f"{kind.lower()}-{group.split('.')[0]}-{version['name']}.json"
            with open(os.path.join(out_dir, name), "w") as f:
                json.dump(schema, f)
            written += 1
    print(f"wrote {written} CRD schemas to {out_dir}", file=sys.stderr)


def main():
    if sys.argv[1] == "--crds":
        return crds(sys.argv[2])
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
