"""The tidings benchmark harness: ``python -m bench`` (``make bench``).

Speed is measured here, never asserted in tests (SPEC §10). Every run measures the
machine's own raw Kafka throughput on the same broker as the reference, then the
tidings workloads, and prints one table: workload | measured | target | raw Kafka.

Modules, one per thing measured:

- ``raw_kafka``: confluent-kafka (and aiokafka) produce -> consume on a fresh topic;
- ``aggregates``: aggregate commands end to end through one ``tidings worker`` process;
- ``apps``: the App the bench worker runs (the bank example's account aggregate);
- ``faust_stream``: a Faust agent doing nothing, the delivery ceiling the worker sits on;
- ``workflows``: one-activity and ten-step workflows, the flow stage topic to topic, idle
  latency and recovery after SIGKILL through one worker; replay and idle-instance memory in
  process;
- ``workflow_apps``: the App the workflow bench worker runs;
- ``report``: progress lines, the machine description and the table.
"""
