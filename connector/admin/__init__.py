"""`rocketha-admin` for topics, groups and messages: argument parsing, targets, output."""

__all__: list[str] = []
