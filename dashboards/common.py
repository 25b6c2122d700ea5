"""What the four dashboards share: the board itself, variables, targets, panel defaults.

Every panel and target reads the Prometheus data source chosen in the `datasource` variable.
"""

from __future__ import annotations

from typing import Protocol, Self, TypeVar

from grafana_foundation_sdk.builders import bargauge, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as builders
from grafana_foundation_sdk.cog import builder as cog
from grafana_foundation_sdk.cog import variants
from grafana_foundation_sdk.models import common, units
from grafana_foundation_sdk.models import dashboard as models
from grafana_foundation_sdk.models.prometheus import PromQueryFormat, QueryEditorMode

SCHEMA_VERSION = 39  # Grafana 10.4, the version docker-compose.yml runs
TAG = "gpu-finops"
DATASOURCE = models.DataSourceRef(type_val="prometheus", uid="${datasource}")
GRAFANA = models.DataSourceRef(type_val="grafana", uid="-- Grafana --")

# Money: the cost service's money series are in the billing currency their `currency` label
# names, which the money dashboards' `currency` variable picks from those series. Grafana does
# not substitute variables in a unit (grafana/grafana#32902: `currency:$currency` would show
# "$currency"), so no currency unit is written: money panels set the unit MONEY, which
# `finish` turns into plain numbers (MONEY_UNIT) and a title naming the currency, e.g.
# "Cost month to date (EUR)".
MONEY = "money"
MONEY_UNIT = "short"
MONEY_TITLE = " (${currency})"

# The cost service's pages (/ui): their base URL is the dashboards' `costsvc_url` variable (a
# text box, its default the address docker-compose publishes; set it in the URL,
# `var-costsvc_url=...`, or in the dashboard JSON). The range's month or days go along.
COSTSVC_URL = "http://localhost:8080"
MONTH = "${__from:date:YYYY-MM}"
DAYS = "from=${__from:date:YYYY-MM-DD}&to=${__to:date:YYYY-MM-DD}"
PAGE_LINKS = (
    ("Cost service: overview", "${costsvc_url}/ui/overview?month=" + MONTH),
    ("Cost service: explore", "${costsvc_url}/ui/explore?" + DAYS + "&group_by=team"),
)
# a data link on series with a `team` label: the team's page and its costs in the explorer
TEAM_LINKS = (
    (
        "${__field.labels.team}: team page",
        "${costsvc_url}/ui/teams/${__field.labels.team}?month=" + MONTH,
    ),
    (
        "${__field.labels.team}: explore",
        "${costsvc_url}/ui/explore?" + DAYS + "&team=${__field.labels.team}&group_by=project",
    ),
)

Steps = tuple[tuple[float, str], ...]
Panel = cog.Builder[models.Panel]


# --------------------------------------------------------------------------- the board


def board(
    uid: str,
    title: str,
    description: str,
    tags: list[str],
    variables: list[builders.QueryVariable],
    clusters_of: str,
) -> builders.Dashboard:
    """A dashboard with the `datasource` and `cluster` variables (the clusters of the series
    `clusters_of`; every query reads `cluster=~"$cluster"`) then `variables`, the built-in
    annotations and links to the other gpu-finops dashboards. Its time range is this month
    (`now/M` to now): the month the cost service's month-to-date series count."""
    dashboard = (
        builders.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags([TAG, *tags])
        .editable()
        .tooltip(models.DashboardCursorSync.CROSSHAIR)
        .time("now/M", "now")
        .timezone("")
        .week_start("")
        .fiscal_year_start_month(0)
        .refresh("1m")
        .version(1)
        .annotation(
            builders.AnnotationQuery()
            .built_in(1)
            .datasource(GRAFANA)
            .enable(True)
            .hide(True)
            .icon_color("rgba(0, 211, 255, 1)")
            .name("Annotations & Alerts")
            .type("dashboard")
        )
        .link(
            builders.DashboardLink("GPU dashboards")
            .type(models.DashboardLinkType.DASHBOARDS)
            .as_dropdown(True)
            .icon("external link")
            .include_vars(True)
            .keep_time(True)
            .tags([TAG])
            .target_blank(False)
        )
        .with_variable(
            builders.DatasourceVariable("datasource")
            .label("Data source")
            .type("prometheus")
            .hide(models.VariableHide.DONT_HIDE)
            .multi(False)
            .include_all(False)
            .regex("")
        )
        .with_variable(
            query_variable("cluster", "Cluster", f"label_values({clusters_of}, cluster)")
        )
    )
    for variable in variables:
        dashboard.with_variable(variable)
    dashboard.with_variable(
        builders.TextBoxVariable("costsvc_url")
        .label("Cost service URL")
        .description("Base URL of gpu-costsvc, for the links to its pages (/ui)")
        .default_value(COSTSVC_URL)
        .current(models.VariableOption(selected=True, text=COSTSVC_URL, value=COSTSVC_URL))
        .hide(models.VariableHide.DONT_HIDE)
    )
    for name, url in PAGE_LINKS:
        dashboard.link(page_link(name, url))
    return dashboard


