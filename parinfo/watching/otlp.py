"""`parinfo watch --otlp URL` and `parinfo host --otlp URL`: each sample (or scan) sent to an
OpenTelemetry collector as one OTLP/HTTP (protobuf) metrics request.

The names, units and attribute keys are :mod:`parinfo.watching.otel_names`'; the callers turn a
sample or a scan into :class:`Point` values (:mod:`parinfo.watching.otel_watch`,
:mod:`parinfo.host.otel`). A value parinfo could not read has no point: "not reported" is never
sent as 0. The request is built here from the SDK's metric data (one request per sample, sent when
the sample is made, so a point covers exactly the interval the printed sample does) and sent by the
SDK's OTLP/HTTP exporter, so no reader or aggregation sits between the sample and the request, and a
process that ends simply has no point in the next one. Counters carry the kernel's cumulative
counts, with the time the export began as their start.

The SDK (the ``otel`` extra) is imported here only, and only when ``--otlp`` is given.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from parinfo.errors import UsageError
from parinfo.safe_text import label_value, shorten
from parinfo.watching.otel_names import COUNTER, GAUGE, SCHEMA_URL, OtelMetric

EXTRA_HINT = "pip install 'parinfo[otel]'"
#: The OTLP/HTTP path of metrics, added to a URL given without a path.
METRICS_PATH = "/v1/metrics"
#: Seconds one export may take (retries included) before it counts as failed.
EXPORT_TIMEOUT = 5.0
#: Seconds the collector has to accept a connection before the export starts.
CONNECT_TIMEOUT = 3.0


class Point(NamedTuple):
    """One value of one metric, with its attributes (their keys as the metric declares them)."""

    metric: OtelMetric
    value: int | float
    attributes: Mapping[str, str | int]


def point(metric: OtelMetric, mode: str, value: int | float, attributes: Mapping[str, str | int]) -> Point:
    """A point of ``metric`` in ``mode`` ("watch" or "host"), its text values escaped as the
    Prometheus labels are (another process's name or cgroup never sends a control byte); ValueError
    when the metric is not exported in that mode or the attribute keys are not the ones it declares
    (a bug, never input)."""
    keys = metric.watch if mode == "watch" else metric.host
    if keys is None or set(attributes) != set(keys):
        raise ValueError(f"{metric.name} in {mode}: attributes {sorted(attributes)}, declared {keys}")
    return Point(metric, value, {k: label_value(v) if isinstance(v, str) else v for k, v in attributes.items()})


def endpoint(url: str) -> str:
    """The metrics endpoint of ``--otlp URL``: http(s)://HOST:PORT[/path], ``/v1/metrics`` when the
    URL has no path. UsageError for anything else."""
    from urllib.parse import urlsplit

    from parinfo.machine.checks import shown

    bad = f"--otlp {shown(url)}: give the collector's OTLP/HTTP URL, e.g. http://127.0.0.1:4318"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise UsageError(bad) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise UsageError(bad)
    if port is None:
        raise UsageError(f"{bad} (the port is needed: OTLP/HTTP listens on 4318 by default)")
    return url if parts.path not in ("", "/") else url.rstrip("/") + METRICS_PATH


def sdk() -> Any:
    """The OTLP/HTTP metric exporter class, or a UsageError that says how to install it."""
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    except ImportError:
        raise UsageError(f"--otlp needs the OpenTelemetry SDK and its OTLP/HTTP exporter, which are not "
                         f"installed: {EXTRA_HINT}") from None
    return OTLPMetricExporter


def check_otlp(url: str) -> str:
    """Refuse a bad ``--otlp`` URL, a missing extra or a collector that does not accept a
    connection (a UsageError each: one line, exit 2) before anything is read; the endpoint."""
    import socket
    from urllib.parse import urlsplit

    from parinfo.machine.checks import shown

    where = endpoint(url)
    sdk()
    parts = urlsplit(where)
    try:
        socket.create_connection((parts.hostname, parts.port or 0), timeout=CONNECT_TIMEOUT).close()
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise UsageError(f"--otlp {shown(url)}: cannot reach the collector at {shown(parts.netloc)}: "
                         f"{shown(why, 120)}") from None
    return where


class _FirstWords(logging.Handler):
    """Keeps the first line the SDK logged since :attr:`first` was cleared (why an export failed:
    the later ones say only that it gave up) instead of printing it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.first: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.first is None:
            import re

            text = record.getMessage().strip()
            errno = re.search(r"\[Errno -?\d+\] [^'\")\]]+", text)  # the system's words, deep in requests' wording
            self.first = shorten(errno.group(0) if errno else text.split("\n")[0], 160) or None


class OtlpExport:
    """Sends points to one OTLP/HTTP endpoint, a request per call of :meth:`send`."""

    def __init__(self, url: str, timeout: float = EXPORT_TIMEOUT) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        from parinfo.version import __version__

        self.url = url
        self._words = _FirstWords()
        sdk_log = logging.getLogger("opentelemetry")
        sdk_log.addHandler(self._words)
        sdk_log.propagate = False  # its tracebacks never reach the terminal: send() says why in one line
        self._exporter = sdk()(endpoint=url, timeout=timeout)
        self._resource = Resource.create({"service.name": "parinfo", "service.version": __version__})
        self._scope = InstrumentationScope("parinfo", __version__, SCHEMA_URL)
        self.start_ns = time.time_ns()
        self.failing = False

    def send(self, points: Iterable[Point]) -> str | None:
        """Send ``points`` as one request. None when sent, or when still failing as the last send did;
        else the one line to print: that sending failed (and why, as the SDK said), or that it works again."""
        from opentelemetry.sdk.metrics.export import MetricExportResult

        self._words.first = None
        try:
            ok = self._exporter.export(self._data(points)) is MetricExportResult.SUCCESS
        except Exception as exc:  # the SDK's own failure, whatever it is, is one line and the watch goes on
            ok, self._words.first = False, shorten(f"{type(exc).__name__}: {exc}", 200)
        if ok == (not self.failing):
            return None
        self.failing = not ok
        if ok:
            return f"parinfo: OTLP export to {self.url} works again"
        return (f"parinfo: warning: OTLP export to {self.url} failed ({self._words.first or 'not accepted'}); "
                f"going on, each sample is sent as it comes")

    def close(self) -> None:
        """Close the exporter's connection (every request was sent when made: nothing is left to flush)."""
        self._exporter.shutdown()
        logging.getLogger("opentelemetry").removeHandler(self._words)

    def _data(self, points: Iterable[Point]) -> Any:
        from opentelemetry.sdk.metrics.export import (
            AggregationTemporality,
            Gauge,
            Metric,
            MetricsData,
            NumberDataPoint,
            ResourceMetrics,
            ScopeMetrics,
            Sum,
        )

        now = time.time_ns()
        by_metric: dict[OtelMetric, list[Any]] = {}
        for p in points:
            start = 0 if p.metric.instrument == GAUGE else self.start_ns
            by_metric.setdefault(p.metric, []).append(NumberDataPoint(dict(p.attributes), start, now, p.value))
        metrics = []
        for m, data in by_metric.items():
            kind = Gauge(data) if m.instrument == GAUGE else Sum(
                data, AggregationTemporality.CUMULATIVE, is_monotonic=m.instrument == COUNTER)
            metrics.append(Metric(m.name, m.what, m.unit, kind))
        scope = ScopeMetrics(self._scope, metrics, SCHEMA_URL)
        return MetricsData([ResourceMetrics(self._resource, [scope], SCHEMA_URL)])
