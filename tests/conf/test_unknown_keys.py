"""Every place that refuses an unknown key says which known key was probably meant.

Method: one misspelt key per reader (broker, controller, proxy confs; Spark source and sink
options), checked for the "did you mean" conf/keys.py adds and for the error class the
package's callers have always caught."""

from __future__ import annotations

import pytest

from connector.errors import OptionError
from connector.rmq_proxy import ProxyConfig, ProxyConfigError
from connector.spark.options import parse_sink_options, parse_source_options
from controller.config import ControllerConfig
from controller.errors import ConfigError as ControllerConfigError
from ha.broker.config import BrokerConfig
from storage_engine import ConfigError as BrokerConfigError


def test_broker_conf() -> None:
    with pytest.raises(BrokerConfigError, match="did you mean 'listenPort'"):
        BrokerConfig.from_properties({"listenPrt": "1"})
    with pytest.raises(BrokerConfigError, match="did you mean 'mappedFileSizeCommitLog'"):
        BrokerConfig.from_properties({"mappedfilesizecommitlog": "1"})  # a store key


def test_controller_conf() -> None:
    with pytest.raises(ControllerConfigError, match="did you mean 'raftTickIntervalMs'"):
        ControllerConfig.from_properties({"raftTickIntervalMS": "50"})
    with pytest.raises(ControllerConfigError, match=r"did you mean 'tls\.server\.mode'"):
        ControllerConfig.from_properties({"tls.server.mod": "enforcing"})


def test_proxy_conf() -> None:
    with pytest.raises(ProxyConfigError, match="did you mean 'grpcListenPort'"):
        ProxyConfig.from_properties({"grpcListenPrt": "1", "controllerAddr": "h:1"})


def test_spark_options() -> None:
    with pytest.raises(OptionError, match="unknown option 'subscibe'; did you mean 'subscribe'"):
        parse_source_options({"brokers": "h:1", "subscibe": "t"})
    # Spark hands the keys over lower-cased: the suggestion is the canonical spelling
    with pytest.raises(OptionError, match="did you mean 'writeBatchRows'"):
        parse_sink_options({"brokers": "h:1", "topic": "t", "writebatchrow": "5"})
