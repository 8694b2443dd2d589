"""The shared leaf every process imports: configuration, TLS settings, request signing,
credentials files. It imports nothing of ours; the example `*.conf` files beside it are data.

The configuration toolkit: one properties reader (conf/properties.py), one parser per value
type (conf/values.py), typed keys and the "did you mean" of unknown keys (conf/keys.py), and the
credentials-file reader (conf/credentials.py). The release and protocol version every link
states, and the one rule for which versions run together: conf/version.py, conf/protocol.py.
TLS (conf/tls.py, pulls in pyarrow.flight) and signing (conf/signing.py) are imported from
their modules.

So is what only servers use: the ACL model and the Flight auth gate (conf/acl.py,
conf/auth_gate.py), server start-up (conf/process.py) and `/metrics` serving
(conf/metrics_http.py). conf/metrics_http.py imports prometheus_client, a server-only
dependency: this file must never import it (nor a module that does), so a client-only install
can import conf.
"""

from conf.credentials import read_credentials_file, read_private_file
from conf.keys import Key, closest_key, unknown_key_message
from conf.properties import (
    PropertiesError,
    format_property,
    parse_properties,
    read_properties_file,
    set_property,
)
from conf.values import (
    BadValueError,
    parse_bool,
    parse_duration_ms,
    parse_host_port,
    parse_size_bytes,
)

__all__ = [
    "BadValueError",
    "Key",
    "PropertiesError",
    "closest_key",
    "format_property",
    "parse_bool",
    "parse_duration_ms",
    "parse_host_port",
    "parse_properties",
    "parse_size_bytes",
    "read_credentials_file",
    "read_private_file",
    "read_properties_file",
    "set_property",
    "unknown_key_message",
]
