"""The commands of ``scripts/kafka.sh`` and its usage text.

    scripts/kafka.sh start [--fresh] | stop | status | logs [-f] | reset | fetch
    scripts/kafka.sh secure-env sasl_ssl|mtls
    scripts/kafka.sh cluster-start [--fresh] | cluster-stop | cluster-status | cluster-reset
    scripts/kafka.sh kill-node N | stop-node N | start-node N | logs N [-f]
    scripts/kafka.sh auth-start [--fresh] | auth-stop | auth-status | auth-env USER
"""

from __future__ import annotations

import sys

from scripts.kafka import auth, cluster, env, jars, node, single
from scripts.kafka.auth import REVIEWER_TENANTS
from scripts.kafka.env import AUTH_ADMIN, Env
from scripts.kafka.messages import NAME, Failed, die, say


def usage(settings: Env) -> str:
    s = settings
    base = s.cluster_base_port
    users = (" ".join(s.auth_users) if s.auth_users is not None else
             "one per consumer and reader of the declarations (User:symfonic-<name>) and "
             + ", ".join(f"reviewer-{tenant}" for tenant in REVIEWER_TENANTS))
    return f"""\
usage: scripts/kafka.sh COMMAND

single broker (combined broker+controller), on {s.host}:
  PLAINTEXT {s.port}, controller {s.controller_port}, SASL_SSL/SCRAM-SHA-512 {s.sasl_ssl_port}, \
SSL/mutual TLS {s.mtls_port}
  start [--fresh]  resolve Kafka if needed, make certificates and the SCRAM user once, format
                   storage once, start, wait until it serves (reuses a broker that already
                   answers on the port); --fresh: a broker this command launches starts from
                   empty storage (make test uses it)
  stop             SIGTERM, wait up to {s.stop_timeout}s, then SIGKILL
  status           exit 0 when a broker answers metadata requests, 1 when none runs
  logs [-f]        the broker log (last 200 lines, or follow)
  secure-env sasl_ssl|mtls
                   print the path of the env file (SYMFONIC_* variables) for that listener
                   of the running broker; exit 1 when it has none
  reset            delete this version's single-broker state (it must be stopped)
  fetch            only resolve the Kafka jars into the cache (no broker)

three nodes on one host (brokers {base}/{base + 2}/{base + 4}, controllers +1), PLAINTEXT:
  cluster-start [--fresh] | cluster-stop | cluster-status
  kill-node N      SIGKILL node N (1..3)
  stop-node N      SIGTERM node N (controlled shutdown) and wait until it is gone
  start-node N     start node N again; wait until it is back in the cluster and in the ISR
                   of every partition it replicates
  logs N [-f]      node N's log
  cluster-reset    delete this version's three nodes' data (they must be stopped)

the authorizer broker (ACLs enforced: StandardAuthorizer, \
allow.everyone.if.no.acl.found=false), on {s.host}:
  SASL_PLAINTEXT/SCRAM-SHA-512 {s.auth_port} (clients), controller {s.auth_controller_port} \
(mutual TLS),
  PLAINTEXT {s.auth_probe_port} (the readiness probe only: anonymous, no rights)
  auth-start [--fresh]  as start, with SCRAM users {AUTH_ADMIN} (super user) and: {users}
  auth-stop | auth-status
  auth-env USER    print the path of USER's env file (SYMFONIC_* variables); exit 1 when none

environment: SYMFONIC_KAFKA_VERSION (default 4.1.1; 4.x or 3.9.x), SYMFONIC_KAFKA_HOME (the
jar cache of that one version), SYMFONIC_KAFKA_STATE, SYMFONIC_KAFKA_PORT,
SYMFONIC_KAFKA_CONTROLLER_PORT, SYMFONIC_KAFKA_SASL_SSL_PORT, SYMFONIC_KAFKA_MTLS_PORT,
SYMFONIC_KAFKA_SCRAM_USER, SYMFONIC_KAFKA_CLUSTER_BASE_PORT, SYMFONIC_KAFKA_HEAP_OPTS,
SYMFONIC_KAFKA_AUTH_PORT, SYMFONIC_KAFKA_AUTH_CONTROLLER_PORT, SYMFONIC_KAFKA_AUTH_PROBE_PORT,
SYMFONIC_KAFKA_AUTH_USERS,
SYMFONIC_KAFKA_EXTRA_CONFIG (opt-in server.properties lines beyond Kafka's defaults),
SYMFONIC_KAFKA_START_TIMEOUT (seconds without progress while starting),
SYMFONIC_KAFKA_START_LIMIT (seconds in all), SYMFONIC_KAFKA_STOP_TIMEOUT,
SYMFONIC_KAFKA_MAVEN_ARGS, SYMFONIC_KAFKA_STARTED_FLAG (a file written when start really
started a broker, for callers that must stop only what they started), SYMFONIC_KAFKA_PYTHON
(the python3.11+ that runs this script).
"""


def _fresh(command: str, args: list[str]) -> bool:
    option = args[0] if args else ""
    if option not in ("", "--fresh"):
        raise die(f"{command}: unknown option '{option}' (expected --fresh)")
    return option == "--fresh"


def _fetch(settings: Env) -> None:
    kafka = jars.ensure(settings)
    say(f"kafka.sh: Kafka {kafka.version} jars in {kafka.libs}")


def _logs(settings: Env, args: list[str]) -> None:
    if args and args[0] in ("1", "2", "3"):
        node.show_log(settings, cluster.running_dir(settings) / f"node{args[0]}",
                      args[1] if len(args) > 1 else "")
    else:
        node.show_log(settings, single.running_dir(settings), args[0] if args else "")


def run(settings: Env, command: str, args: list[str]) -> int:
    """Runs one command; its exit status."""
    first = args[0] if args else ""
    simple = {
        "stop": single.stop, "reset": single.reset, "fetch": _fetch,
        "cluster-stop": cluster.stop, "cluster-reset": cluster.reset, "auth-stop": auth.stop,
    }
    statuses = {"status": single.status, "cluster-status": cluster.status,
                "auth-status": auth.status}
    starts = {"start": single.start, "cluster-start": cluster.start, "auth-start": auth.start}
    nodes = {"kill-node": cluster.kill_node, "stop-node": cluster.stop_node,
             "start-node": cluster.start_node}
    if command in simple:
        simple[command](settings)
    elif command in statuses:
        return statuses[command](settings)
    elif command in starts:
        starts[command](settings, _fresh(command, args))
    elif command in nodes:
        nodes[command](settings, first)
    elif command == "secure-env":
        return single.secure_env(settings, first)
    elif command == "auth-env":
        return auth.user_env(settings, first)
    elif command == "logs":
        _logs(settings, args)
    elif command in ("-h", "--help", "help"):
        print(usage(settings), end="", file=sys.stderr)
    else:
        print(usage(settings), end="", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str]) -> int:
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    try:
        return run(env.load(), command, args)
    except Failed as failure:
        print(f"{NAME}: error: {failure}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
