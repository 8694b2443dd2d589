"""Reading a user's access key and secret key from a file (never from a command line).

The file: `accessKey=...` and `secretKey=...` lines (properties: conf/properties.py), readable by
its owner only (mode 0600 or stricter): a file others may read is refused, since a secret in
it is no secret. The same format as the brokers' innerClientCredentialsFile and the keys of
`<cluster dir>/client.properties`.
"""

from __future__ import annotations

import os
from pathlib import Path

from conf.properties import parse_properties
from conf.signing import Credentials

__all__ = ["read_credentials_file", "read_private_file"]


def read_private_file(path: str, what: str) -> str:
    """The text of a secrets file; ValueError when other users may read it."""
    mode = os.stat(path).st_mode
    if mode & 0o077:
        raise ValueError(f"{what} {path}: mode {oct(mode & 0o777)} lets other users read it "
                         "(chmod 600)")
    return Path(path).read_text(encoding="utf-8")


def read_credentials_file(path: str, what: str = "credentials file") -> Credentials:
    """The keys of a credentials file (or of a client.properties holding them).

    Args:
        path: the file; refused when other users may read it.
        what: how errors name it (an option or key, e.g. "--credentials-file").
    Raises:
        ValueError: naming `what` and the path (mode, syntax, a key missing); OSError.
    """
    values = parse_properties(read_private_file(path, what), f"{what} {path}")
    if not values.get("accessKey") or not values.get("secretKey"):
        raise ValueError(f"{what} {path}: needs accessKey= and secretKey= lines")
    return Credentials(values["accessKey"], values["secretKey"])
