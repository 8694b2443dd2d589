"""The broker process: a MessageStore behind an Arrow Flight endpoint (composition root)."""

from __future__ import annotations

from ha.broker.config import BROKER_KEYS, LIVE_KEYS, BrokerConfig, parse_properties
from ha.broker.service import BrokerService

__all__ = ["BROKER_KEYS", "LIVE_KEYS", "BrokerConfig", "BrokerService", "parse_properties"]
