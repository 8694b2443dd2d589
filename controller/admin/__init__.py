"""`rocketha-admin --controller ...`: the controller's operator tool (status, elect, users,
ACLs)."""

__all__: list[str] = []
