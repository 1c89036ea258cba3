"""A real OTLP/HTTP metrics receiver for the tests: an http.server on 127.0.0.1 (an ephemeral port)
that decodes each POST as an ExportMetricsServiceRequest with opentelemetry-proto's own classes and
answers as a collector does (200 with an ExportMetricsServiceResponse).

Skips the test, with why, where the ``otel`` extra (which brings opentelemetry-proto) is absent.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

import pytest

PATH = "/v1/metrics"


def needs_extra() -> None:
    """Skip unless the exporter and opentelemetry-proto can be imported."""
    import importlib

    try:
        for module in ("opentelemetry.exporter.otlp.proto.http.metric_exporter",
                       "opentelemetry.proto.collector.metrics.v1.metrics_service_pb2"):
            importlib.import_module(module)
    except ImportError as exc:
        pytest.skip(f"the otel extra is not installed (pip install 'parinfo[otel]'): {exc}")


class Received(NamedTuple):
    """One data point as the receiver decoded it."""

    name: str
    unit: str
    kind: str  # "gauge" or "sum"
    monotonic: bool | None  # sums only
    cumulative: bool | None  # sums only
    attributes: dict[str, Any]
    value: int | float
    start_ns: int
    time_ns: int


class Receiver:
    """The requests received so far (decoded) and the URL to give ``--otlp``."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.paths: list[str] = []
        self.refused = 0  # requests seen, refused or not
        self.lock = threading.Lock()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def points(self, request: Any) -> list[Received]:
        """Every data point of one request."""
        from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality

        out = []
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    data = getattr(m, kind)
                    mono = data.is_monotonic if kind == "sum" else None
                    cum = (data.aggregation_temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
                           if kind == "sum" else None)
                    for p in data.data_points:
                        attrs = {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in p.attributes}
                        value = p.as_int if p.WhichOneof("value") == "as_int" else p.as_double
                        out.append(Received(m.name, m.unit, kind, mono, cum, attrs, value,
                                            p.start_time_unix_nano, p.time_unix_nano))
        return out


@contextmanager
def receiver(accept: int | None = None, refuse: int = 0) -> Iterator[Receiver]:
    """A receiver running until the block ends (stopped in ``finally``); with ``accept``, it closes
    its port after that many requests (the collector gone during a run); the first ``refuse``
    requests are answered 400 Bad Request (not kept)."""
    needs_extra()
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
        ExportMetricsServiceResponse,
    )

    got = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            request = ExportMetricsServiceRequest()
            request.ParseFromString(body)
            with got.lock:
                got.refused += 1
                if got.refused <= refuse:
                    self.send_response(400)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                got.requests.append(request)
                got.paths.append(self.path)
                done = accept is not None and len(got.requests) >= accept
            answer = ExportMetricsServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)
            if done:  # the port closed: later requests are refused, as by a collector that went away
                threading.Thread(target=_close, daemon=True).start()

        def log_message(self, format: str, *args: Any) -> None:
            """Log no request."""

    def _close() -> None:
        server.shutdown()
        server.server_close()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    got.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
