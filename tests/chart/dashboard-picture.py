#!/usr/bin/env python3
"""Draws the Grafana dashboard of the chart as an SVG, from the dashboard JSON's own layout.

Usage: dashboard-picture.py DASHBOARD.json [DATA.json] > picture.svg

Every panel is placed by its gridPos (24 columns), with its title, type and queries. Without
DATA the picture shows the layout only and says so. DATA (written by dashboard-data.py from a
real Prometheus that scraped a real operator) holds, per panel id, the series each query
returned; timeseries panels then draw them and stat panels show their last value. Python 3
standard library only; the output is deterministic, so a test can regenerate and compare it.
"""

import json
import sys
from xml.sax.saxutils import escape

COL = 56  # pixels per grid column (24 columns)
ROW = 30  # pixels per grid row
GAP = 6
TOP = 80  # room for the heading
GAP_SECONDS = 15  # samples further apart than this are not joined (a scrape target was gone)
PALETTE = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#ff9830",
           "#1f60c4", "#96d98d"]
BG, PANEL, BORDER, TEXT, DIM = "#111217", "#181b1f", "#2c3235", "#ccccdc", "#8e8e99"


def fmt(value, unit):
    if value is None:
        return "–"
    if unit == "percentunit":
        return f"{value * 100:.1f}%"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
    if abs(value - round(value)) < 1e-9:
        return str(int(round(value)))
    return f"{value:.3g}"


def text(x, y, s, size=12, color=TEXT, weight="normal", anchor="start", mono=False):
    family = "DejaVu Sans Mono, monospace" if mono else "DejaVu Sans, Helvetica, Arial, sans-serif"
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-family="{family}" font-size="{size}" '
            f'fill="{color}" font-weight="{weight}" text-anchor="{anchor}">{escape(s)}</text>')


def clip(s, width, size, mono=False):
    per = size * (0.6 if mono else 0.55)
    n = max(4, int(width / per))
    return s if len(s) <= n else s[: n - 1] + "…"


def series_of(data, panel):
    if not data:
        return None
    return data["panels"].get(str(panel["id"]))


