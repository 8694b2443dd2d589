"""Who may call the controller: signed-request verification, ACL 2.0 decisions, the
member-call rule. No imports here, so `controller.api` can re-export the ACL model cheaply."""

__all__: list[str] = []