def page_link(title: str, url: str) -> builders.DashboardLink:
    """A link to a page of the cost service, in a new tab (the page takes no Grafana
    variables: `url` carries what it needs)."""
    return (
        builders.DashboardLink(title)
        .type(models.DashboardLinkType.LINK)
        .url(url)
        .icon("external link")
        .tooltip("Opens gpu-costsvc's page in a new tab")
        .include_vars(False)
        .keep_time(False)
        .as_dropdown(False)
        .tags([])
        .target_blank(True)
    )


def team_links() -> list[cog.Builder[models.DashboardLink]]:
    """Data links from a series with a `team` label to the team's page and explorer view."""
    return [page_link(title, url) for title, url in TEAM_LINKS]


def finish(dashboard: builders.Dashboard) -> models.Dashboard:
    """Build the dashboard: schema version, panel ids (rows and their panels in order) and the
    money panels' unit and title (:data:`MONEY`)."""
    model = dashboard.build()
    model.schema_version = SCHEMA_VERSION
    panel_id = 0
    for panel in model.panels or []:
        panel_id += 1
        panel.id_val = panel_id
        if isinstance(panel, models.RowPanel):
            for inner in panel.panels:
                panel_id += 1
                inner.id_val = panel_id
                _money(inner)
        else:
            _money(panel)
    return model


def _money(panel: models.Panel) -> None:
    defaults = panel.field_config.defaults if panel.field_config else None
    if defaults is not None and defaults.unit == MONEY:
        defaults.unit = MONEY_UNIT
        panel.title = (panel.title or "") + MONEY_TITLE


def add_row(dashboard: builders.Dashboard, title: str, panels: list[Panel]) -> None:
    """An expanded row: its title bar, then its panels laid left to right on the grid."""
    dashboard.with_row(builders.Row(title))
    for panel in panels:
        dashboard.with_panel(panel)


def collapsed_row(title: str, panels: list[Panel]) -> builders.Row:
    """A row shown collapsed, holding its panels."""
    row = builders.Row(title)
    for panel in panels:
        row.with_panel(panel)
    return row


# --------------------------------------------------------------------------- variables


class _QueryVariableModel(models.VariableModel):
    """A query variable with `definition`, the query text Grafana shows in the variable list
    (the SDK's model has no field for it)."""

    definition: str = ""

    def to_json(self) -> dict[str, object]:
        return {**super().to_json(), "definition": self.definition}


class _QueryVariable(builders.QueryVariable):
    _internal: _QueryVariableModel

    def __init__(self, name: str, definition: str) -> None:
        self._internal = _QueryVariableModel(name=name, type_val=models.VariableType.QUERY)
        self._internal.definition = definition


def query_variable(
    name: str, label: str, query: str, *, multi: bool = True, include_all: bool = True
) -> builders.QueryVariable:
    """A `label_values(...)` variable of the Prometheus data source; "All" is the regex `.*`."""
    variable = (
        _QueryVariable(name, query)
        .label(label)
        .description(f"Values of {query}")
        .datasource(DATASOURCE)
        .query(
            {
                "qryType": 1,
                "query": query,
                "refId": "PrometheusVariableQueryEditor-VariableQuery",
            }
        )
        .hide(models.VariableHide.DONT_HIDE)
        .include_all(include_all)
        .multi(multi)
        .options([])
        .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .regex("")
        .sort(models.VariableSort.ALPHABETICAL_ASC)
    )
    return variable.all_value(".*") if include_all else variable


