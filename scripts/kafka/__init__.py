"""The project's own Apache Kafka (KRaft, no ZooKeeper, no Docker) for development and tests.

``scripts/kafka.sh`` runs this package (``python3 scripts/kafka``): standard library only, since
it runs before the project's venv exists. One job a module:

- :mod:`.env`: the ``SYMFONIC_KAFKA_*`` settings, checked once;
- :mod:`.jars`: the Kafka versions and their jars, resolved once with Maven into a cache;
- :mod:`.tools`: Java, Maven, openssl and keytool, found or refused with a clear error;
- :mod:`.properties`: each node's generated ``server.properties`` and logging configuration;
- :mod:`.node`: one node's JVM: launched, waited for, signalled, its storage and state directory;
- :mod:`.certs`: the secure listeners' CA, certificates, SCRAM user and env files;
- :mod:`.single`, :mod:`.cluster`, :mod:`.auth`: the single broker, the 3-node cluster and
  the authorizer broker, each with its commands;
- :mod:`.cli`: the commands and the usage text;
- :mod:`.probe`, :mod:`.ports`: the readiness probe and the listener ports (also runnable alone).

docs/dev-broker.md says what the broker is and does; docs/security.md the authorizer broker.
"""
