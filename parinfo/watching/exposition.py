"""What a ``--serve`` scrape returns and the HTTP server that returns it, for ``watch --serve``
and ``host --serve`` alike.

prometheus_client's own server is not used as it is, for two reasons:

- Label values come from other processes (process names, cgroup paths) and prometheus_client
  escapes only backslash, quote and newline in them: every label value of every family is escaped
  here with :func:`parinfo.safe_text.label_value` on its way out, whichever collector made it.
- Its ``name[]`` filter asks each collector to describe its names, which a collector that reads the
  machine on every scrape cannot do without reading it, and so returns an empty body for any
  filter. Here a scrape collects once and filters the families it got: a family's name or a
  sample's name (``..._total``) selects it. A filter that selects nothing served here is a
  ``400 Bad Request`` whose one-line body lists what is served, rather than an empty 200 that
  reads as "no data".

The formats (text, OpenMetrics on request, gzip) are prometheus_client's encoders.
"""
from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from parinfo.safe_text import label_value, shorten

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

#: The names a request may list in ``name[]``.
MAX_NAMES = 64


class _Families:
    """Families already collected, as the encoders want them (an object with ``collect()``)."""

    def __init__(self, families: list[Any]) -> None:
        self.families = families

    def collect(self) -> Iterator[Any]:
        return iter(self.families)


def escaped(families: Iterable[Any]) -> list[Any]:
    """``families`` with every label value of every sample escaped for Prometheus."""
    out = []
    for family in families:
        family.samples = [s._replace(labels={k: label_value(v) for k, v in s.labels.items()})
                          for s in family.samples]
        out.append(family)
    return out


def _names(family: Any) -> set[str]:
    names = {family.name, *(s.name for s in family.samples)}
    if family.type == "counter":
        names.add(family.name + "_total")
    return names


def _restricted(family: Any, wanted: set[str]) -> Any | None:
    """``family`` cut to the samples ``wanted`` names (whole when its own name is wanted); None when
    none of its names is wanted. A wanted family without samples now keeps its HELP and TYPE."""
    if family.name in wanted:
        return family
    if not _names(family) & wanted:
        return None
    from prometheus_client.metrics_core import Metric

    kept = Metric(family.name, family.documentation, family.type, family.unit)
    kept.samples = [s for s in family.samples if s.name in wanted]
    return kept


def scrape(collector: Any, query: str, accept: str | None,
           accept_encoding: str | None) -> tuple[str, list[tuple[str, str]], bytes]:
    """(status, headers, body) of one scrape of ``collector`` for a request's query string and
    Accept headers."""
    from prometheus_client.exposition import choose_encoder, gzip_accepted

    families = escaped(collector.collect())
    wanted = parse_qs(query, keep_blank_values=True).get("name[]")
    if wanted is not None:
        served = set().union(*(_names(f) for f in families))
        if not served.intersection(wanted):
            asked = ", ".join(repr(shorten(n, 60)) for n in wanted[:5])
            body = (f"name[] selects no metric served here (asked for {asked}); this server serves "
                    f"{', '.join(sorted(f.name for f in families))}\n")
            return "400 Bad Request", [("Content-Type", "text/plain; charset=utf-8")], body.encode()
        families = [r for r in (_restricted(f, set(wanted[:MAX_NAMES])) for f in families) if r is not None]
    encoder, content_type = choose_encoder(accept or "")
    output = encoder(_Families(families))
    headers = [("Content-Type", content_type)]
    if gzip_accepted(accept_encoding or ""):
        import gzip

        output = gzip.compress(output)
        headers.append(("Content-Encoding", "gzip"))
    return "200 OK", headers, output


def wsgi_app(collector: Any) -> Callable[..., list[bytes]]:
    """The WSGI application of a metrics server: GET (any path) is a scrape, as prometheus_client's."""
    def app(environ: WSGIEnvironment, start_response: StartResponse) -> list[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        if method == "OPTIONS":
            status, headers, body = "200 OK", [("Allow", "OPTIONS,GET")], b""
        elif method != "GET":
            status, headers = "405 Method Not Allowed", [("Allow", "OPTIONS,GET")]
            body = b"# HTTP 405 Method Not Allowed: use OPTIONS or GET\n"
        elif environ.get("PATH_INFO") == "/favicon.ico":
            status, headers, body = "200 OK", [], b""
        else:
            status, headers, body = scrape(collector, environ.get("QUERY_STRING", ""),
                                           environ.get("HTTP_ACCEPT"), environ.get("HTTP_ACCEPT_ENCODING"))
        start_response(status, headers)
        return [body]

    return app


def start(collector: Any, host: str, port: int) -> Any:
    """Serve ``collector`` on ``host`` (an IP address or localhost, checked) and ``port`` from a
    daemon thread, one thread per request; the server is returned (``shutdown()`` stops it).
    OSError when the address cannot be bound."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client.exposition import ThreadingWSGIServer

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Log no request."""

    family, _, _, _, where = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]

    class Server(ThreadingWSGIServer):
        address_family = family

    server = make_server(str(where[0]), port, wsgi_app(collector), Server, handler_class=Quiet)
    threading.Thread(target=server.serve_forever, name="parinfo-metrics-server", daemon=True).start()
    return server
