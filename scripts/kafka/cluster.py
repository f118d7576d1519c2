"""Three combined broker+controller nodes on one host, PLAINTEXT only, with a production
cluster's replication settings (RF 3, min ISR 2): for replication, failover, rolling
restarts and ``min.insync.replicas`` behaviour.

Node N's broker listens on the base port + 2(N-1), its controller one above. State:
``<state root>/cluster-<base port>-<version>/node1..3``. The node commands act on the
cluster this script runs on the base port, whatever its version; ``start-node`` restarts a
node with the version its cluster was made with.
"""

from __future__ import annotations

import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

from scripts.kafka import jars, node, probe, properties, tools
from scripts.kafka.env import CLUSTER_SIZE, Env
from scripts.kafka.files import read, read_or_none
from scripts.kafka.messages import Clock, die, log, say
from scripts.kafka.single import extra_config_note

NODES = range(1, CLUSTER_SIZE + 1)


def dir_of(env: Env, version: str) -> Path:
    return env.state_root / f"cluster-{env.cluster_base_port}-{version}"


def node_port(env: Env, n: int) -> int:
    return env.cluster_base_port + 2 * (n - 1)


def bootstrap(env: Env) -> str:
    return ",".join(f"{env.host}:{node_port(env, n)}" for n in NODES)


def dirs_on_port(env: Env) -> Iterator[Path]:
    """Every cluster state directory of the base port, of this layout and the old one."""
    base = env.cluster_base_port
    yield from sorted(p for p in env.state_root.glob(f"cluster-{base}-*") if p.is_dir())
    legacy = [env.state_root / f"cluster-{base}"]
    if base == 19092:
        legacy.append(env.state_root / "cluster")
    yield from (p for p in legacy if p.is_dir())


def alive(cluster: Path) -> bool:
    """Whether one of its nodes runs."""
    return any(node.pid_of(cluster / f"node{n}") is not None for n in NODES)


def running_dir(env: Env) -> Path:
    """The cluster this script runs on the base port (any version), else the requested one's."""
    requested = dir_of(env, jars.offline_version(env))
    if alive(requested):
        return requested
    return next((d for d in dirs_on_port(env) if alive(d)), requested)


def _prepare(env: Env, kafka: jars.Kafka, cluster: Path, n: int) -> None:
    """Node n's configuration (every start) and storage (once)."""
    directory = cluster / f"node{n}"
    properties.write(env, kafka.version, directory, "cluster", n, node_port(env, n),
                     properties.cluster_controller_port(env, n))
    node.format_storage(kafka, directory, read(cluster / "cluster.id"))


def start(env: Env, fresh: bool) -> None:
    """Starts the nodes that do not run (from empty storage with ``fresh``), and waits until
    the three serve; reuses a cluster whose three nodes run."""
    node.lock_state(env)
    clock = Clock()
    cluster = dir_of(env, jars.offline_version(env))
    for other in dirs_on_port(env):
        if other != cluster and alive(other):
            raise die(f"a cluster of Kafka {node.version_of(other)} (state {other}) runs on these "
                      "ports: scripts/kafka.sh cluster-stop first, or set "
                      "SYMFONIC_KAFKA_CLUSTER_BASE_PORT")
    running = sum(1 for n in NODES if node.pid_of(cluster / f"node{n}") is not None)
    if fresh and 0 < running < CLUSTER_SIZE:
        raise die(f"--fresh: {running} of the nodes are running; scripts/kafka.sh cluster-stop "
                  "first")
    kafka: jars.Kafka | None = None
    if running < CLUSTER_SIZE:
        tools.java()
        kafka = jars.ensure(env)
        cluster = dir_of(env, kafka.version)
        if fresh and cluster.is_dir():
            for n in NODES:
                shutil.rmtree(cluster / f"node{n}" / "data", ignore_errors=True)
            (cluster / "cluster.id").unlink(missing_ok=True)
            log(f"--fresh: deleted the old storage of the three nodes in {cluster}")
        cluster.mkdir(parents=True, exist_ok=True)
        if not read_or_none(cluster / "cluster.id"):
            (cluster / "cluster.id").write_text(node.new_cluster_id() + "\n")
        (cluster / "version").write_text(kafka.version + "\n")
    started = []
    for n in NODES:
        directory = cluster / f"node{n}"
        if node.pid_of(directory) is not None:
            continue
        address = f"{env.host}:{node_port(env, n)}"
        answer = probe.ask(address, probe.Expect())
        answer.report(quiet=True)
        if answer.status == 0:
            raise die(f"{address} already serves a broker not started by this script")
        assert kafka is not None
        _prepare(env, kafka, cluster, n)
        node.launch(env, kafka, directory, env.cluster_heap_opts)
        started.append(n)
    for n in NODES:
        if not node.wait_ready(env, cluster / f"node{n}", f"{env.host}:{node_port(env, n)}",
                               probe.Expect(brokers=CLUSTER_SIZE)):
            raise die(f"node {n} did not come up (scripts/kafka.sh logs {n})")
    if not started:
        say(f"kafka.sh: the 3-node cluster (Kafka {node.version_of(cluster)}) is already "
            "running; reusing it")
    else:
        assert kafka is not None
        say(f"kafka.sh: 3-node cluster of Kafka {kafka.version} up in {clock.since()} s "
            f"(started nodes {' '.join(map(str, started))}; state {cluster})")
    say(f"bootstrap servers: {bootstrap(env)}")
    if started:
        extra_config_note(env)