# --------------------------------------------------------------------------- targets


def target(
    expr: str, legend: str = "", *, instant: bool = False, table: bool = False
) -> prometheus.Dataquery:
    """A PromQL query; `table` asks for an instant query in table format."""
    query = (
        prometheus.Dataquery()
        .datasource(DATASOURCE)
        .editor_mode(QueryEditorMode.CODE)
        .expr(expr)
        .legend_format(legend or "__auto")
    )
    if table:
        query.format(PromQueryFormat.TABLE)
    return query.instant() if instant or table else query.range()


# --------------------------------------------------------------------------- field settings


def thresholds(*steps: tuple[float, str]) -> builders.ThresholdsConfig:
    """Absolute thresholds: green below the first step, then each (value, colour)."""
    return (
        builders.ThresholdsConfig()
        .mode(models.ThresholdsMode.ABSOLUTE)
        .steps(
            [
                models.Threshold(value=None, color="green"),
                *(models.Threshold(value=v, color=c) for v, c in steps),
            ]
        )
    )


# used / allocated ratios: red below 30 %, orange below 60 %
USED_RATIO_STEPS: Steps = ((0, "red"), (0.3, "orange"), (0.6, "green"))
UP_DOWN: list[models.ValueMapping] = [
    models.ValueMap(
        options={
            "0": models.ValueMappingResult(color="red", index=0, text="DOWN"),
            "1": models.ValueMappingResult(color="green", index=1, text="UP"),
        }
    )
]


def _merge_table(
    rename: dict[str, str], hide: tuple[str, ...] = ("Time",)
) -> list[models.DataTransformerConfig]:
    """Transformations that merge instant table queries and name the value columns."""
    return [
        models.DataTransformerConfig(id_val="merge", options={}),
        models.DataTransformerConfig(
            id_val="organize",
            options={
                "excludeByName": dict.fromkeys(hide, True),
                "indexByName": {},
                "renameByName": rename,
            },
        ),
    ]


# --------------------------------------------------------------------------- panels


class _Panel(Protocol):
    """What every SDK panel builder offers."""

    def title(self, title: str) -> Self: ...
    def description(self, description: str) -> Self: ...
    def datasource(self, datasource: models.DataSourceRef) -> Self: ...
    def with_target(self, target: cog.Builder[variants.Dataquery]) -> Self: ...
    def span(self, w: int) -> Self: ...
    def height(self, h: int) -> Self: ...
    def unit(self, unit: str) -> Self: ...
    def mappings(self, mappings: list[models.ValueMapping]) -> Self: ...
    def thresholds(self, thresholds: cog.Builder[models.ThresholdsConfig]) -> Self: ...
    def color_scheme(self, color: cog.Builder[models.FieldColor]) -> Self: ...
    def decimals(self, decimals: float) -> Self: ...
    def min(self, min_val: float) -> Self: ...
    def max(self, max_val: float) -> Self: ...


P = TypeVar("P", bound=_Panel)


def _panel(
    panel: P,
    title: str,
    description: str,
    targets: tuple[prometheus.Dataquery, ...],
    color: models.FieldColorModeId = models.FieldColorModeId.THRESHOLDS,
) -> P:
    """Defaults of every panel: 12 x 8, no unit, green base threshold, refIds A, B, ..."""
    panel.title(title).description(description).datasource(DATASOURCE).span(12).height(8)
    panel.unit(units.NoUnit).mappings([]).thresholds(thresholds())
    panel.color_scheme(builders.FieldColor().mode(color))
    for i, query in enumerate(targets):
        panel.with_target(query.ref_id(chr(ord("A") + i)))
    return panel


def shown(expr: str) -> str:
    """A ratio as it is shown and alerted on: rounded down to 0.01 % (the alert rules compare
    the same floor, the API shows six places rounded down: costsvc/kit/ratios.py ``shown``),
    so a value under a threshold never reads as the threshold. The hair added before the
    floor absorbs the float product (0.29 x 10000 = 2899.9999999999995)."""
    return f"floor(({expr}) * 10000 + 0.000001) / 10000"


def ratio(panel: P) -> P:
    """A 0..1 ratio, shown in percent on a 0 to 1 scale, two places (0.01 %: its targets go
    through :func:`shown`)."""
    panel.unit(units.PercentUnit).min(0).max(1).decimals(2)
    return panel


