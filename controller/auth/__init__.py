"""Who may call the controller: its side of the shared auth gate (verify.py over
conf/auth_gate.py; the ACL model is conf/acl.py) and the member-call rule (member_check.py)."""

__all__: list[str] = []
