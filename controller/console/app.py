"""The read-only web console: one page that shows the whole cluster, refreshed every second.

Served by every controller on `consolePort` (controller/main.py), or on its own by
`rocketha-console --controller 'H:P;H:P' --port P`. Both gather the same way, over the public
client endpoints only (so a standalone console needs nothing but addresses):

    controller_status  on every listed controller: role, term, leader, commit index, and the
                       master elections it applied (recent_elections)
    cluster_list       on the leader (NOT_LEADER redirects followed): replica sets, masters,
                       SyncStateSets, epochs, alive brokers
    broker_info        on every alive broker: role, epoch, max/confirm positions, tier
    list_topics, queue_offsets, consumer_groups   on each set's master: topics with their
                       queues and message counts, groups with committed offsets and lag

Routes: `/` (the page), `/console.js`, `/console.css`, `/api/cluster` (the JSON the page draws;
gathered at most once per REFRESH_MS whatever the number of viewers), `/healthz`. No build
step and nothing fetched from the internet: the page is three strings in
controller/console/page.py, drawn with DOM calls (text only, never HTML from the data).

Authentication: `ConsoleServer(authorize=...)` gets the request headers and returns True to
serve, False to answer 401 with a Basic challenge (so a browser asks for credentials). With
authenticationEnabled the controller passes `basic_authorizer` (a Super user's accessKey and
secretKey as the Basic user and password: send them over TLS only) and `credentials` (its
initAuthenticationUser) to sign the console's own Flight calls.
"""

from __future__ import annotations

import base64
import dataclasses
import hmac
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pyarrow import flight

from conf.process import refuse
from conf.signing import Credentials, action_target, sign_headers
from conf.tls import NO_TLS, ClientTLS, connect_flight
from controller.admin.main import call_leader, client_config
from controller.console.cli import PROGRAM, build_parser
from controller.console.page import CONSOLE_CSS, CONSOLE_HTML, CONSOLE_JS

__all__ = ["REFRESH_MS", "ConsoleServer", "basic_authorizer", "gather", "main"]

logger = logging.getLogger(__name__)


REFRESH_MS = 1000  # the page polls this often; gathering is cached for as long
CALL_TIMEOUT_S = 2.0  # one Flight call to a controller or broker
REQUESTS_INFLIGHT_MAX = 32  # HTTP requests served at once (then 503)
CLIENT_IDLE_TIMEOUT_S = 10.0  # per socket operation of one HTTP connection
TOPICS_SHOWN_MAX = 1000
GROUPS_SHOWN_MAX = 1000

Authorize = Callable[[Mapping[str, str]], bool]


@dataclasses.dataclass(frozen=True, slots=True)
class _Link:
    """How the console reaches controllers and brokers: TLS, and the keys that sign."""

    tls: ClientTLS = NO_TLS
    credentials: Credentials | None = None


def _action(endpoint: str, name: str, body: dict[str, Any] | None = None,
            timeout_s: float = CALL_TIMEOUT_S, *, link: _Link) -> dict[str, Any]:
    client = connect_flight(endpoint, link.tls)
    try:
        payload = json.dumps(body or {}).encode()
        headers = [] if link.credentials is None else sign_headers(
            link.credentials, "DO_ACTION", action_target(name, payload),
            int(time.time() * 1000))
        options = flight.FlightCallOptions(timeout=timeout_s, headers=headers)
        results = list(client.do_action(flight.Action(name, payload), options))
        return json.loads(results[0].body.to_pybytes())  # type: ignore[no-any-return]
    finally:
        client.close()


def basic_authorizer(super_secret_of: Callable[[str], str | None]) -> Authorize:
    """HTTP Basic with a Super user's accessKey (user) and secretKey (password);
    `super_secret_of(access_key)` is that enabled Super user's secret, else None."""

    def authorize(headers: Mapping[str, str]) -> bool:
        value = headers.get("Authorization") or headers.get("authorization") or ""
        scheme, _, encoded = value.partition(" ")
        if scheme.lower() != "basic" or len(encoded) > 1024:
            return False
        try:
            user, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        secret = super_secret_of(user) if sep else None
        return secret is not None and hmac.compare_digest(secret.encode(), password.encode())

    return authorize