def percent(panel: P) -> P:
    """A percentage, on a 0 to 100 scale."""
    panel.unit(units.Percent).min(0).max(100)
    return panel


def _last_value() -> common_builders.ReduceDataOptions:
    return common_builders.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False)


def stat_panel(title: str, description: str, *targets: prometheus.Dataquery) -> stat.Panel:
    """A stat with the last value and a sparkline."""
    return (
        _panel(stat.Panel(), title, description, targets)
        .color_mode(common.BigValueColorMode.VALUE)
        .graph_mode(common.BigValueGraphMode.AREA)
        .justify_mode(common.BigValueJustifyMode.AUTO)
        .orientation(common.VizOrientation.AUTO)
        .reduce_options(_last_value())
        .show_percent_change(False)
        .text_mode(common.BigValueTextMode.AUTO)
        .wide_layout(True)
    )


def up_panel(title: str, description: str, *targets: prometheus.Dataquery) -> stat.Panel:
    """A stat per series reading UP (green) or DOWN (red)."""
    return (
        stat_panel(title, description, *targets)
        .mappings(UP_DOWN)
        .thresholds(thresholds((0, "red"), (1, "green")))
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.NONE)
    )


def timeseries_panel(
    title: str, description: str, *targets: prometheus.Dataquery
) -> timeseries.Panel:
    """Lines, with a table legend (mean, max, last) and a shared sorted tooltip."""
    return (
        _panel(
            timeseries.Panel(), title, description, targets, models.FieldColorModeId.PALETTE_CLASSIC
        )
        .draw_style(common.GraphDrawStyle.LINE)
        .fill_opacity(10)
        .line_width(1)
        .show_points(common.VisibilityMode.NEVER)
        .span_nulls(False)
        .stacking(common_builders.StackingConfig().group("A").mode(common.StackingMode.NONE))
        .legend(
            common_builders.VizLegendOptions()
            .calcs(["mean", "max", "lastNotNull"])
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(
            common_builders.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    )


def stacked(panel: timeseries.Panel) -> timeseries.Panel:
    """Areas stacked on each other (shares that add up)."""
    return panel.fill_opacity(40).stacking(
        common_builders.StackingConfig().group("A").mode(common.StackingMode.NORMAL)
    )


def bars(panel: timeseries.Panel) -> timeseries.Panel:
    """Bars, for events and on/off states."""
    return panel.draw_style(common.GraphDrawStyle.BARS).fill_opacity(60)


def bargauge_panel(title: str, description: str, *targets: prometheus.Dataquery) -> bargauge.Panel:
    """Horizontal gradient bars of the last value per series."""
    return (
        _panel(bargauge.Panel(), title, description, targets)
        .display_mode(common.BarGaugeDisplayMode.GRADIENT)
        .max_viz_height(300)
        .min_viz_height(16)
        .min_viz_width(8)
        .name_placement(common.BarGaugeNamePlacement.AUTO)
        .orientation(common.VizOrientation.HORIZONTAL)
        .reduce_options(_last_value())
        .show_unfilled(True)
        .sizing(common.BarGaugeSizing.AUTO)
        .value_mode(common.BarGaugeValueMode.COLOR)
    )


def basic_bars(panel: bargauge.Panel) -> bargauge.Panel:
    """Plain bars coloured by threshold, no gradient."""
    return panel.display_mode(common.BarGaugeDisplayMode.BASIC)


def table_panel(
    title: str,
    description: str,
    *targets: prometheus.Dataquery,
    columns: dict[str, str],
    hide: tuple[str, ...] = ("Time",),
) -> table.Panel:
    """A filterable table of instant queries merged into one, value columns renamed."""
    return (
        _panel(table.Panel(), title, description, targets)
        .align(common.FieldTextAlignment.AUTO)
        .filterable(True)
        .cell_height(common.TableCellHeight.SM)
        .footer(common_builders.TableFooterOptions().count_rows(False).reducer(["sum"]).show(False))
        .show_header(True)
        .transformations(_merge_table(columns, hide))
    )


def value_columns(*names: str) -> dict[str, str]:
    """Column names for the values of queries A, B, ... of a merged table."""
    return {f"Value #{chr(ord('A') + i)}": name for i, name in enumerate(names)}
