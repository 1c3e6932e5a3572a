"""The server's own metrics read beside the load: the Prometheus text
format (``prometheus.py``), the servers' names (``names.py``), the scraper
(``scraper.py``) and what a point's scrapes sum up to (``summary.py``)."""

from .names import MAPPED, family_of, map_page
from .prometheus import Page, PrometheusError, Sample, parse_page
from .scraper import Scraper, ServerMetricsRun, metrics_url
from .summary import server_metrics_summary

__all__ = (
    "MAPPED",
    "Page",
    "PrometheusError",
    "Sample",
    "Scraper",
    "ServerMetricsRun",
    "family_of",
    "map_page",
    "metrics_url",
    "parse_page",
    "server_metrics_summary",
)
