#!/usr/bin/env python3
"""Queries every panel of the Grafana dashboard from a Prometheus, as Grafana would.

Usage: dashboard-data.py PROMETHEUS_URL DASHBOARD.json START END [--var NAME=VALUE]...
       [--step SECONDS] [--source TEXT] > data.json

Each target's expression gets the dashboard variables substituted ($job, $namespace, …;
$__rate_interval as Grafana computes it for the step) and runs as a range query over
[START, END]; series are named by the target's legendFormat. The output is what
dashboard-picture.py draws: {"source", "start", "end", "queries": {panel id: [expr]},
"panels": {panel id: [series]}}; the queries let a test notice when the dashboard changed since.
Python 3 standard library only.
"""

import argparse
import sys
import json
import re
import urllib.parse
import urllib.request


def query_range(url, expr, start, end, step):
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{params}", timeout=30) as resp:
        body = json.load(resp)
    if body.get("status") != "success":
        raise SystemExit(f"query failed: {expr}: {body}")
    return body["data"]["result"]


def legend(fmt, metric, expr):
    if not fmt:
        return expr
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt).strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("dashboard")
    ap.add_argument("start", type=int)
    ap.add_argument("end", type=int)
    ap.add_argument("--var", action="append", default=[])
    ap.add_argument("--step", type=int, default=5)
    ap.add_argument("--scrape-interval", type=int, default=5)
    ap.add_argument("--source", default="")
    args = ap.parse_args()
    variables = dict(v.split("=", 1) for v in args.var)
    # Grafana: max(4 × scrape interval, step + scrape interval).
    variables["__rate_interval"] = f"{max(4 * args.scrape_interval, args.step + args.scrape_interval)}s"
    with open(args.dashboard) as f:
        dashboard = json.load(f)
    panels, queries = {}, {}
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        series = []
        queries[str(panel["id"])] = [t["expr"] for t in panel.get("targets", [])]
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name in sorted(variables, key=len, reverse=True):
                expr = expr.replace(f"${{{name}}}", variables[name]).replace(f"${name}", variables[name])
            for result in query_range(args.url, expr, args.start, args.end, args.step):
                points = [[int(float(t)) - args.start, float(v)] for t, v in result["values"]]
                points = [[t, None if v != v else v] for t, v in points]  # NaN → gap
                series.append({"legend": legend(target.get("legendFormat"), result["metric"], expr),
                               "points": points})
        panels[str(panel["id"])] = sorted(series, key=lambda s: s["legend"])
    json.dump({"source": args.source, "start": 0, "end": args.end - args.start, "queries": queries,
               "panels": panels},
              sys.stdout, indent=1)


if __name__ == "__main__":
    main()
