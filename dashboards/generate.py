#!/usr/bin/env python3
"""Generate the Grafana dashboards in this folder (stdlib only).

    python dashboards/generate.py                 # write the four dashboards
    python dashboards/generate.py --check         # exit 1 when a committed file differs
    python dashboards/generate.py --currency EUR  # currency unit of the FinOps panels

Every panel and target reads the Prometheus data source chosen in the `datasource` variable.
Series names and labels are those of docs/metrics.md (exporter) and of the cost service.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 39
TAG = "gpu-finops"
DS = {"type": "prometheus", "uid": "${datasource}"}

Json = dict[str, Any]


# --------------------------------------------------------------------------- building blocks


def target(expr: str, legend: str = "", *, instant: bool = False, table: bool = False) -> Json:
    t: Json = {
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "instant": instant or table,
        "legendFormat": legend or "__auto",
        "range": not (instant or table),
        "refId": "",
    }
    if table:
        t["format"] = "table"
    return t


def thresholds(*steps: tuple[float, str]) -> Json:
    return {
        "mode": "absolute",
        "steps": [{"color": "green", "value": None}] + [{"color": c, "value": v} for v, c in steps],
    }


class Layout:
    """Places panels left to right on Grafana's 24-column grid, wrapping as needed."""

    def __init__(self) -> None:
        self.x = 0
        self.y = 0
        self.row_h = 0
        self.next_id = 1

    def place(self, w: int, h: int) -> Json:
        if self.x + w > 24:
            self.newline()
        pos = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_h = max(self.row_h, h)
        return pos

    def newline(self) -> None:
        self.y += self.row_h
        self.x = 0
        self.row_h = 0

    def new_id(self) -> int:
        i = self.next_id
        self.next_id += 1
        return i


class Board:
    """One dashboard: panels (rows expanded or collapsed), variables, metadata."""

    def __init__(self, uid: str, title: str, description: str, tags: list[str]) -> None:
        self.uid = uid
        self.title = title
        self.description = description
        self.tags = [TAG, *tags]
        self.layout = Layout()
        self.panels: list[Json] = []
        self.sink = self.panels  # where new panels go (a collapsed row's own list)
        self.collapsed_y: int | None = None
        self.variables: list[Json] = [
            {
                "current": {},
                "hide": 0,
                "includeAll": False,
                "label": "Data source",
                "multi": False,
                "name": "datasource",
                "options": [],
                "query": "prometheus",
                "refresh": 1,
                "regex": "",
                "skipUrlSync": False,
                "type": "datasource",
            }
        ]

    # variables -------------------------------------------------------------------------

    def query_var(
        self, name: str, label: str, query: str, *, multi: bool = True, include_all: bool = True
    ) -> None:
        self.variables.append(
            {
                "allValue": ".*" if include_all else None,
                "current": {},
                "datasource": DS,
                "definition": query,
                "description": f"Values of {query}",
                "hide": 0,
                "includeAll": include_all,
                "label": label,
                "multi": multi,
                "name": name,
                "options": [],
                "query": {
                    "qryType": 1,
                    "query": query,
                    "refId": "PrometheusVariableQueryEditor-VariableQuery",
                },
                "refresh": 2,
                "regex": "",
                "skipUrlSync": False,
                "sort": 1,
                "type": "query",
            }
        )

    # rows and panels ---------------------------------------------------------------------

    def row(self, title: str, *, collapsed: bool = False) -> None:
        lay = self.layout
        if lay.x:
            lay.newline()
        if self.collapsed_y is not None:
            # panels of a collapsed row take no room: the next row sits right below it
            lay.y = self.collapsed_y + 1
        self.collapsed_y = lay.y if collapsed else None
        r: Json = {
            "collapsed": collapsed,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": lay.y},
            "id": lay.new_id(),
            "panels": [],
            "title": title,
            "type": "row",
        }
        lay.y += 1
        self.panels.append(r)
        self.sink = r["panels"] if collapsed else self.panels

    def panel(
        self,
        kind: str,
        title: str,
        description: str,
        targets: list[Json],
        *,
        unit: str = "none",
        w: int = 12,
        h: int = 8,
        decimals: int | None = None,
        minimum: float | None = None,
        maximum: float | None = None,
        steps: tuple[tuple[float, str], ...] = (),
        mappings: list[Json] | None = None,
        options: Json | None = None,
        custom: Json | None = None,
        transformations: list[Json] | None = None,
    ) -> None:
        for i, t in enumerate(targets):
            t["refId"] = chr(ord("A") + i)
        defaults: Json = {"color": {"mode": "palette-classic"}, "unit": unit}
        if kind in ("stat", "bargauge", "gauge"):
            defaults["color"] = {"mode": "thresholds"}
        if decimals is not None:
            defaults["decimals"] = decimals
        if minimum is not None:
            defaults["min"] = minimum
        if maximum is not None:
            defaults["max"] = maximum
        defaults["thresholds"] = thresholds(*steps)
        defaults["mappings"] = mappings or []
        if kind == "timeseries":
            defaults["custom"] = {
                "drawStyle": "line",
                "fillOpacity": 10,
                "lineWidth": 1,
                "showPoints": "never",
                "spanNulls": False,
                "stacking": {"group": "A", "mode": "none"},
                **(custom or {}),
            }
        elif kind == "table":
            defaults["custom"] = {"align": "auto", "filterable": True, **(custom or {})}
            defaults["color"] = {"mode": "thresholds"}
        p: Json = {
            "datasource": DS,
            "description": description,
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "gridPos": self.layout.place(w, h),
            "id": self.layout.new_id(),
            "options": {**default_options(kind), **(options or {})},
            "targets": targets,
            "title": title,
            "type": kind,
        }
        if transformations:
            p["transformations"] = transformations
        self.sink.append(p)

    def render(self) -> Json:
        return {
            "annotations": {
                "list": [
                    {
                        "builtIn": 1,
                        "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                        "enable": True,
                        "hide": True,
                        "iconColor": "rgba(0, 211, 255, 1)",
                        "name": "Annotations & Alerts",
                        "type": "dashboard",
                    }
                ]
            },
            "description": self.description,
            "editable": True,
            "fiscalYearStartMonth": 0,
            "graphTooltip": 1,
            "id": None,
            "links": [
                {
                    "asDropdown": True,
                    "icon": "external link",
                    "includeVars": False,
                    "keepTime": True,
                    "tags": [TAG],
                    "targetBlank": False,
                    "title": "GPU dashboards",
                    "type": "dashboards",
                }
            ],
            "panels": self.panels,
            "refresh": "1m",
            "schemaVersion": SCHEMA_VERSION,
            "tags": self.tags,
            "templating": {"list": self.variables},
            "time": {"from": "now-6h", "to": "now"},
            "timepicker": {},
            "timezone": "",
            "title": self.title,
            "uid": self.uid,
            "version": 1,
            "weekStart": "",
        }


