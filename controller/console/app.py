"""The read-only web console: one page that shows the whole cluster, refreshed every second.

Served by every controller on `consolePort` (controller/main.py), or on its own by
`rocketha-console --controller 'H:P;H:P' --port P`. Both gather the same way, over the public
client endpoints only (so a standalone console needs nothing but addresses):

    controller_status  on every listed controller: role, term, leader, commit index, and the
                       master elections it applied (recent_elections)
    cluster_list       on the leader (NOT_LEADER redirects followed): replica sets, masters,
                       SyncStateSets, epochs, alive brokers
    broker_info        on every alive broker: role, epoch, max/confirm positions, tier; the
                       master's topic tables: lag, last commit, last error (tables.py)
    list_topics, queue_offsets, consumer_groups   on each set's master: topics with their
                       queues and message counts, groups with committed offsets and lag

Routes (controller/console/handler.py): `/` (the page), `/console.js`, `/console.css`,
`/api/cluster` (the JSON the page draws; gathered at most once per REFRESH_MS per viewer
whatever the number of tabs), `/healthz`, and the login pages. No build step and nothing
fetched from the internet: the page is strings in controller/console/page.py, drawn with DOM
calls (text only, never HTML from the data).

Who sees it: on a cluster with authentication, viewers log in with their own keys (a login
form, then a session cookie: controller/console/sessions.py) and the console signs the calls
it makes for a viewer with that viewer's keys, so ACL 2.0 decides what each viewer sees. A
Super user's keys are refused at the login (controller/console/login.py): the console never
needs them. On a secured cluster the console speaks HTTPS (the member's certificate or its
own); plain HTTP there only when asked (consolePlaintext=true, --plaintext-http).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import ssl
import sys
import threading
import time
from typing import Any

from pyarrow import flight

from conf.https import ContextSource, HTTPServer, browser_ssl_context
from conf.process import refuse
from conf.protocol import VERSION_HEADER
from conf.signing import Credentials, action_target, sign_headers
from conf.tls import NO_TLS, ClientTLS, TLSSettings, connect_flight, server_ssl_context
from controller.admin.main import call_leader, client_config
from controller.console.cli import PROGRAM, SESSION_S_DEFAULT, build_parser
from controller.console.handler import REQUESTS_INFLIGHT_MAX, ConsoleHandler, ViewSource
from controller.console.login import LoginCheck, flight_login_check
from controller.console.sessions import SESSIONS_MAX, LoginThrottle, SessionTable
from controller.console.tables import table_rows

__all__ = ["REFRESH_MS", "SESSION_S_DEFAULT", "ConsoleServer", "console_ssl_context", "gather",
           "main"]

logger = logging.getLogger(__name__)


REFRESH_MS = 1000  # the page polls this often; gathering is cached for as long
CALL_TIMEOUT_S = 2.0  # one Flight call to a controller or broker
TOPICS_SHOWN_MAX = 1000
GROUPS_SHOWN_MAX = 1000

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
        options = flight.FlightCallOptions(timeout=timeout_s, headers=[VERSION_HEADER, *headers])
        results = list(client.do_action(flight.Action(name, payload), options))
        return json.loads(results[0].body.to_pybytes())  # type: ignore[no-any-return]
    finally:
        client.close()


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
        "replica_sets": [], "topics": [], "groups": [], "tables": [], "elections": elections,
        "errors": errors,
    }
    try:
        cluster = call_leader(addresses, "cluster_list", {}, CALL_TIMEOUT_S * 2, tls,
                              credentials)
    except (ConnectionError, flight.FlightError) as err:
        errors.append(f"cluster_list: {err}")
        return view
    for status in cluster.get("replica_sets", []):
        replica_set, master_endpoint, master_info = _replica_set(status, errors, link)
        view["replica_sets"].append(replica_set)
        view["tables"] += table_rows(replica_set["name"], master_info)
        if master_endpoint is not None:
            view["topics"] += _topics(replica_set["name"], master_endpoint, errors, link)
            view["groups"] += _groups(replica_set["name"], master_endpoint, errors, link)
    view["topics"] = view["topics"][:TOPICS_SHOWN_MAX]
    view["groups"] = view["groups"][:GROUPS_SHOWN_MAX]
    view["tables"] = view["tables"][:TOPICS_SHOWN_MAX]
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
                 ) -> tuple[dict[str, Any], str | None, dict[str, Any] | None]:
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
    return replica_set, master_endpoint, master_info


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


class _Cache(ViewSource):
    """One gathering at a time, reused for REFRESH_MS per viewer (many tabs of one viewer cost
    one gathering; each viewer's calls are signed with its keys, so each sees its own view)."""

    def __init__(self, addresses: list[str], tls: ClientTLS, views_max: int) -> None:
        self._addresses = addresses
        self._tls = tls
        self._views_max = views_max
        self._lock = threading.Lock()
        self._views: dict[str, tuple[float, bytes]] = {}  # access key ("" unsigned) -> view

    def get(self, credentials: Credentials | None) -> bytes:
        key = "" if credentials is None else credentials.access_key
        with self._lock:
            at, view = self._views.get(key, (0.0, b""))
            if not view or time.monotonic() - at >= REFRESH_MS / 1000:
                view = json.dumps(gather(self._addresses, self._tls, credentials)).encode()
                if len(self._views) >= self._views_max:
                    self._views.pop(min(self._views, key=lambda k: self._views[k][0]))
                self._views[key] = (time.monotonic(), view)
            return view


class ConsoleServer:
    """The console's HTTP(S) server on a daemon thread; `close()` stops it.

    `login`: how viewers' keys are checked (controller/console/login.py); None serves
    everyone and signs nothing (a cluster without authentication). `ssl_context`: HTTPS
    (conf.https.browser_ssl_context), else plain HTTP. `session_s`: how long a login lasts."""

    def __init__(self, addresses: list[str], host: str, port: int, *,
                 login: LoginCheck | None = None, tls: ClientTLS = NO_TLS,
                 ssl_context: ssl.SSLContext | ContextSource | None = None,
                 session_s: float = SESSION_S_DEFAULT) -> None:
        handler = type("Handler", (ConsoleHandler,), {
            "views": _Cache(addresses, tls, SESSIONS_MAX),
            "slots": threading.BoundedSemaphore(REQUESTS_INFLIGHT_MAX),
            "login": staticmethod(login) if login else None,
            "sessions": SessionTable(session_s), "throttle": LoginThrottle(),
            "sessions_lock": threading.Lock(),
            "scheme": "http" if ssl_context is None else "https"})
        self._server = HTTPServer((host, port), handler, ssl_context)  # OSError: port in use
        self._thread = threading.Thread(target=self._server.serve_forever, name="console",
                                        daemon=True)
        self._thread.start()
        logger.info("console on %s (%s)", self.url,
                    "viewers log in" if login else "no login: anyone who reaches it")

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"{self._server.scheme}://{self._server.host}:{self.port}/"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def console_ssl_context(cert_path: str, key_path: str, trust_cert_path: str = ""
                        ) -> ssl.SSLContext:
    """HTTPS for browsers with this certificate and key (a member's or the console's own), via
    conf.tls's server context (its checks and TLS 1.2 floor), asking browsers for no client
    certificate. Raises TLSConfigError naming the key, or OSError / ssl.SSLError."""
    settings = TLSSettings(server_mode="enforcing", server_cert_path=cert_path,
                           server_key_path=key_path,
                           server_trust_cert_path=trust_cert_path or cert_path)
    return browser_ssl_context(server_ssl_context(settings))


def main(argv: list[str] | None = None) -> int:
    """`rocketha-console --controller 'H:P;H:P' [--host H] --port P`: serve until Ctrl-C.

    With a secured cluster's --client-config (TLS or keys), viewers log in with their own keys
    (never a Super user's) and the console serves HTTPS with --cert-file/--key-file, or plain
    HTTP only with --plaintext-http."""
    parser = build_parser()  # controller/console/cli.py: argparse only, so --help is instant
    args = parser.parse_args(argv)
    addresses = [a.strip() for a in args.controller.replace(",", ";").split(";") if a.strip()]
    if not addresses:
        parser.error("--controller names no address")
    if bool(args.cert_file) != bool(args.key_file):
        parser.error("--cert-file and --key-file go together")
    if not 60 <= args.session_seconds <= 7 * 86400:
        parser.error("--session-seconds must be within [60, 604800]")
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        tls, keys = (client_config(args.client_config) if args.client_config
                     else (NO_TLS, None))
    except (OSError, ValueError) as err:
        return refuse(PROGRAM, str(err))
    secured = tls.enabled or keys is not None
    if secured and not args.cert_file and not args.plaintext_http:
        return refuse(PROGRAM, "a secured cluster's console serves HTTPS: give --cert-file and "
                      "--key-file (or --plaintext-http to serve plain HTTP on purpose)")
    try:
        context = (console_ssl_context(args.cert_file, args.key_file, tls.trust_cert_path)
                   if args.cert_file and not args.plaintext_http else None)
    except (OSError, ValueError, ssl.SSLError) as err:
        return refuse(PROGRAM, f"--cert-file/--key-file: {err}")
    login = flight_login_check(addresses, tls) if secured else None
    try:
        server = ConsoleServer(addresses, args.host, args.port, login=login, tls=tls,
                               ssl_context=context, session_s=args.session_seconds)
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