def draw_timeseries(out, panel, x, y, w, h, series, start, end):
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
    cols = 2 if any(len(s["legend"]) > 24 for s in series) else 3
    legend_h = 16 * min(3, max(1, -(-len(series) // cols)))
    px, py, pw, ph = x + 44, y + 30, w - 54, h - 42 - legend_h
    values = [v for s in series for _, v in s["points"] if v is not None]
    lo, hi = 0.0, max(values) if values else 1.0
    hi = hi if hi > lo else lo + 1.0
    for i in range(3):
        gy = py + ph - ph * i / 2
        out.append(f'<line x1="{px}" y1="{gy:.1f}" x2="{px + pw}" y2="{gy:.1f}" stroke="{BORDER}"/>')
        out.append(text(px - 4, gy + 4, fmt(lo + (hi - lo) * i / 2, unit), 10, DIM, anchor="end"))
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        pts, segments, last = [], [], None
        for t, v in s["points"]:
            if v is None or (last is not None and t - last > GAP_SECONDS):
                if pts:
                    segments.append(pts)
                pts = []
            last = t
            if v is None:
                continue
            sx = px + pw * (t - start) / max(1, end - start)
            sy = py + ph - ph * (v - lo) / (hi - lo)
            pts.append(f"{sx:.1f},{sy:.1f}")
        if pts:
            segments.append(pts)
        for seg in segments:
            if len(seg) == 1:
                cx, cy = seg[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{color}"/>')
            else:
                out.append(f'<polyline points="{" ".join(seg)}" fill="none" stroke="{color}" stroke-width="1.5"/>')
    lx, ly = x + 10, y + h - legend_h - 2
    for i, s in enumerate(series[: 3 * cols]):
        col, line = i % cols, i // cols
        cx = lx + col * (w - 20) / cols
        cy = ly + 12 + line * 16
        out.append(f'<rect x="{cx:.1f}" y="{cy - 8:.1f}" width="10" height="3" fill="{PALETTE[i % len(PALETTE)]}"/>')
        out.append(text(cx + 14, cy - 3, clip(s["legend"], (w - 20) / cols - 30, 10), 10, DIM))
    if not series:
        out.append(text(x + w / 2, y + h / 2, "no samples in this run", 11, DIM, anchor="middle"))


def draw_queries(out, panel, x, y, w, h):
    line = y + 48
    for target in panel.get("targets", []):
        if line > y + h - 10:
            break
        legend = target.get("legendFormat", "")
        out.append(text(x + 10, line, clip(f"{target['refId']}  {legend}", w - 20, 10), 10, PALETTE[2]))
        line += 13
        expr = target["expr"]
        width = max(8, int((w - 20) / 6))
        for start in range(0, len(expr), width):
            if line > y + h - 10:
                break
            out.append(text(x + 10, line, expr[start:start + width], 10, DIM, mono=True))
            line += 12
        line += 4


def render(dashboard, data):
    panels = dashboard["panels"]
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    width, height = 24 * COL + GAP, TOP + bottom * ROW + GAP
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}">', f'<rect width="{width}" height="{height}" fill="{BG}"/>']
    out.append(text(GAP + 4, 26, f"Grafana dashboard “{dashboard['title']}”", 18, TEXT, "bold"))
    variables = ", ".join(f"${v['name']}" for v in dashboard["templating"]["list"])
    if data:
        note = data["source"]
    else:
        note = ("Layout only, no data: drawn from charts/disruption-guard/dashboards/disruption-guard.json "
                "(positions, titles, panel types and queries).")
    words, lines = f"{note} Variables: {variables}.".split(), [""]
    for word in words:
        if len(lines[-1]) + len(word) + 1 > (width - 20) / 6.2:
            lines.append("")
        lines[-1] = f"{lines[-1]} {word}".strip()
    for i, line in enumerate(lines[:2]):
        out.append(text(GAP + 4, 46 + 15 * i, line, 11, DIM))
    start, end = (data["start"], data["end"]) if data else (0, 1)
    for panel in panels:
        g = panel["gridPos"]
        x, y = GAP + g["x"] * COL, TOP + g["y"] * ROW
        w, h = g["w"] * COL - GAP, g["h"] * ROW - GAP
        if panel["type"] == "row":
            out.append(text(x + 2, y + 20, panel["title"], 14, TEXT, "bold"))
            continue
        out.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="3" fill="{PANEL}" stroke="{BORDER}"/>')
        out.append(text(x + 10, y + 18, clip(panel["title"], w - 90, 12), 12, TEXT, "bold"))
        out.append(text(x + w - 8, y + 18, panel["type"], 10, DIM, anchor="end"))
        results = series_of(data, panel)
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
        if results is None:
            draw_queries(out, panel, x, y, w, h)
        elif panel["type"] == "stat":
            # A stat shows the state at the end of the range: series still present then.
            labelled = [s for s in results if s["points"] and s["points"][-1][0] >= end - 15]
            if panel.get("options", {}).get("textMode") == "name":
                shown = ", ".join(s["legend"] for s in labelled) or "–"
                size = 16
            else:
                last = [s["points"][-1][1] for s in labelled if s["points"][-1][1] is not None]
                shown, size = fmt(sum(last) if last else None, unit), 30
            out.append(text(x + w / 2, y + h / 2 + 16, clip(shown, w - 20, size), size, PALETTE[0], "bold", "middle"))
        else:
            draw_timeseries(out, panel, x, y, w, h, results, start, end)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        dashboard = json.load(f)
    data = None
    if len(sys.argv) == 3:
        with open(sys.argv[2]) as f:
            data = json.load(f)
    sys.stdout.write(render(dashboard, data))


if __name__ == "__main__":
    main()
