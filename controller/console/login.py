"""Who may log in to the console: a viewer's keys, checked by the controllers, never a Super
user's.

The console signs every call it makes for a viewer with that viewer's keys, so ACL 2.0 decides
what the viewer sees (a topic without Get/Sub/Pub shows no queues, groups need Cluster Get or
List). A Super user's keys can delete every topic: a browser form is no place to type them, and
the console refuses them with one line. How a login is checked, the same for a controller's own
console and for `rocketha-console`: `user_list` on the leader, signed with the given keys.

    the leader answers UNAUTHENTICATED   unknown access key, wrong secret, disabled user
    it answers NO_PERMISSION             a valid user who is not Super: logged in
    it answers the list                  the keys may administer users: refused (a Super user;
                                         with authorizationEnabled=false any user may, and the
                                         list then says whether this one is Super)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from pyarrow import flight

from conf.signing import Credentials
from conf.tls import NO_TLS, ClientTLS
from controller.admin.main import call_leader

__all__ = ["LOGIN_TIMEOUT_S", "SUPER_REFUSED", "LoginCheck", "flight_login_check"]

LOGIN_TIMEOUT_S = 5.0  # checking one login with the controllers

SUPER_REFUSED = ("a Super user's keys are not accepted by the console: log in as a viewer "
                 "(a Normal user whose ACLs allow Get/Sub on what it should see)")
WRONG_KEYS = "unknown access key, wrong secret key, or a disabled user"

LoginCheck = Callable[[Credentials], str | None]  # the refusal's one line, None: logged in


@dataclasses.dataclass(frozen=True, slots=True)
class _FlightLoginCheck:
    addresses: tuple[str, ...]
    tls: ClientTLS

    def __call__(self, credentials: Credentials) -> str | None:
        try:
            reply = call_leader(list(self.addresses), "user_list", {}, LOGIN_TIMEOUT_S,
                                self.tls, credentials)
        except flight.FlightUnauthenticatedError:
            return WRONG_KEYS
        except flight.FlightUnauthorizedError:
            return None  # known, enabled, and not allowed to administer users: a viewer
        except flight.FlightServerError as err:
            return f"the controllers could not check the keys: {str(err).splitlines()[0]}"
        except (ConnectionError, flight.FlightError) as err:
            return f"the controllers could not check the keys: {err}"
        return SUPER_REFUSED if _is_super(reply, credentials.access_key) else None


def _is_super(reply: dict[str, Any], access_key: str) -> bool:
    users = reply.get("users")
    if not isinstance(users, list):
        return True  # it could administer users, and says nothing else: treat it as Super
    for user in users:
        if isinstance(user, dict) and user.get("access_key") == access_key:
            return user.get("type") != "Normal"
    return True  # not in the table: the bootstrap (initAuthenticationUser) Super user


def flight_login_check(addresses: list[str], tls: ClientTLS = NO_TLS) -> LoginCheck:
    """Logins checked by the controllers at `addresses` (see the module docstring)."""
    return _FlightLoginCheck(tuple(addresses), tls)
