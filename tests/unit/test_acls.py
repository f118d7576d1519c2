"""The ACL plan (symfonic_stream/app/acls.py), ``symfonic-stream acls``, and the chart's
Strimzi KafkaUsers kept equal to it.

The chart's helm-unittest suite for the KafkaUsers (helm/symfonic-stream/tests/
kafkausers_test.yaml, run by ``make chart-check``) is generated here from the plan, and a
test fails when it is stale: ``.venv/bin/python -m tests.unit.test_acls --write`` rewrites it.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from symfonic_stream.app.acls import (
    AclBinding,
    AclPlan,
    AclPlanError,
    ReviewerSpec,
    build_plan,
    consumer_topologies,
    kafka_acls_command,
    review_group_prefix,
    strimzi_acls,
    transactional_id_prefix,
)
from symfonic_stream.cli import main
from symfonic_stream.config import Settings
from symfonic_stream.models.names import TopicNames

#: The deployment's consumers (their declarations: consumers/).
CONSUMERS = ("typed", "chunks", "pauses", "resumes")

SUITE = Path(__file__).resolve().parents[2] / "helm/symfonic-stream/tests/kafkausers_test.yaml"


def _ops(plan: AclPlan, principal: str, kind: str, name: str) -> set[str]:
    return {b.operation for b in plan.bindings
            if b.principal == principal and b.resource_type == kind and b.resource_name == name}


def allowed(plan: AclPlan, principal: str, kind: str, name: str, operation: str) -> bool:
    """What an authorizer decides: a LITERAL binding names the resource, a PREFIXED one a
    prefix of it; Read and Write imply Describe (Kafka's rule)."""
    implied = {operation} | ({"READ", "WRITE"} if operation == "DESCRIBE" else set())

    def names(b: AclBinding) -> bool:
        if b.pattern == "LITERAL":
            return b.resource_name == name
        return name.startswith(b.resource_name)

    return any(b.principal == principal and b.resource_type == kind and b.operation in implied
               and names(b) for b in plan.bindings)


def test_a_projector_gets_exactly_its_topics_group_and_transactional_ids() -> None:
    settings = Settings(topic_prefix="p")
    plan = build_plan(settings, ["typed"])
    who = "User:p-typed"
    assert plan.principals() == [who]
    topics = {b.resource_name for b in plan.bindings if b.resource_type == "TOPIC"}
    assert topics == {"p.agent-events", "p.stream-events", "p.dead-letter",
                      "p-typed-state-changelog"}
    assert _ops(plan, who, "TOPIC", "p.agent-events") == {"READ", "DESCRIBE", "DESCRIBE_CONFIGS"}
    assert _ops(plan, who, "TOPIC", "p.stream-events") == {"WRITE", "DESCRIBE", "DESCRIBE_CONFIGS"}
    assert _ops(plan, who, "TOPIC", "p-typed-state-changelog") == {
        "READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS"}
    assert _ops(plan, who, "GROUP", "p-typed") == {"READ"}
    [topology] = consumer_topologies(settings, "typed")
    for partition in range(64):
        assert allowed(plan, who, "TRANSACTIONAL_ID", topology.transactional_id(partition), "WRITE")
    assert not allowed(plan, who, "TRANSACTIONAL_ID", "p-chunks-p.agent-events-0", "WRITE")
    assert not any(b.resource_type == "CLUSTER" for b in plan.bindings)
    assert not any(b.operation == "CREATE" for b in plan.bindings)


def test_every_topic_every_topology_touches_is_granted_and_nothing_else() -> None:
    settings = Settings(topic_prefix="p", tenant_queues=True)
    plan = build_plan(settings)
    names = TopicNames("p")
    for consumer in CONSUMERS:
        who = f"User:p-{consumer}"
        for t in consumer_topologies(settings, consumer):
            assert allowed(plan, who, "TOPIC", t.source_topic, "READ")
            assert allowed(plan, who, "TOPIC", t.source_topic, "DESCRIBE_CONFIGS")
            for out in (*t.output_topics, t.dead_letter_topic):
                assert out is not None and allowed(plan, who, "TOPIC", out, "WRITE"), out
                assert allowed(plan, who, "TOPIC", out, "DESCRIBE_CONFIGS")
            if t.changelog_topic:
                assert allowed(plan, who, "TOPIC", t.changelog_topic, "READ")
                assert allowed(plan, who, "TOPIC", t.changelog_topic, "WRITE")
            assert allowed(plan, who, "GROUP", t.group_id, "READ")
            assert allowed(plan, who, "TRANSACTIONAL_ID", t.transactional_id(3), "DESCRIBE")
    # Who writes what (docs/security.md's threat model).
    writers = {c for c in CONSUMERS
               if allowed(plan, f"User:p-{c}", "TOPIC", names.pause_registrations, "WRITE")}
    assert writers == {"pauses", "resumes"}
    assert not any(allowed(plan, f"User:p-{c}", "TOPIC", names.agent_events, "WRITE")
                   for c in CONSUMERS), "only the kernel writes the raw topic"


def test_the_resumes_process_gets_its_intake_and_its_validator() -> None:
    plan = build_plan(Settings(topic_prefix="p"), ["resumes"])
    who = "User:p-resumes"
    groups = {b.resource_name for b in plan.bindings if b.resource_type == "GROUP"}
    assert groups == {"p-resume-intake", "p-resumes"}
    assert _ops(plan, who, "TOPIC", "p.pause-registrations") >= {"READ", "WRITE"}
    assert allowed(plan, who, "TOPIC", "p.resume-requests", "READ")
    assert not allowed(plan, who, "TOPIC", "p.resume-requests", "WRITE")


def test_the_gateway_reads_projections_and_reviews_and_writes_only_answers() -> None:
    plan = build_plan(Settings(topic_prefix="p"), ["gateway"])
    who = "User:p-gateway"
    assert plan.principals() == [who]
    for topic in ("p.stream-events", "p.stream-chunks", "p.review-tickets"):
        assert _ops(plan, who, "TOPIC", topic) == {"READ", "DESCRIBE", "DESCRIBE_CONFIGS"}, topic
    assert _ops(plan, who, "TOPIC", "p.resume-requests") == {"WRITE", "DESCRIBE"}
    assert {b.resource_type for b in plan.bindings} == {"TOPIC"}  # no group, no txn id
    assert len(plan.bindings) == 3 * 3 + 2
    for topic in ("p.resumes", "p.pause-registrations", "p.human.default"):
        assert not _ops(plan, who, "TOPIC", topic), topic
    assert build_plan(Settings(topic_prefix="p")).principals() == [
        f"User:p-{consumer}" for consumer in sorted(CONSUMERS)], "not by default"


def test_the_validator_writes_review_tickets_and_escalated_queues(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("escalations: [{queue: default, after_minutes: 5, to: oversight}]")
    who = "User:p-resumes"
    plain = build_plan(Settings(topic_prefix="p"), ["resumes"])
    assert _ops(plain, who, "TOPIC", "p.review-tickets") >= {"WRITE"}
    assert not [b for b in plain.bindings if b.resource_name.startswith("p.human.")]
    escalating = build_plan(Settings(topic_prefix="p", routing_rules=rules), ["resumes"])
    assert allowed(escalating, who, "TOPIC", "p.human.oversight", "WRITE")
    per_tenant = build_plan(Settings(topic_prefix="p", routing_rules=rules,
                                     tenant_queues=True), ["resumes"])
    assert allowed(per_tenant, who, "TOPIC", "p.human.acme.oversight", "CREATE")


def test_the_router_owns_the_queue_namespace_and_creates_only_with_tenant_queues() -> None:
    shared = build_plan(Settings(topic_prefix="p"), ["pauses"])
    tenants = build_plan(Settings(topic_prefix="p", tenant_queues=True), ["pauses"])
    for plan in (shared, tenants):
        assert allowed(plan, "User:p-pauses", "TOPIC", "p.human.default", "WRITE")
        assert allowed(plan, "User:p-pauses", "TOPIC", "p.human.expired", "WRITE")
    assert not allowed(shared, "User:p-pauses", "TOPIC", "p.human.acme.default", "CREATE")
    assert allowed(tenants, "User:p-pauses", "TOPIC", "p.human.acme.default", "CREATE")
    assert not allowed(tenants, "User:p-pauses", "TOPIC", "p.humane", "CREATE")


def test_a_reviewer_reads_its_tenant_only_and_writes_only_answers() -> None:
    settings = Settings(topic_prefix="p", tenant_queues=True)
    plan = build_plan(settings, [], [ReviewerSpec("acme"), ReviewerSpec("acme-eu")])
    names = TopicNames("p")
    who = "User:reviewer-acme"
    assert allowed(plan, who, "TOPIC", names.human_queue("default", "acme"), "READ")
    assert allowed(plan, who, "TOPIC", names.expired_queue_of("acme"), "READ")
    for other in (names.human_queue("default", "acme-eu"), names.human_queue("default"),
                  names.human_queue("x", "globex"), names.resumes, names.resume_rejections,
                  names.pause_registrations, names.agent_events):
        assert not allowed(plan, who, "TOPIC", other, "READ"), other
    assert allowed(plan, who, "TOPIC", names.resume_requests, "WRITE")
    assert {b.resource_name for b in plan.bindings
            if b.principal == who and b.operation == "WRITE"} == {names.resume_requests}
    assert allowed(plan, who, "GROUP", f"{review_group_prefix(names, 'acme')}ui", "READ")
    assert not allowed(plan, who, "GROUP", f"{review_group_prefix(names, 'acme-eu')}ui", "READ")
    assert not any(b.operation == "DESCRIBE_CONFIGS" for b in plan.bindings)


def test_a_reviewer_of_one_queue_and_without_tenant_queues() -> None:
    one = build_plan(Settings(topic_prefix="p", tenant_queues=True), [],
                     [ReviewerSpec.parse("acme:desk")])
    assert allowed(one, "User:reviewer-acme", "TOPIC", "p.human.acme.desk", "READ")
    assert not allowed(one, "User:reviewer-acme", "TOPIC", "p.human.acme.other", "READ")
    shared = build_plan(Settings(topic_prefix="p"), [], [ReviewerSpec.parse("acme:desk")])
    assert allowed(shared, "User:reviewer-acme", "TOPIC", "p.human.desk", "READ")
    with pytest.raises(AclPlanError, match="TENANT:QUEUE"):
        build_plan(Settings(topic_prefix="p"), [], [ReviewerSpec("acme")])


@pytest.mark.parametrize("text", ["ac.me", "", "acme:", "acme:de.sk", "a b", "acme:q:r"])
def test_a_name_that_cannot_be_part_of_a_topic_is_refused(text: str) -> None:
    with pytest.raises(AclPlanError, match="--reviewer"):
        ReviewerSpec.parse(text)


def test_principal_overrides() -> None:
    plan = build_plan(Settings(topic_prefix="p"), ["typed"], [ReviewerSpec("acme", "q")],
                      {"typed": "User:t", "reviewer:acme": "User:r"})
    assert plan.principals() == ["User:r", "User:t"]
    with pytest.raises(AclPlanError, match="--principal"):
        build_plan(Settings(), ["typed"], [], {"copier": "User:x"})


@pytest.mark.parametrize("key", ["typed", "reviewer:acme"])
def test_a_wildcard_principal_is_refused_unless_asked_for(key: str) -> None:
    """Issue 33: ``--principal reviewer:acme=User:*`` printed grants to every user."""
    runner = CliRunner()
    env = {"SYMFONIC_TOPIC_PREFIX": "p", "SYMFONIC_TENANT_QUEUES": "true"}
    args = ["acls", "--consumer", "typed", "--reviewer", "acme", "--principal", f"{key}=User:*"]
    refused = runner.invoke(main, args, env=env)
    assert refused.exit_code == 2, refused.output
    assert "User:*" in refused.output and "--allow-wildcard" in refused.output
    assert "kafka-acls.sh" not in refused.output
    with pytest.raises(AclPlanError, match="every User"):
        build_plan(Settings(topic_prefix="p", tenant_queues=True), ["typed"],
                   [ReviewerSpec("acme")], {key: "User:*"})
    allowed = runner.invoke(main, [*args, "--allow-wildcard"], env=env)
    assert allowed.exit_code == 0, allowed.output
    assert "--allow-principal 'User:*'" in allowed.output
    assert "warning" in allowed.output and "every User" in allowed.output


@pytest.mark.parametrize("principal", ["User:reviewer-*", "User:*acme", "User:a*b"])
def test_a_partial_wildcard_is_refused_even_when_wildcards_are_allowed(principal: str) -> None:
    """Kafka has no partial wildcard: ``User:reviewer-*`` would name one odd user, not a
    prefix, so it is a mistake either way."""
    with pytest.raises(AclPlanError, match="no partial wildcard"):
        build_plan(Settings(), ["typed"], [], {"typed": principal}, allow_wildcard=True)


def test_kafka_acls_lines() -> None:
    plan = build_plan(Settings(topic_prefix="p", tenant_queues=True), ["pauses"])
    lines = [kafka_acls_command(g, "k:9092", "admin.properties") for g in plan.grants()]
    assert ("kafka-acls.sh --bootstrap-server k:9092 --command-config admin.properties --add "
            "--allow-principal User:p-pauses --operation Write --operation Create --operation "
            "Describe --operation DescribeConfigs --topic p.human. --resource-pattern-type "
            "prefixed") in lines
    assert ("kafka-acls.sh --bootstrap-server k:9092 --command-config admin.properties --add "
            "--allow-principal User:p-pauses --operation Read --group p-pauses") in lines
    assert len(lines) == len(set(lines)) == len(plan.grants())


def test_the_command_prints_the_plan_and_names_a_bad_option() -> None:
    runner = CliRunner()
    env = {"SYMFONIC_TOPIC_PREFIX": "p", "SYMFONIC_TENANT_QUEUES": "true"}
    done = runner.invoke(main, ["acls", "--consumer", "typed", "--reviewer", "acme"], env=env)
    assert done.exit_code == 0, done.output
    assert len(done.output.splitlines()) == len(
        build_plan(Settings(topic_prefix="p", tenant_queues=True), ["typed"],
                   [ReviewerSpec("acme")]).grants())
    bad = runner.invoke(main, ["acls", "--reviewer", "ac.me"], env=env)
    assert bad.exit_code == 2 and "--reviewer 'ac.me'" in bad.output
    bad = runner.invoke(main, ["acls", "--principal", "typed=alice"], env=env)
    assert bad.exit_code == 2 and "--principal typed=" in bad.output


def test_transactional_id_prefix_is_the_shared_part() -> None:
    [topology] = consumer_topologies(Settings(topic_prefix="p"), "chunks")
    assert transactional_id_prefix(topology) == "p-chunks-p.agent-events-"


def test_bindings_sort_and_deduplicate() -> None:
    plan = build_plan(Settings(), ["typed", "typed"])
    assert list(plan.bindings) == sorted(set(plan.bindings))
    assert all(isinstance(b, AclBinding) for b in plan.bindings)


# --------------------------------------------------------------------------- the chart

#: The chart's release namespace and values of each generated case; kept small, each case
#: a different branch of the template (prefix, consumers, tenant queues, reviewers).
CHART_CASES: list[dict[str, Any]] = [
    {"it": "renders a KafkaUser per consumer with the ACLs of `symfonic-stream acls`",
     "prefix": "prod", "tenant_queues": False, "consumers": list(CONSUMERS), "reviewers": []},
    {"it": "renders tenant-queue ACLs, reviewer users and skips disabled consumers",
     "prefix": "staging", "tenant_queues": True, "consumers": ["typed", "pauses", "resumes"],
     "reviewers": [{"tenant": "acme"}, {"tenant": "globex", "queue": "desk"}]},
    {"it": "renders a reviewer of one shared queue without tenant queues",
     "prefix": "symfonic", "tenant_queues": False, "consumers": ["resumes"],
     "reviewers": [{"tenant": "acme", "queue": "default"}]},
    {"it": "renders the gateway's user: it reads review-tickets and writes only answers",
     "prefix": "prod", "tenant_queues": True, "consumers": ["resumes"], "reviewers": [],
     "gateway": True},
    {"it": "renders the validator's grant of the queues when the rules escalate",
     "prefix": "prod", "tenant_queues": False, "consumers": ["pauses", "resumes"],
     "reviewers": [], "escalations": [{"queue": "default", "after_minutes": 5, "to": "desk"}]},
    {"it": "renders the validator's grant to create a tenant's queue when it escalates",
     "prefix": "prod", "tenant_queues": True, "consumers": ["resumes"],
     "reviewers": [], "escalations": [{"queue": "default", "after_minutes": 5, "to": "desk"}]},
]


#: Values the template must refuse, as acls.py does (a reviewer of no queue of its own), or
#: cannot render (a user name that is no Kubernetes name), or lacks (the cluster).
CHART_REFUSALS: list[tuple[str, dict[str, Any], str]] = [
    ("refuses a reviewer without a queue when the queues are not per tenant",
     {"strimzi.reviewers": [{"tenant": "acme"}]}, "tenant acme has no queue"),
    ("refuses a prefix that cannot name a KafkaUser",
     {"kafka.topicPrefix": "Prod_1"}, "is not a Kubernetes name"),
    ("requires the Strimzi cluster", {"strimzi.clusterName": ""}, "clusterName .* is required"),
]


def _case_set(case: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {
        "kafka.topicPrefix": case["prefix"],
        "pauses.tenantQueues": case["tenant_queues"],
        "strimzi.enabled": True,
        "strimzi.clusterName": "main",
        "strimzi.reviewers": case["reviewers"],
    }
    for consumer in CONSUMERS:
        values[f"consumers.{consumer}.enabled"] = consumer in case["consumers"]
    if case.get("gateway"):
        values["gateway.enabled"] = True
    if case.get("escalations"):
        values["pauses.routing.escalations"] = case["escalations"]
    return values


def _case_asserts(case: dict[str, Any]) -> list[dict[str, Any]]:
    reviewers = [ReviewerSpec(r["tenant"], r.get("queue")) for r in case["reviewers"]]
    named = [*case["consumers"], *(["gateway"] if case.get("gateway") else [])]
    with tempfile.TemporaryDirectory() as folder:
        rules = Path(folder) / "rules.yaml"  # (the validator's wiring reads the rules file)
        rules.write_text(yaml.safe_dump({"escalations": case.get("escalations", [])}))
        settings = Settings(topic_prefix=case["prefix"], tenant_queues=case["tenant_queues"],
                            routing_rules=rules)
        plan = build_plan(settings, named, reviewers)
    asserts: list[dict[str, Any]] = [{"hasDocuments": {"count": len(plan.principals())}}]
    for principal in plan.principals():
        select = {"path": "metadata.name", "value": principal.removeprefix("User:")}
        acls = strimzi_acls(plan, principal)
        asserts.append({"lengthEqual": {"path": "spec.authorization.acls", "count": len(acls)},
                        "documentSelector": select})
        asserts.extend({"contains": {"path": "spec.authorization.acls", "content": acl},
                        "documentSelector": select} for acl in acls)
    return asserts


def chart_suite() -> str:
    """The helm-unittest suite asserting the chart's KafkaUsers equal the plan."""
    tests: list[dict[str, Any]] = [
        {"it": "renders no KafkaUser by default", "asserts": [{"hasDocuments": {"count": 0}}]},
    ]
    tests += [{"it": case["it"], "set": _case_set(case), "asserts": _case_asserts(case)}
              for case in CHART_CASES]
    tests += [{"it": why, "set": {"strimzi.enabled": True, "strimzi.clusterName": "main", **values},
               "asserts": [{"failedTemplate": {"errorPattern": error}}]}
              for why, values, error in CHART_REFUSALS]
    suite = {"suite": "Strimzi KafkaUsers (generated from symfonic_stream/app/acls.py)",
             "templates": ["templates/kafkausers.yaml"],
             "release": {"name": "rel", "namespace": "streaming"}, "tests": tests}
    header = ("# Generated by tests/unit/test_acls.py from the ACL plan: do not edit.\n"
              "# Regenerate: .venv/bin/python -m tests.unit.test_acls --write\n")
    return header + yaml.safe_dump(suite, sort_keys=False, width=100)


def test_the_charts_kafkauser_suite_is_generated_from_the_plan() -> None:
    assert SUITE.read_text() == chart_suite(), (
        "helm/symfonic-stream/tests/kafkausers_test.yaml is stale: "
        ".venv/bin/python -m tests.unit.test_acls --write")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.unit.test_acls --write")
    SUITE.write_text(chart_suite())
    print(f"wrote {SUITE}")
