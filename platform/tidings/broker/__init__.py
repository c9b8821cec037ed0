"""A local single-node Apache Kafka for development and tests, provisioned from Maven Central.

``LocalBroker(data_dir).start()`` resolves the Kafka jars once into ``$TIDINGS_HOME`` (default
``~/.cache/tidings``), formats a KRaft log dir, starts a combined broker+controller JVM on
127.0.0.1 and returns its bootstrap address. Needs ``java`` (17+) and ``mvn`` on PATH.
``LocalCluster(data_dir).start()`` does the same for three nodes (each a JVM of its own, a
broker and a KRaft quorum voter) that a test can kill and restart (docs/cluster-local.md).
``LocalBroker(data_dir, secure=True)`` starts a secured node (SASL_SSL, mutual TLS, SCRAM
users, StandardAuthorizer; ``_security.py``); ``client_settings(user, method)`` names the
client properties file of each user.
"""

from tidings.broker._cluster import LocalCluster as LocalCluster
from tidings.broker._cluster import NodeStatus as NodeStatus
from tidings.broker._cluster_config import render_cluster_properties as render_cluster_properties
from tidings.broker._cluster_state import ClusterState as ClusterState
from tidings.broker._cluster_state import NodeState as NodeState
from tidings.broker._config import render_log4j2_yaml as render_log4j2_yaml
from tidings.broker._config import render_server_properties as render_server_properties
from tidings.broker._local import BrokerStatus as BrokerStatus
from tidings.broker._local import LocalBroker as LocalBroker
from tidings.broker._provisioning import KAFKA_VERSION as KAFKA_VERSION
from tidings.broker._security import METHODS as METHODS
from tidings.broker._security import PRINCIPALS as PRINCIPALS
from tidings.broker._security import ClientSettings as ClientSettings
from tidings.broker._security import Method as Method
from tidings.broker._provisioning import cache_home as cache_home
from tidings.broker._provisioning import kafka_libs_dir as kafka_libs_dir
from tidings.broker._provisioning import provision_kafka as provision_kafka
from tidings.broker._quorum import QuorumState as QuorumState
from tidings.broker._state import BrokerState as BrokerState
from tidings.broker._state import default_state_file as default_state_file

__all__ = [
    "KAFKA_VERSION",
    "BrokerState",
    "BrokerStatus",
    "ClusterState",
    "ClientSettings",
    "METHODS",
    "Method",
    "PRINCIPALS",
    "LocalBroker",
    "LocalCluster",
    "NodeState",
    "NodeStatus",
    "QuorumState",
    "cache_home",
    "default_state_file",
    "kafka_libs_dir",
    "provision_kafka",
    "render_cluster_properties",
    "render_log4j2_yaml",
    "render_server_properties",
]