def gather(addresses: list[str], tls: ClientTLS = NO_TLS,
           credentials: Credentials | None = None) -> dict[str, Any]:
    """The console's view of the cluster (JSON-able); unreachable parts are listed in `errors`.
    Its calls use `tls` and are signed with `credentials` (authentication on)."""
    errors: list[str] = []
    link = _Link(tls, credentials)
    controllers, elections = _controllers(addresses, errors, link)
    leader = next((c for c in controllers if c.get("role") == "leader"), None)
    view: dict[str, Any] = {
        "generated_at_ms": int(time.time() * 1000), "controllers": controllers,
        "leader": None if leader is None else {"node_id": leader["node_id"],
                                               "address": leader["address"]},
        "replica_sets": [], "topics": [], "groups": [], "elections": elections,
        "errors": errors,
    }
    try:
        cluster = call_leader(addresses, "cluster_list", {}, CALL_TIMEOUT_S * 2, tls,
                              credentials)
    except (ConnectionError, flight.FlightError) as err:
        errors.append(f"cluster_list: {err}")
        return view
    for status in cluster.get("replica_sets", []):
        replica_set, master_endpoint = _replica_set(status, errors, link)
        view["replica_sets"].append(replica_set)
        if master_endpoint is not None:
            view["topics"] += _topics(replica_set["name"], master_endpoint, errors, link)
            view["groups"] += _groups(replica_set["name"], master_endpoint, errors, link)
    view["topics"] = view["topics"][:TOPICS_SHOWN_MAX]
    view["groups"] = view["groups"][:GROUPS_SHOWN_MAX]
    return view


def _controllers(addresses: list[str], errors: list[str], link: _Link
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    controllers, elections = [], {}
    for address in addresses:
        try:
            status = _action(address, "controller_status", link=link)
        except flight.FlightError as err:
            errors.append(f"controller {address}: {err}")
            controllers.append({"address": address, "reachable": False})
            continue
        for record in status.pop("recent_elections", []):
            elections[(record["broker_name"], record["master_epoch"])] = record
        controllers.append({"address": address, "reachable": True, **status})
    ordered = sorted(elections.values(), key=lambda r: (r["applied_at_ms"], r["master_epoch"]),
                     reverse=True)
    return controllers, ordered


def _replica_set(status: dict[str, Any], errors: list[str], link: _Link
                 ) -> tuple[dict[str, Any], str | None]:
    replica = status["replica"]
    alive = set(status.get("alive_broker_ids", []))
    brokers, master_info = [], None
    for member in replica["brokers"]:
        broker_id, address = member["broker_id"], member["broker_address"]
        entry: dict[str, Any] = {"broker_id": broker_id, "address": address,
                                 "alive": broker_id in alive,
                                 "in_sync_state_set": broker_id in replica["sync_state_set"],
                                 "is_master": broker_id == replica["master_broker_id"]}
        if broker_id in alive:
            try:
                info = _action(address, "broker_info", link=link)
            except flight.FlightError as err:
                errors.append(f"broker {address}: {err}")
                info = None
            if info is not None:
                entry.update({key: info.get(key) for key in (
                    "role", "master_epoch", "max_log_position", "confirm_log_position",
                    "min_log_position", "flushed_log_position")})
                if entry["is_master"]:
                    master_info = info
        brokers.append(entry)
    master_max = (master_info or {}).get("max_log_position")
    for entry in brokers:
        if master_max is not None and entry.get("max_log_position") is not None:
            entry["lag_bytes"] = max(0, master_max - entry["max_log_position"])
    tier = (master_info or {}).get("tiered") or {"enabled": False}
    replica_set = {
        "name": replica["broker_name"], "cluster": replica["cluster_name"],
        "master_broker_id": replica["master_broker_id"],
        "master_address": replica["master_address"], "master_epoch": replica["master_epoch"],
        "sync_state_set": replica["sync_state_set"],
        "sync_state_set_epoch": replica["sync_state_set_epoch"], "brokers": brokers,
        "tier": _tier_summary(tier),
    }
    master_endpoint = replica["master_address"] if master_info is not None else None
    return replica_set, master_endpoint


def _tier_summary(tier: dict[str, Any]) -> dict[str, Any]:
    if not tier.get("enabled"):
        return {"enabled": False}
    upload = tier.get("upload") or {}
    return {"enabled": True, "url": tier.get("url"), "state": upload.get("state"),
            "pending_segments": upload.get("pending_segments"),
            "uploaded_segments": upload.get("uploaded_segments"),
            "uploaded_bytes": upload.get("uploaded_bytes"),
            "upload_failures": upload.get("upload_failures"),
            "last_error": (tier.get("last_error") or {}).get("message")}


def _topics(replica_set: str, master: str, errors: list[str], link: _Link
            ) -> list[dict[str, Any]]:
    try:
        topics = _action(master, "list_topics", link=link)["topics"]
    except (flight.FlightError, KeyError) as err:
        errors.append(f"list_topics on {master}: {err}")
        return []
    shown = []
    for topic in topics[:TOPICS_SHOWN_MAX]:
        try:
            queues = _action(master, "queue_offsets", {"topic": topic["name"]},
                             link=link)["queues"]
        except (flight.FlightError, KeyError):
            queues = []  # a write-only topic (perm), or deleted meanwhile
        shown.append({"name": topic["name"], "replica_set": replica_set,
                      "read_queue_nums": topic["read_queue_nums"],
                      "write_queue_nums": topic["write_queue_nums"], "perm": topic["perm"],
                      "queues": queues,
                      "messages": sum(q["max_queue_offset"] - q["min_queue_offset"]
                                      for q in queues)})
    return shown


def _groups(replica_set: str, master: str, errors: list[str], link: _Link
            ) -> list[dict[str, Any]]:
    try:
        groups = _action(master, "consumer_groups", link=link)["groups"]
    except (flight.FlightError, KeyError) as err:
        errors.append(f"consumer_groups on {master}: {err}")
        return []
    shown = []
    for group, topics in sorted(groups.items()):
        for topic, queues in sorted(topics.items()):
            rows = [{"queue_id": int(queue_id), "committed": q["committed"],
                     "max_queue_offset": q["max_queue_offset"],
                     "lag": max(0, q["max_queue_offset"] - q["committed"])}
                    for queue_id, q in sorted(queues.items(), key=lambda kv: int(kv[0]))]
            shown.append({"group": group, "topic": topic, "replica_set": replica_set,
                          "queues": rows, "lag": sum(row["lag"] for row in rows)})
    return shown


class _Cache:
    """One gathering at a time, reused for REFRESH_MS (many viewers cost one gathering)."""

    def __init__(self, addresses: list[str], tls: ClientTLS,
                 credentials: Credentials | None) -> None:
        self._addresses = addresses
        self._tls = tls
        self._credentials = credentials
        self._lock = threading.Lock()
        self._view: bytes = b""
        self._at = 0.0

    def get(self) -> bytes:
        with self._lock:
            if not self._view or time.monotonic() - self._at >= REFRESH_MS / 1000:
                self._view = json.dumps(gather(self._addresses, self._tls,
                                                    self._credentials)).encode()
                self._at = time.monotonic()
            return self._view


class ConsoleServer:
    """The console's HTTP server on a daemon thread; `close()` stops it."""

    def __init__(self, addresses: list[str], host: str, port: int, *,
                 authorize: Authorize | None = None, tls: ClientTLS = NO_TLS,
                 credentials: Credentials | None = None) -> None:
        cache = _Cache(addresses, tls, credentials)
        slots = threading.BoundedSemaphore(REQUESTS_INFLIGHT_MAX)
        handler = type("Handler", (_Handler,), {"cache": cache, "slots": slots,
                                                "authorize": staticmethod(authorize)
                                                if authorize else None})
        self._server = ThreadingHTTPServer((host, port), handler)  # OSError: port in use
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="console",
                                        daemon=True)
        self._thread.start()
        logger.info("console on http://%s:%d/", host, self.port)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