def stop(env: Env) -> None:
    node.lock_state(env)
    cluster = running_dir(env)
    # SIGTERM all nodes at once: each does a controlled shutdown while the quorum still stands.
    signalled = [node.signal_node(cluster / f"node{n}", signal.SIGTERM) for n in NODES]
    for n in NODES:
        node.wait_gone(cluster / f"node{n}", env.stop_timeout)
    if any(signalled):
        say(f"kafka.sh: cluster stopped ({cluster})")
    else:
        say("kafka.sh: no cluster node was running")


def status(env: Env) -> int:
    """Each node, and the partitions as the first healthy one sees them; 0 when all three
    serve."""
    cluster = running_dir(env)
    say(f"Kafka {node.version_of(cluster)}, state {cluster}")
    healthy, first = 0, None
    for n in NODES:
        pid = node.pid_of(cluster / f"node{n}")
        address = f"{env.host}:{node_port(env, n)}"
        if pid is None:
            say(f"node {n}: not running")
            continue
        answer = probe.ask(address, probe.Expect(node=n))
        answer.report(quiet=True)
        if answer.status == 0:
            say(f"node {n}: running, pid {pid}, broker {address}, controller "
                f"{env.host}:{properties.cluster_controller_port(env, n)}")
            healthy += 1
            first = first or n
        else:
            say(f"node {n}: pid {pid} alive but not serving on {address}")
    if first is not None:
        answer = probe.ask(f"{env.host}:{node_port(env, first)}", probe.Expect(), isr=True)
        summary = (probe.isr_summary(answer.meta) if answer.status == 0 and answer.meta
                   else answer.text if answer.status == 2 else "")
        say(f"partitions (as node {first} sees them): {summary}")
    say(f"bootstrap servers: {bootstrap(env)}")
    return 0 if healthy == CLUSTER_SIZE else 1


def _node(text: str) -> int:
    if text not in {str(n) for n in NODES}:
        raise die(f"a node number 1..{CLUSTER_SIZE} is required")
    return int(text)


def _signal_node(env: Env, which: str, signum: signal.Signals, bound: float) -> tuple[int, int]:
    """Sends node N ``signum`` and waits until its JVM is gone: N and the pid it had."""
    n = _node(which)
    node.lock_state(env)
    directory = running_dir(env) / f"node{n}"
    pid = node.pid_of(directory)
    if pid is None:
        raise die(f"node {n} is not running")
    node.signal_node(directory, signum)
    node.wait_gone(directory, bound)
    return n, pid


def kill_node(env: Env, which: str) -> None:
    """SIGKILL node N (a crash)."""
    clock = Clock()
    n, pid = _signal_node(env, which, signal.SIGKILL, 10)
    say(f"kafka.sh: node {n} (pid {pid}) killed with SIGKILL in {clock.since()} s")


def stop_node(env: Env, which: str) -> None:
    """SIGTERM node N, a controlled shutdown (it hands its leaderships to the others first),
    and wait until its JVM is gone."""
    clock = Clock()
    n, pid = _signal_node(env, which, signal.SIGTERM, env.stop_timeout)
    say(f"kafka.sh: node {n} (pid {pid}) stopped (SIGTERM, controlled shutdown) in "
        f"{clock.since()} s")


def start_node(env: Env, which: str) -> None:
    """Node N again, with its cluster's version; back in the cluster and in the ISR."""
    n = _node(which)
    node.lock_state(env)
    clock = Clock()
    cluster = running_dir(env)
    directory = cluster / f"node{n}"
    pid = node.pid_of(directory)
    if pid is not None:
        say(f"kafka.sh: node {n} is already running (pid {pid})")
        return
    if not read_or_none(cluster / "cluster.id"):
        raise die(f"no cluster yet in {cluster}: scripts/kafka.sh cluster-start")
    if node.is_legacy(cluster):
        raise die(f"the cluster in {cluster} was made by an older kafka.sh: scripts/kafka.sh "
                  "cluster-stop, then cluster-start")
    version = node.version_of(cluster)
    if not jars.valid(version):
        raise die(f"{cluster} does not say which Kafka version it runs")
    tools.java()
    kafka = jars.ensure(env, (version,))
    _prepare(env, kafka, cluster, n)
    node.launch(env, kafka, directory, env.cluster_heap_opts)
    # Back in the cluster (unfenced) is not enough for the next failure: until the node has
    # caught up and is in the ISR again, a second node going down can leave a partition below
    # min.insync.replicas. Wait for both.
    address = f"{env.host}:{node_port(env, n)}"
    if not node.wait_ready(env, directory, address, probe.Expect(node=n, in_sync=n)):
        raise die(f"node {n} did not come back (scripts/kafka.sh logs {n})")
    say(f"kafka.sh: node {n} back (pid {read(directory / 'pid')}) on {address} and in the ISR "
        f"of all its partitions in {clock.since()} s")


def reset(env: Env) -> None:
    """Deletes this version's three nodes' data (they must be stopped)."""
    node.lock_state(env)
    cluster = dir_of(env, jars.offline_version(env))
    for n in NODES:
        if node.pid_of(cluster / f"node{n}") is not None:
            raise die(f"node {n} is running: scripts/kafka.sh cluster-stop first")
    shutil.rmtree(cluster, ignore_errors=True)
    say(f"kafka.sh: deleted {cluster}")