def default_options(kind: str) -> Json:
    reduce = {"calcs": ["lastNotNull"], "fields": "", "values": False}
    if kind == "timeseries":
        return {
            "legend": {
                "calcs": ["mean", "max", "lastNotNull"],
                "displayMode": "table",
                "placement": "bottom",
                "showLegend": True,
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    if kind == "stat":
        return {
            "colorMode": "value",
            "graphMode": "area",
            "justifyMode": "auto",
            "orientation": "auto",
            "reduceOptions": reduce,
            "showPercentChange": False,
            "textMode": "auto",
            "wideLayout": True,
        }
    if kind == "bargauge":
        return {
            "displayMode": "gradient",
            "maxVizHeight": 300,
            "minVizHeight": 16,
            "minVizWidth": 8,
            "namePlacement": "auto",
            "orientation": "horizontal",
            "reduceOptions": reduce,
            "showUnfilled": True,
            "sizing": "auto",
            "valueMode": "color",
        }
    if kind == "table":
        return {
            "cellHeight": "sm",
            "footer": {"countRows": False, "fields": "", "reducer": ["sum"], "show": False},
            "showHeader": True,
        }
    return {}


def merge_table(rename: dict[str, str], hide: tuple[str, ...] = ("Time",)) -> list[Json]:
    """Transformations that merge instant table queries and name the value columns."""
    return [
        {"id": "merge", "options": {}},
        {
            "id": "organize",
            "options": {
                "excludeByName": dict.fromkeys(hide, True),
                "indexByName": {},
                "renameByName": rename,
            },
        },
    ]


STACKED = {"fillOpacity": 40, "stacking": {"group": "A", "mode": "normal"}}
BARS = {"drawStyle": "bars", "fillOpacity": 60}
UP_MAPPING = [
    {
        "options": {
            "0": {"color": "red", "index": 0, "text": "DOWN"},
            "1": {"color": "green", "index": 1, "text": "UP"},
        },
        "type": "value",
    }
]

# --------------------------------------------------------------------------- (a) fleet

F = 'modelName=~"$modelName", Hostname=~"$Hostname", gpu=~"$gpu"'
BY_GPU = "Hostname, gpu"
GPU_LEGEND = "{{Hostname}} GPU {{gpu}}"
NOT_IDLE_REASON = 'reason!="gpu_idle"'


def fleet() -> Board:
    b = Board(
        "gpu-finops-fleet",
        "GPU fleet",
        "Per node and per GPU: utilisation, framebuffer memory, power, energy, temperatures, "
        "clocks, throttling, XID/ECC/row-remap errors and exporter health (gpu-exporter, "
        "DCGM-compatible series).",
        ["gpu", "dcgm"],
    )
    b.query_var("modelName", "GPU model", "label_values(gpu_device_up, modelName)")
    b.query_var(
        "Hostname", "Node", 'label_values(gpu_device_up{modelName=~"$modelName"}, Hostname)'
    )
    b.query_var(
        "gpu",
        "GPU",
        'label_values(gpu_device_up{modelName=~"$modelName", Hostname=~"$Hostname"}, gpu)',
    )
    b.query_var("job", "Exporter job", "label_values(gpu_exporter_build_info, job)")

    b.row("Overview")
    b.panel(
        "stat",
        "GPUs up",
        "GPUs whose last NVML read succeeded (gpu_device_up = 1).",
        [target(f"sum(gpu_device_up{{{F}}})")],
        w=4,
        h=4,
    )
    b.panel(
        "stat",
        "GPUs lost",
        "GPUs the exporter knows but could not read at the last collection (gpu_device_up = 0).",
        [target(f"count(gpu_device_up{{{F}}} == 0) or vector(0)")],
        w=4,
        h=4,
        steps=((1, "red"),),
    )
    b.panel(
        "stat",
        "Mean GPU utilisation",
        "Average of DCGM_FI_DEV_GPU_UTIL over the selected GPUs.",
        [target(f"avg(DCGM_FI_DEV_GPU_UTIL{{{F}}})")],
        unit="percent",
        w=4,
        h=4,
        minimum=0,
        maximum=100,
    )
    b.panel(
        "stat",
        "Framebuffer used",
        "Framebuffer memory used over framebuffer total, all selected GPUs (MIG instances "
        "included).",
        [target(f"sum(DCGM_FI_DEV_FB_USED{{{F}}}) / sum(DCGM_FI_DEV_FB_TOTAL{{{F}}})")],
        unit="percentunit",
        w=4,
        h=4,
        minimum=0,
        maximum=1,
        steps=((0.9, "orange"), (0.97, "red")),
    )
    b.panel(
        "stat",
        "Power draw",
        "Sum of DCGM_FI_DEV_POWER_USAGE over the selected GPUs.",
        [target(f"sum(DCGM_FI_DEV_POWER_USAGE{{{F}}})")],
        unit="watt",
        w=4,
        h=4,
    )
    b.panel(
        "stat",
        "Energy in time range",
        "Energy the selected GPUs used over the dashboard time range: increase of "
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ) / 3.6e9 = kWh.",
        [
            target(
                f"sum(increase(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{F}}}[$__range])) / 3.6e9",
                instant=True,
            )
        ],
        unit="kwatth",
        decimals=2,
        w=4,
        h=4,
    )

    b.row("Utilisation")
    b.panel(
        "timeseries",
        "GPU utilisation",
        "DCGM_FI_DEV_GPU_UTIL: percent of time a kernel ran on the GPU, per GPU.",
        [target(f"avg by ({BY_GPU}) (DCGM_FI_DEV_GPU_UTIL{{{F}}})", GPU_LEGEND)],
        unit="percent",
        minimum=0,
        maximum=100,
    )
    b.panel(
        "timeseries",
        "Memory copy utilisation",
        "DCGM_FI_DEV_MEM_COPY_UTIL: percent of time device memory was read or written.",
        [target(f"avg by ({BY_GPU}) (DCGM_FI_DEV_MEM_COPY_UTIL{{{F}}})", GPU_LEGEND)],
        unit="percent",
        minimum=0,
        maximum=100,
    )
    b.panel(
        "timeseries",
        "SM active and tensor pipe active",
        "Profiling ratios from NVML GPM (Hopper and newer): DCGM_FI_PROF_SM_ACTIVE and "
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, averaged per GPU (over MIG instances too).",
        [
            target(f"avg by ({BY_GPU}) (DCGM_FI_PROF_SM_ACTIVE{{{F}}})", GPU_LEGEND + " SM active"),
            target(
                f"avg by ({BY_GPU}) (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{F}}})",
                GPU_LEGEND + " tensor",
            ),
        ],
        unit="percentunit",
        minimum=0,
        maximum=1,
    )
    b.panel(
        "timeseries",
        "Encoder and decoder utilisation",
        "DCGM_FI_DEV_ENC_UTIL and DCGM_FI_DEV_DEC_UTIL per GPU.",
        [
            target(f"avg by ({BY_GPU}) (DCGM_FI_DEV_ENC_UTIL{{{F}}})", GPU_LEGEND + " enc"),
            target(f"avg by ({BY_GPU}) (DCGM_FI_DEV_DEC_UTIL{{{F}}})", GPU_LEGEND + " dec"),
        ],
        unit="percent",
        minimum=0,
        maximum=100,
    )

    b.row("Framebuffer memory")
    b.panel(
        "timeseries",
        "Framebuffer used",
        "DCGM_FI_DEV_FB_USED (MiB) per GPU; on a MIG GPU the sum over its instances.",
        [target(f"sum by ({BY_GPU}) (DCGM_FI_DEV_FB_USED{{{F}}})", GPU_LEGEND)],
        unit="mbytes",
        minimum=0,
    )
    b.panel(
        "timeseries",
        "Framebuffer used (share of total)",
        "DCGM_FI_DEV_FB_USED / DCGM_FI_DEV_FB_TOTAL per GPU.",
        [
            target(
                f"sum by ({BY_GPU}) (DCGM_FI_DEV_FB_USED{{{F}}})"
                f" / sum by ({BY_GPU}) (DCGM_FI_DEV_FB_TOTAL{{{F}}})",
                GPU_LEGEND,
            )
        ],
        unit="percentunit",
        minimum=0,
        maximum=1,
    )

    b.row("Power and temperature")
    b.panel(
        "timeseries",
        "Power draw",
        "DCGM_FI_DEV_POWER_USAGE per GPU, with the enforced power limit.",
        [
            target(f"max by ({BY_GPU}) (DCGM_FI_DEV_POWER_USAGE{{{F}}})", GPU_LEGEND),
            target(
                f"max by ({BY_GPU}) (DCGM_FI_DEV_ENFORCED_POWER_LIMIT{{{F}}})",
                GPU_LEGEND + " limit",
            ),
        ],
        unit="watt",
        minimum=0,
    )
    b.panel(
        "timeseries",
        "Energy rate",
        "rate() of DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ/s) / 1000 = average power in W "
        "over the rate window, per GPU.",
        [
            target(
                f"sum by ({BY_GPU}) (rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
                f"{{{F}}}[$__rate_interval])) / 1000",
                GPU_LEGEND,
            )
        ],
        unit="watt",
        minimum=0,
    )
    b.panel(
        "bargauge",
        "Energy per node in time range",
        "increase of DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ) over the time range, per node, "
        "in kWh.",
        [
            target(
                "sum by (Hostname) (increase(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
                f"{{{F}}}[$__range])) / 3.6e9",
                "{{Hostname}}",
                instant=True,
            )
        ],
        unit="kwatth",
        decimals=2,
        w=8,
    )
    b.panel(
        "timeseries",
        "GPU temperature",
        "DCGM_FI_DEV_GPU_TEMP per GPU.",
        [target(f"max by ({BY_GPU}) (DCGM_FI_DEV_GPU_TEMP{{{F}}})", GPU_LEGEND)],
        unit="celsius",
        w=8,
        steps=((80, "orange"), (90, "red")),
    )
    b.panel(
        "timeseries",
        "Memory temperature",
        "DCGM_FI_DEV_MEMORY_TEMP (HBM) per GPU.",
        [target(f"max by ({BY_GPU}) (DCGM_FI_DEV_MEMORY_TEMP{{{F}}})", GPU_LEGEND)],
        unit="celsius",
        w=8,
        steps=((85, "orange"), (95, "red")),
    )

    b.row("Clocks")
    b.panel(
        "timeseries",
        "SM clock",
        "DCGM_FI_DEV_SM_CLOCK (MHz) per GPU.",
        [target(f"max by ({BY_GPU}) (DCGM_FI_DEV_SM_CLOCK{{{F}}}) * 1e6", GPU_LEGEND)],
        unit="hertz",
    )
    b.panel(
        "timeseries",
        "Memory clock",
        "DCGM_FI_DEV_MEM_CLOCK (MHz) per GPU.",
        [target(f"max by ({BY_GPU}) (DCGM_FI_DEV_MEM_CLOCK{{{F}}}) * 1e6", GPU_LEGEND)],
        unit="hertz",
    )

    b.row("Throttling", collapsed=True)
    b.panel(
        "timeseries",
        "Clock event reasons active",
        "gpu_clock_event_reason_active: 1 while a reason holds the clocks down (gpu_idle "
        "left out: it is the normal state of an idle GPU).",
        [
            target(
                f"max by ({BY_GPU}, reason) (gpu_clock_event_reason_active"
                f"{{{F}, {NOT_IDLE_REASON}}}) > 0",
                GPU_LEGEND + " {{reason}}",
            )
        ],
        custom=BARS,
        minimum=0,
        maximum=1,
    )
    violations = ("POWER", "THERMAL", "SYNC_BOOST", "BOARD_LIMIT", "LOW_UTIL", "RELIABILITY")
    b.panel(
        "timeseries",
        "Throttled time by cause",
        "rate() of the DCGM_FI_DEV_*_VIOLATION counters (us) / 1e6: the fraction of time each "
        "constraint held the clocks down.",
        [
            target(
                f"sum by ({BY_GPU}) (rate(DCGM_FI_DEV_{v}_VIOLATION"
                f"{{{F}}}[$__rate_interval])) / 1e6",
                f"{GPU_LEGEND} {v.lower()}",
            )
            for v in violations
        ],
        unit="percentunit",
        minimum=0,
    )
    b.panel(
        "table",
        "Clock throttle reasons (bitmask)",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS now: bitmask of DCGM_CLOCKS_THROTTLE_REASON_* "
        "(1 = GPU idle, 4 = SW power cap, 8 = HW slowdown, 32 = SW thermal, 64 = HW thermal, "
        "128 = power brake).",
        [
            target(
                f"max by ({BY_GPU}, modelName) (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{{{F}}})",
                table=True,
            )
        ],
        transformations=merge_table({"Value": "Reasons bitmask"}),
        w=24,
    )

    b.row("Errors: XID, ECC, remapped rows, PCIe, NVLink", collapsed=True)
    b.panel(
        "timeseries",
        "XID errors by code",
        "gpu_xid_errors_total: XID events per rate window, by GPU and XID code.",
        [
            target(
                f"sum by ({BY_GPU}, xid) (increase(gpu_xid_errors_total"
                f"{{{F}}}[$__rate_interval])) > 0",
                GPU_LEGEND + " XID {{xid}}",
            )
        ],
        custom=BARS,
    )
    b.panel(
        "table",
        "Last XID per GPU",
        "DCGM_FI_DEV_XID_ERRORS: the last XID code seen per GPU (0 until one is seen), and "
        "XID events in the time range.",
        [
            target(f"max by ({BY_GPU}) (DCGM_FI_DEV_XID_ERRORS{{{F}}})", table=True),
            target(
                f"sum by ({BY_GPU}) (increase(gpu_xid_errors_total{{{F}}}[$__range]))",
                table=True,
            ),
        ],
        transformations=merge_table({"Value #A": "Last XID", "Value #B": "XID events in range"}),
    )
    ecc = {
        "SBE_VOL": "Volatile SBE",
        "DBE_VOL": "Volatile DBE",
        "SBE_AGG": "Aggregate SBE",
        "DBE_AGG": "Aggregate DBE",
    }
    b.panel(
        "table",
        "ECC errors",
        "DCGM_FI_DEV_ECC_*_TOTAL: single-bit (corrected) and double-bit (uncorrected) ECC "
        "errors, volatile (since driver load) and aggregate (lifetime), current totals.",
        [target(f"max by ({BY_GPU}) (DCGM_FI_DEV_ECC_{k}_TOTAL{{{F}}})", table=True) for k in ecc],
        transformations=merge_table(
            {f"Value #{chr(65 + i)}": name for i, name in enumerate(ecc.values())}
        ),
        steps=((1, "orange"),),
    )
    remap = {
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "Correctable remapped",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "Uncorrectable remapped",
        "DCGM_FI_DEV_ROW_REMAP_PENDING": "Remap pending",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": "Remap failed",
    }
    b.panel(
        "table",
        "Remapped rows",
        "Row remapping per GPU: rows remapped for correctable and uncorrectable errors, a "
        "pending remap (reset the GPU) and a failed remap (replace the GPU).",
        [target(f"max by ({BY_GPU}) ({m}{{{F}}})", table=True) for m in remap],
        transformations=merge_table(
            {f"Value #{chr(65 + i)}": name for i, name in enumerate(remap.values())}
        ),
        steps=((1, "red"),),
    )
    b.panel(
        "timeseries",
        "PCIe replays",
        "rate() of DCGM_FI_DEV_PCIE_REPLAY_COUNTER: PCIe retries per second.",
        [
            target(
                f"sum by ({BY_GPU}) (rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
                f"{{{F}}}[$__rate_interval]))",
                GPU_LEGEND,
            )
        ],
        unit="short",
    )
    nvlink = ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY")
    b.panel(
        "timeseries",
        "NVLink errors",
        "rate() of the DCGM_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL counters (all links), errors "
        "per second.",
        [
            target(
                f"sum by ({BY_GPU}) (rate(DCGM_FI_DEV_NVLINK_{k}_ERROR_COUNT_TOTAL"
                f"{{{F}}}[$__rate_interval]))",
                f"{GPU_LEGEND} {k.lower()}",
            )
            for k in nvlink
        ],
        unit="short",
    )

    b.row("Health")
    b.panel(
        "stat",
        "GPU up",
        "gpu_device_up per GPU: UP when the last NVML read of the GPU succeeded.",
        [target(f"max by ({BY_GPU}) (gpu_device_up{{{F}}})", GPU_LEGEND)],
        mappings=UP_MAPPING,
        steps=((0, "red"), (1, "green")),
        options={"colorMode": "background", "graphMode": "none"},
        w=24,
        h=5,
    )
    b.panel(
        "stat",
        "Exporter NVML up",
        "gpu_exporter_nvml_up per exporter: 1 while NVML is initialised.",
        [target('min by (instance) (gpu_exporter_nvml_up{job=~"$job"})', "{{instance}}")],
        mappings=UP_MAPPING,
        steps=((0, "red"), (1, "green")),
        options={"colorMode": "background", "graphMode": "none"},
        w=8,
        h=5,
    )
    b.panel(
        "stat",
        "Exporter scrape up",
        "Prometheus `up` for the exporter targets.",
        [target('up{job=~"$job"}', "{{instance}}")],
        mappings=UP_MAPPING,
        steps=((0, "red"), (1, "green")),
        options={"colorMode": "background", "graphMode": "none"},
        w=8,
        h=5,
    )
    b.panel(
        "stat",
        "Since last successful NVML read",
        "time() - gpu_exporter_last_success_timestamp_seconds per exporter (exporters that "
        "never read NVML successfully report 0 and are left out).",
        [
            target(
                "time() - max by (instance) "
                '(gpu_exporter_last_success_timestamp_seconds{job=~"$job"} > 0)',
                "{{instance}}",
            )
        ],
        unit="s",
        steps=((60, "orange"), (300, "red")),
        w=8,
        h=5,
    )
    b.panel(
        "timeseries",
        "Collection duration",
        "gpu_exporter_last_collection_duration_seconds: time to read every device in one "
        "collection.",
        [
            target(
                'max by (instance) (gpu_exporter_last_collection_duration_seconds{job=~"$job"})',
                "{{instance}}",
            )
        ],
        unit="s",
    )
    b.panel(
        "timeseries",
        "Exporter errors",
        "rate() of gpu_exporter_errors_total by source and kind (only non-zero rates).",
        [
            target(
                "sum by (instance, source, kind) "
                '(rate(gpu_exporter_errors_total{job=~"$job"}[$__rate_interval])) > 0',
                "{{instance}} {{source}}/{{kind}}",
            )
        ],
        unit="short",
    )
    return b


# --------------------------------------------------------------------------- (b) MIG

M = 'Hostname=~"$Hostname", gpu=~"$gpu", GPU_I_PROFILE=~"$profile", GPU_I_ID!=""'
BY_GI = "Hostname, gpu, GPU_I_ID, GPU_I_PROFILE"
GI_LEGEND = "{{Hostname}} GPU {{gpu}} GI {{GPU_I_ID}} ({{GPU_I_PROFILE}})"


def mig() -> Board:
    b = Board(
        "gpu-finops-mig",
        "GPU MIG instances",
        "Multi-Instance GPU layout and use: instances per GPU and profile, who holds them, "
        "their memory and graphics-engine activity per GPU instance (GPU_I_ID).",
        ["gpu", "mig"],
    )
    b.query_var("Hostname", "Node", "label_values(gpu_mig_instance_info, Hostname)")
    b.query_var("gpu", "GPU", 'label_values(gpu_mig_instance_info{Hostname=~"$Hostname"}, gpu)')
    b.query_var(
        "profile",
        "MIG profile",
        'label_values(gpu_mig_instance_info{Hostname=~"$Hostname", gpu=~"$gpu"}, GPU_I_PROFILE)',
    )

    b.row("Layout")
    b.panel(
        "stat",
        "MIG instances",
        "Number of MIG GPU instances (gpu_mig_instance_info).",
        [target(f"count(gpu_mig_instance_info{{{M}}}) or vector(0)")],
        w=6,
        h=4,
    )
    b.panel(
        "stat",
        "MIG-enabled GPUs",
        "Physical GPUs with at least one MIG instance.",
        [target(f"count(count by (Hostname, gpu) (gpu_mig_instance_info{{{M}}})) or vector(0)")],
        w=6,
        h=4,
    )
    b.panel(
        "stat",
        "Instances held by pods",
        "MIG instances some container holds (gpu_allocation_share on a GPU_I_ID).",
        [
            target(
                f"count(count by ({BY_GI}) (gpu_allocation_share{{{M}}})) or vector(0)",
            )
        ],
        w=6,
        h=4,
    )
    b.panel(
        "stat",
        "MIG capacity held",
        "Sum of gpu_allocation_share on MIG instances over the number of MIG-enabled GPUs: "
        "the share of the physical GPUs' compute slices (of 7) that pods hold.",
        [
            target(
                f"sum(gpu_allocation_share{{{M}}})"
                f" / count(count by (Hostname, gpu) (gpu_mig_instance_info{{{M}}}))"
            )
        ],
        unit="percentunit",
        minimum=0,
        maximum=1,
        w=6,
        h=4,
    )
    b.panel(
        "bargauge",
        "Instances per GPU",
        "MIG instances on each physical GPU.",
        [
            target(
                f"count by (Hostname, gpu) (gpu_mig_instance_info{{{M}}})",
                "{{Hostname}} GPU {{gpu}}",
                instant=True,
            )
        ],
        options={"displayMode": "basic"},
    )
    b.panel(
        "bargauge",
        "Instances by profile",
        "MIG instances per profile (GPU_I_PROFILE) over the selected GPUs.",
        [
            target(
                f"count by (GPU_I_PROFILE) (gpu_mig_instance_info{{{M}}})",
                "{{GPU_I_PROFILE}}",
                instant=True,
            )
        ],
        options={"displayMode": "basic"},
    )
    b.panel(
        "table",
        "MIG instances",
        "Every MIG instance now: profile, GPU and compute instance ids, MIG UUID, compute "
        "slices (of 7) and memory slices (of 8).",
        [
            target(
                "max by (Hostname, gpu, modelName, GPU_I_PROFILE, GPU_I_ID, GPU_CI_ID, "
                f"mig_uuid, compute_slices, memory_slices) (gpu_mig_instance_info{{{M}}})",
                table=True,
            )
        ],
        transformations=merge_table({}, hide=("Time", "Value")),
        w=24,
    )
    b.panel(
        "table",
        "Instance holders",
        "Which container holds which MIG instance, and its share of the physical GPU.",
        [
            target(
                f"sum by ({BY_GI}, namespace, pod, container) (gpu_allocation_share{{{M}}})",
                table=True,
            )
        ],
        transformations=merge_table({"Value": "Share of GPU"}),
        w=12,
    )
    b.panel(
        "table",
        "Unallocated instances",
        "MIG instances no container holds: idle capacity the cost service reports as idle.",
        [
            target(
                f"count by ({BY_GI}) (gpu_mig_instance_info{{{M}}}) unless on (Hostname, gpu, "
                f"GPU_I_ID) gpu_allocation_share{{{M}}}",
                table=True,
            )
        ],
        transformations=merge_table({}, hide=("Time", "Value")),
        w=12,
    )

    b.row("Activity")
    b.panel(
        "timeseries",
        "Graphics engine activity per instance",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE per GPU instance: ratio of time the graphics engine "
        "of the instance was active.",
        [target(f"avg by ({BY_GI}) (DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{M}}})", GI_LEGEND)],
        unit="percentunit",
        minimum=0,
        maximum=1,
    )
    b.panel(
        "timeseries",
        "SM active per instance",
        "DCGM_FI_PROF_SM_ACTIVE per GPU instance.",
        [target(f"avg by ({BY_GI}) (DCGM_FI_PROF_SM_ACTIVE{{{M}}})", GI_LEGEND)],
        unit="percentunit",
        minimum=0,
        maximum=1,
    )
    b.panel(
        "table",
        "Least active instances",
        "Mean DCGM_FI_PROF_GR_ENGINE_ACTIVE over the time range, lowest first.",
        [
            target(
                f"bottomk(10, avg by ({BY_GI}) "
                f"(avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{M}}}[$__range])))",
                table=True,
            )
        ],
        unit="percentunit",
        transformations=merge_table({"Value": "Mean activity"}),
        custom={"cellOptions": {"type": "color-text"}},
        w=8,
    )
    b.panel(
        "timeseries",
        "Container SM utilisation on MIG instances",
        "gpu_container_sm_utilization_ratio of containers on MIG instances.",
        [
            target(
                f"max by ({BY_GI}, namespace, pod) (gpu_container_sm_utilization_ratio{{{M}}})",
                "{{namespace}}/{{pod}} GI {{GPU_I_ID}}",
            )
        ],
        unit="percentunit",
        minimum=0,
        maximum=1,
        w=16,
    )

    b.row("Memory")
    b.panel(
        "timeseries",
        "Framebuffer used per instance",
        "DCGM_FI_DEV_FB_USED (MiB) per GPU instance.",
        [target(f"sum by ({BY_GI}) (DCGM_FI_DEV_FB_USED{{{M}}})", GI_LEGEND)],
        unit="mbytes",
        minimum=0,
    )
    b.panel(
        "timeseries",
        "Framebuffer used per instance (share)",
        "DCGM_FI_DEV_FB_USED / DCGM_FI_DEV_FB_TOTAL per GPU instance.",
        [
            target(
                f"sum by ({BY_GI}) (DCGM_FI_DEV_FB_USED{{{M}}})"
                f" / sum by ({BY_GI}) (DCGM_FI_DEV_FB_TOTAL{{{M}}})",
                GI_LEGEND,
            )
        ],
        unit="percentunit",
        minimum=0,
        maximum=1,
    )
    return b


# --------------------------------------------------------------------------- (c) workloads

W = 'namespace=~"$namespace", pod=~"$pod", Hostname=~"$Hostname"'
K = "Hostname, gpu, GPU_I_ID, namespace, pod, container"
HELD = f"sum by ({K}) (gpu_allocation_share{{{W}}})"
UTIL = f"clamp(max by ({K}) (gpu_container_sm_utilization_ratio{{{W}}}), 0, 1)"
# share x (1 - utilisation); a holder without processes (no utilisation series) is all idle
IDLE = f"({HELD} * on ({K}) (1 - ({UTIL} or on ({K}) 0 * {HELD})))"
# one team per pod, from kube-state-metrics; pods without the label count as __unallocated__
TEAM = (
    "label_replace(topk by (namespace, pod) (1, max by (namespace, pod, label_team) "
    '(kube_pod_labels{label_team=~"$team"})), "label_team", "__unallocated__", '
    '"label_team", "")'
)


def by_team(expr: str) -> str:
    return f"sum by (label_team) ({expr} * on (namespace, pod) group_left (label_team) {TEAM})"


def workloads() -> Board:
    b = Board(
        "gpu-finops-workloads",
        "GPU workloads",
        "Which namespaces, pods and teams hold GPU capacity, how much of it they use (SM "
        "utilisation, memory) and how much is allocated but idle.",
        ["gpu", "kubernetes"],
    )
    b.query_var("namespace", "Namespace", "label_values(gpu_allocation_share, namespace)")
    b.query_var("pod", "Pod", 'label_values(gpu_allocation_share{namespace=~"$namespace"}, pod)')
    b.query_var("Hostname", "Node", "label_values(gpu_allocation_share, Hostname)")
    b.query_var("team", "Team", "label_values(kube_pod_labels, label_team)")

    b.row("Allocation")
    b.panel(
        "stat",
        "GPUs held",
        "Sum of gpu_allocation_share: physical GPUs held by the selected pods (whole GPU 1, "
        "MIG instance compute slices / 7, time-slice replica 1 / replicas).",
        [target(f"sum(gpu_allocation_share{{{W}}}) or vector(0)")],
        decimals=2,
        w=6,
        h=4,
    )
    b.panel(
        "stat",
        "Pods holding GPUs",
        "Pods with at least one GPU, MIG instance or replica.",
        [target(f"count(count by (namespace, pod) (gpu_allocation_share{{{W}}})) or vector(0)")],
        w=6,
        h=4,
    )
    b.panel(
        "stat",
        "Allocated but idle",
        "GPUs held but not used: sum of share x (1 - container SM utilisation); a holder "
        "with no process on the GPU counts as fully idle.",
        [target(f"sum({IDLE}) or vector(0)")],
        decimals=2,
        w=6,
        h=4,
        steps=((1, "orange"), (4, "red")),
    )
    b.panel(
        "stat",
        "Used share of held GPUs",
        "1 - allocated-but-idle / held: how much of the held capacity is busy.",
        [target(f"1 - sum({IDLE}) / sum({HELD})")],
        unit="percentunit",
        minimum=0,
        maximum=1,
        w=6,
        h=4,
        steps=((0, "red"), (0.3, "orange"), (0.6, "green")),
    )
    b.panel(
        "timeseries",
        "GPU share held by namespace",
        "gpu_allocation_share summed per namespace (GPUs).",
        [target(f"sum by (namespace) (gpu_allocation_share{{{W}}})", "{{namespace}}")],
        custom=STACKED,
        decimals=2,
    )
    b.panel(
        "timeseries",
        "GPU share held by pod",
        "gpu_allocation_share summed per pod (GPUs).",
        [target(f"sum by (namespace, pod) (gpu_allocation_share{{{W}}})", "{{namespace}}/{{pod}}")],
        custom=STACKED,
        decimals=2,
    )
    b.panel(
        "table",
        "Current holders",
        "Every (device, container) holding now, with the extended resource and share.",
        [
            target(
                "sum by (namespace, pod, container, Hostname, gpu, GPU_I_PROFILE, resource) "
                f"(gpu_allocation_share{{{W}}})",
                table=True,
            )
        ],
        transformations=merge_table({"Value": "Share of GPU"}),
        decimals=3,
        w=24,
    )

    b.row("Utilisation")
    b.panel(
        "timeseries",
        "Container SM utilisation",
        "gpu_container_sm_utilization_ratio: SM utilisation of a container's processes on a "
        "device (0..1 of the device).",
        [
            target(
                f"max by ({K}) (gpu_container_sm_utilization_ratio{{{W}}})",
                "{{namespace}}/{{pod}}/{{container}} {{Hostname}} GPU {{gpu}}",
            )
        ],
        unit="percentunit",
        minimum=0,
        maximum=1,
    )
    b.panel(
        "timeseries",
        "Container GPU memory used",
        "gpu_container_memory_used_bytes summed per container over its devices.",
        [
            target(
                f"sum by (namespace, pod, container) (gpu_container_memory_used_bytes{{{W}}})",
                "{{namespace}}/{{pod}}/{{container}}",
            )
        ],
        unit="bytes",
        minimum=0,
    )
    b.panel(
        "timeseries",
        "Unattributed GPU processes",
        "gpu_unattributed_processes: processes on a GPU that map to no pod (host processes or "
        "unknown containers).",
        [
            target(
                'sum by (Hostname, gpu) (gpu_unattributed_processes{Hostname=~"$Hostname"}) > 0',
                "{{Hostname}} GPU {{gpu}}",
            )
        ],
        custom=BARS,
        w=24,
        h=6,
    )

    b.row("Allocated but idle")
    b.panel(
        "timeseries",
        "Allocated-but-idle GPUs by namespace",
        "share x (1 - SM utilisation) summed per namespace.",
        [target(f"sum by (namespace) ({IDLE})", "{{namespace}}")],
        custom=STACKED,
        decimals=2,
    )
    b.panel(
        "bargauge",
        "Top allocated-but-idle pods",
        "The ten pods holding the most idle GPU capacity now.",
        [
            target(
                f"topk(10, sum by (namespace, pod) ({IDLE}))", "{{namespace}}/{{pod}}", instant=True
            )
        ],
        decimals=2,
        steps=((0.5, "orange"), (1, "red")),
    )

    b.row("Teams")
    b.panel(
        "timeseries",
        "GPU share held by team",
        "gpu_allocation_share joined to kube-state-metrics kube_pod_labels (label_team) on "
        "namespace, pod; pods without a team label are __unallocated__.",
        [target(by_team(f"gpu_allocation_share{{{W}}}"), "{{label_team}}")],
        custom=STACKED,
        decimals=2,
    )
    b.panel(
        "timeseries",
        "Allocated-but-idle GPUs by team",
        "share x (1 - SM utilisation), per team from kube_pod_labels (label_team).",
        [target(by_team(IDLE), "{{label_team}}")],
        custom=STACKED,
        decimals=2,
    )
    b.panel(
        "table",
        "Teams now",
        "Per team: GPUs held, allocated but idle, and the used share of what it holds.",
        [
            target(by_team(f"gpu_allocation_share{{{W}}}"), table=True),
            target(by_team(IDLE), table=True),
            target(f"1 - {by_team(IDLE)} / {by_team(f'gpu_allocation_share{{{W}}}')}", table=True),
        ],
        transformations=merge_table(
            {
                "label_team": "Team",
                "Value #A": "GPUs held",
                "Value #B": "Idle GPUs",
                "Value #C": "Used share",
            }
        ),
        decimals=2,
        w=24,
    )
    return b


# --------------------------------------------------------------------------- (d) FinOps

C = 'team=~"$team", project=~"$project", stage=~"$stage", currency=~"$currency"'
E = 'team=~"$team", project=~"$project", stage=~"$stage"'
P = 'team=~"$team", project=~"$project", currency=~"$currency"'
B = 'team=~"$team", project=~"$project"'
CUR = 'currency=~"$currency"'
SPECIAL = 'team!~"__idle__|__unallocated__"'
TPS = "team, project, stage"
# hours left in the current (UTC) month
HOURS_LEFT = "scalar((days_in_month() - day_of_month()) * 24 + 24 - hour() - minute() / 60)"


def finops(currency: str) -> Board:
    money = f"currency{currency}"
    b = Board(
        "gpu-finops-cost",
        "GPU FinOps",
        "GPU cost by team, project and stage from gpu-costsvc: month to date, hourly rate, "
        "unallocated idle and allocated-but-idle (waste), efficiency, budgets with their "
        "forecast, top wasters, and the cost service's ingest health.",
        ["finops", "cost"],
    )
    b.query_var(
        "currency",
        "Currency",
        "label_values(costsvc_cost_month_to_date, currency)",
        multi=False,
        include_all=False,
    )
    b.query_var(
        "team", "Team", 'label_values(costsvc_cost_month_to_date{currency=~"$currency"}, team)'
    )
    b.query_var(
        "project",
        "Project",
        'label_values(costsvc_cost_month_to_date{currency=~"$currency", team=~"$team"}, project)',
    )
    b.query_var(
        "stage",
        "Stage",
        "label_values(costsvc_cost_month_to_date"
        '{currency=~"$currency", team=~"$team", project=~"$project"}, stage)',
    )
    b.query_var("cluster", "Cluster", "label_values(costsvc_ingest_lag_seconds, cluster)")
    b.query_var("job", "Cost service job", "label_values(costsvc_ingest_lag_seconds, job)")

    b.row("Month to date")
    b.panel(
        "stat",
        "Cost month to date",
        "Sum of costsvc_cost_month_to_date for the selection (idle lines included when "
        "the selection includes them).",
        [target(f"sum(costsvc_cost_month_to_date{{{C}}})")],
        unit=money,
        decimals=0,
        w=4,
        h=4,
    )
    b.panel(
        "stat",
        "Attributed to teams",
        "Month-to-date cost of the selection without the __idle__ and __unallocated__ lines.",
        [target(f"sum(costsvc_cost_month_to_date{{{C}, {SPECIAL}}})")],
        unit=money,
        decimals=0,
        w=4,
        h=4,
    )
    b.panel(
        "stat",
        "Unallocated idle",
        "costsvc_idle_cost_month_to_date: cost of GPU time nobody held, this month.",
        [target(f"sum(costsvc_idle_cost_month_to_date{{{CUR}}})")],
        unit=money,
        decimals=0,
        w=4,
        h=4,
        steps=((1, "orange"),),
    )
    b.panel(
        "stat",
        "Allocated but idle (waste)",
        "costsvc_waste_month_to_date: held GPU cost not used (allocated x (1 - utilisation)).",
        [target(f"sum(costsvc_waste_month_to_date{{{C}}})")],
        unit=money,
        decimals=0,
        w=4,
        h=4,
        steps=((1, "orange"),),
    )
    b.panel(
        "stat",
        "Spend rate",
        "costsvc_cost_rate_per_hour: cost of the last ingested hour (per hour).",
        [target(f"sum(costsvc_cost_rate_per_hour{{{C}}})")],
        unit=money,
        decimals=2,
        w=4,
        h=4,
    )
    b.panel(
        "stat",
        "Projected month end",
        "Month to date plus the last hour's rate for every hour left in the (UTC) month.",
        [
            target(
                f"sum(costsvc_cost_month_to_date{{{C}}}) "
                f"+ sum(costsvc_cost_rate_per_hour{{{C}}}) * {HOURS_LEFT}"
            )
        ],
        unit=money,
        decimals=0,
        w=4,
        h=4,
    )

    b.row("Cost breakdown")
    b.panel(
        "timeseries",
        "Cost month to date by team",
        "costsvc_cost_month_to_date per team (resets at the start of a month).",
        [target(f"sum by (team) (costsvc_cost_month_to_date{{{C}}})", "{{team}}")],
        unit=money,
        custom=STACKED,
    )
    b.panel(
        "timeseries",
        "Hourly cost by team",
        "costsvc_cost_rate_per_hour per team: cost of the last ingested hour (per hour).",
        [target(f"sum by (team) (costsvc_cost_rate_per_hour{{{C}}})", "{{team}}")],
        unit=money,
        custom=STACKED,
    )
    b.panel(
        "bargauge",
        "Cost by project",
        "Month-to-date cost per team and project.",
        [
            target(
                f"sum by (team, project) (costsvc_cost_month_to_date{{{C}}})",
                "{{team}} / {{project}}",
                instant=True,
            )
        ],
        unit=money,
        decimals=0,
        options={"displayMode": "basic"},
    )
    b.panel(
        "bargauge",
        "Cost by stage",
        "Month-to-date cost per stage (e.g. dev, staging, prod).",
        [target(f"sum by (stage) (costsvc_cost_month_to_date{{{C}}})", "{{stage}}", instant=True)],
        unit=money,
        decimals=0,
        options={"displayMode": "basic"},
    )
    b.panel(
        "table",
        "Cost by team, project and stage",
        "Month to date: cost, waste (allocated but idle), last hour's cost and efficiency "
        "(used / allocated).",
        [
            target(f"sum by ({TPS}) (costsvc_cost_month_to_date{{{C}}})", table=True),
            target(f"sum by ({TPS}) (costsvc_waste_month_to_date{{{C}}})", table=True),
            target(f"sum by ({TPS}) (costsvc_cost_rate_per_hour{{{C}}})", table=True),
            target(f"max by ({TPS}) (costsvc_efficiency_ratio{{{E}}})", table=True),
        ],
        transformations=merge_table(
            {
                "Value #A": "Cost MTD",
                "Value #B": "Waste MTD",
                "Value #C": "Last hour",
                "Value #D": "Efficiency",
            }
        ),
        unit=money,
        decimals=2,
        w=24,
    )

    b.row("Idle and waste")
    b.panel(
        "timeseries",
        "Idle share of fleet cost",
        "Unallocated idle cost over total fleet cost, month to date (all teams).",
        [
            target(
                f"sum(costsvc_idle_cost_month_to_date{{{CUR}}}) "
                f"/ sum(costsvc_cost_month_to_date{{{CUR}}})",
                "idle share",
            )
        ],
        unit="percentunit",
        minimum=0,
        w=8,
    )
    b.panel(
        "timeseries",
        "Waste by team",
        "costsvc_waste_month_to_date per team: allocated-but-idle cost this month.",
        [target(f"sum by (team) (costsvc_waste_month_to_date{{{C}}})", "{{team}}")],
        unit=money,
        custom=STACKED,
        w=16,
    )
    b.panel(
        "bargauge",
        "Top wasting pods",
        "The ten pods with the most allocated-but-idle cost this month "
        "(costsvc_pod_waste_month_to_date).",
        [
            target(
                f"topk(10, sum by (team, namespace, pod) (costsvc_pod_waste_month_to_date{{{P}}}))",
                "{{team}}: {{namespace}}/{{pod}}",
                instant=True,
            )
        ],
        unit=money,
        decimals=0,
        steps=((100, "orange"), (1000, "red")),
    )
    b.panel(
        "bargauge",
        "Top wasting projects",
        "The ten team/project pairs with the most allocated-but-idle cost this month.",
        [
            target(
                f"topk(10, sum by (team, project) (costsvc_waste_month_to_date{{{C}}}))",
                "{{team}} / {{project}}",
                instant=True,
            )
        ],
        unit=money,
        decimals=0,
        steps=((100, "orange"), (1000, "red")),
    )
    b.panel(
        "table",
        "Top pods by cost",
        "The twenty most expensive pods this month (costsvc_pod_cost_month_to_date), with "
        "their waste.",
        [
            target(
                "topk(20, sum by (team, project, namespace, pod) "
                f"(costsvc_pod_cost_month_to_date{{{P}}}))",
                table=True,
            ),
            target(
                f"sum by (team, project, namespace, pod) (costsvc_pod_waste_month_to_date{{{P}}})",
                table=True,
            ),
        ],
        transformations=[
            *merge_table({"Value #A": "Cost MTD", "Value #B": "Waste MTD"}),
            {
                "id": "filterByValue",
                "options": {
                    "filters": [
                        {"config": {"id": "isNull", "options": {}}, "fieldName": "Cost MTD"}
                    ],
                    "match": "any",
                    "type": "exclude",
                },
            },
            {"id": "sortBy", "options": {"sort": [{"desc": True, "field": "Cost MTD"}]}},
        ],
        unit=money,
        decimals=2,
        w=24,
    )

    b.row("Efficiency")
    b.panel(
        "stat",
        "Cost-weighted efficiency",
        "costsvc_efficiency_ratio (used / allocated, month to date) averaged over the "
        "selection, weighted by month-to-date cost.",
        [
            target(
                f"sum(costsvc_efficiency_ratio{{{E}}} * on ({TPS}) "
                f"sum by ({TPS}) (costsvc_cost_month_to_date{{{C}}})) "
                f"/ sum(sum by ({TPS}) (costsvc_cost_month_to_date{{{C}}}) "
                f"and on ({TPS}) costsvc_efficiency_ratio{{{E}}})"
            )
        ],
        unit="percentunit",
        minimum=0,
        maximum=1,
        steps=((0, "red"), (0.3, "orange"), (0.6, "green")),
        w=6,
    )
    b.panel(
        "timeseries",
        "Efficiency month to date",
        "costsvc_efficiency_ratio per team/project/stage: used / allocated cost this month.",
        [
            target(
                f"costsvc_efficiency_ratio{{{E}, {SPECIAL}}}",
                "{{team}} / {{project}} / {{stage}}",
            )
        ],
        unit="percentunit",
        minimum=0,
        maximum=1,
        w=9,
    )
    b.panel(
        "timeseries",
        "Hourly efficiency",
        "costsvc_hourly_efficiency_ratio: used / allocated in the last ingested hour.",
        [
            target(
                f"costsvc_hourly_efficiency_ratio{{{E}, {SPECIAL}}}",
                "{{team}} / {{project}} / {{stage}}",
            )
        ],
        unit="percentunit",
        minimum=0,
        maximum=1,
        w=9,
    )
    b.panel(
        "bargauge",
        "Least efficient",
        "The ten team/project/stage lines with the lowest month-to-date efficiency.",
        [
            target(
                f"bottomk(10, costsvc_efficiency_ratio{{{E}, {SPECIAL}}})",
                "{{team}} / {{project}} / {{stage}}",
                instant=True,
            )
        ],
        unit="percentunit",
        minimum=0,
        maximum=1,
        steps=((0, "red"), (0.3, "orange"), (0.6, "green")),
        w=24,
    )

    b.row("Budgets")
    b.panel(
        "stat",
        "Budgets forecast to overrun",
        "Budgets whose month-end forecast (costsvc_budget_forecast_ratio) exceeds 100 %.",
        [target(f"count(costsvc_budget_forecast_ratio{{{B}}} > 1) or vector(0)")],
        steps=((1, "red"),),
        w=6,
    )
    b.panel(
        "bargauge",
        "Budget used",
        "costsvc_budget_used_ratio: month-to-date cost over the monthly budget.",
        [
            target(
                f"max by (team, project) (costsvc_budget_used_ratio{{{B}}})",
                "{{team}} / {{project}}",
                instant=True,
            )
        ],
        unit="percentunit",
        minimum=0,
        maximum=1.2,
        steps=((0.8, "orange"), (1, "red")),
        w=9,
    )
    b.panel(
        "bargauge",
        "Budget forecast (month end)",
        "costsvc_budget_forecast_ratio: forecast month-end cost over the budget.",
        [
            target(
                f"max by (team, project) (costsvc_budget_forecast_ratio{{{B}}})",
                "{{team}} / {{project}}",
                instant=True,
            )
        ],
        unit="percentunit",
        minimum=0,
        maximum=1.2,
        steps=((0.9, "orange"), (1, "red")),
        w=9,
    )
    b.panel(
        "timeseries",
        "Budget burn",
        "costsvc_budget_used_ratio over time (solid) and the month-end forecast (dashed "
        "legend suffix 'forecast').",
        [
            target(
                f"max by (team, project) (costsvc_budget_used_ratio{{{B}}})",
                "{{team}} / {{project}} used",
            ),
            target(
                f"max by (team, project) (costsvc_budget_forecast_ratio{{{B}}})",
                "{{team}} / {{project}} forecast",
            ),
        ],
        unit="percentunit",
        minimum=0,
        steps=((1, "red"),),
    )
    b.panel(
        "table",
        "Budgets",
        "Per budget: monthly amount, spent so far (amount x used ratio), used and forecast ratios.",
        [
            target(f"max by (team, project) (costsvc_budget_amount{{{B}, {CUR}}})", table=True),
            target(
                f"max by (team, project) (costsvc_budget_amount{{{B}, {CUR}}}) * on (team, "
                f"project) max by (team, project) (costsvc_budget_used_ratio{{{B}}})",
                table=True,
            ),
            target(f"max by (team, project) (costsvc_budget_used_ratio{{{B}}})", table=True),
            target(f"max by (team, project) (costsvc_budget_forecast_ratio{{{B}}})", table=True),
        ],
        transformations=merge_table(
            {"Value #A": "Budget", "Value #B": "Spent", "Value #C": "Used", "Value #D": "Forecast"}
        ),
        unit=money,
        decimals=0,
    )

    b.row("Cost service health", collapsed=True)
    b.panel(
        "timeseries",
        "Ingest lag",
        "costsvc_ingest_lag_seconds: how far the cost service's watermark trails now, per cluster.",
        [
            target(
                'max by (cluster) (costsvc_ingest_lag_seconds{cluster=~"$cluster"})',
                "{{cluster}}",
            )
        ],
        unit="s",
        steps=((7200, "orange"), (14400, "red")),
        w=8,
    )
    b.panel(
        "stat",
        "Since last successful ingest",
        "time() - costsvc_last_ingest_success_timestamp_seconds per cluster.",
        [
            target(
                "time() - max by (cluster) "
                '(costsvc_last_ingest_success_timestamp_seconds{cluster=~"$cluster"})',
                "{{cluster}}",
            )
        ],
        unit="s",
        steps=((7200, "orange"), (14400, "red")),
        w=8,
    )
    b.panel(
        "stat",
        "Cost service scrape up",
        "Prometheus `up` for the cost service targets.",
        [target('up{job=~"$job"}', "{{instance}}")],
        mappings=UP_MAPPING,
        steps=((0, "red"), (1, "green")),
        options={"colorMode": "background", "graphMode": "none"},
        w=8,
    )
    return b


# --------------------------------------------------------------------------- output


def build(currency: str = "USD") -> dict[str, Json]:
    """File name -> dashboard."""
    return {
        "gpu-fleet.json": fleet().render(),
        "gpu-mig.json": mig().render(),
        "gpu-workloads.json": workloads().render(),
        "gpu-finops.json": finops(currency).render(),
    }


def render(dashboard: Json) -> str:
    return json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare, write nothing")
    ap.add_argument("--currency", default="USD", help="ISO code for the money unit (USD)")
    ap.add_argument("--out", type=Path, default=HERE, help="output folder")
    args = ap.parse_args(argv)
    stale = []
    for name, dashboard in build(args.currency.upper()).items():
        path = args.out / name
        text = render(dashboard)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print("out of date: " + ", ".join(stale) + " (run python dashboards/generate.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