_STATIC = {
    "/": ("text/html; charset=utf-8", CONSOLE_HTML.encode()),
    "/index.html": ("text/html; charset=utf-8", CONSOLE_HTML.encode()),
    "/console.js": ("text/javascript; charset=utf-8", CONSOLE_JS.encode()),
    "/console.css": ("text/css; charset=utf-8", CONSOLE_CSS.encode()),
}


class _Handler(BaseHTTPRequestHandler):
    cache: _Cache
    slots: threading.BoundedSemaphore
    authorize: Authorize | None
    server_version = "rocketha-console"
    timeout = CLIENT_IDLE_TIMEOUT_S  # a silent or slow client loses its connection (thread)

    def do_GET(self) -> None:
        if not self.slots.acquire(blocking=False):
            self._send(503, "text/plain", b"busy\n")
            return
        try:
            self._serve()
        finally:
            self.slots.release()

    def _serve(self) -> None:
        if self.authorize is not None and not self.authorize(dict(self.headers.items())):
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="rocketha console"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path = self.path.split("?", 1)[0]
        if path == "/api/cluster":
            self._send(200, "application/json", self.cache.get())
        elif path == "/healthz":
            self._send(200, "text/plain", b"ok\n")
        elif path in _STATIC:
            self._send(200, *_STATIC[path])
        else:
            self._send(404, "text/plain", b"not found\n")

    def _send(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", "default-src 'self'")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        if logger.isEnabledFor(logging.DEBUG):  # http.server's own %-format, then ours
            logger.debug("console %s %s", self.address_string(), format % args)


def main(argv: list[str] | None = None) -> int:
    """`rocketha-console --controller 'H:P;H:P' [--host H] --port P`: serve until Ctrl-C."""
    parser = build_parser()  # controller/console/cli.py: argparse only, so --help is instant
    args = parser.parse_args(argv)
    addresses = [a.strip() for a in args.controller.replace(",", ";").split(";") if a.strip()]
    if not addresses:
        parser.error("--controller names no address")
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        tls, credentials = (client_config(args.client_config) if args.client_config
                            else (NO_TLS, None))
    except (OSError, ValueError) as err:
        return refuse(PROGRAM, str(err))
    authorize = None
    if credentials is not None:  # it signs as this user: show the cluster to that user only
        authorize = basic_authorizer(lambda key: credentials.secret_key
                                     if key == credentials.access_key else None)
    try:
        server = ConsoleServer(addresses, args.host, args.port, authorize=authorize, tls=tls,
                               credentials=credentials)
    except OSError as err:
        return refuse(PROGRAM, f"cannot listen on {args.host}:{args.port}: {err}")
    try:
        threading.Event().wait()  # until Ctrl-C / SIGTERM
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
