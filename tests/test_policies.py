"""Policies: the built-ins, Python policies, the YAML rule file and its errors, and how verdicts combine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planexec import Plan, Registry
from planexec.errors import PolicyError
from planexec.governance.policies import FunctionPolicy, PolicyContext, PolicyVerdict, Review, policy, review_plan
from planexec.governance.policy_sets import PolicySet, load_policies
from planexec.governance.rules import (
    ForbidTools,
    MaxEstimatedCost,
    MaxSteps,
    RequiresOrder,
    RiskEscalation,
    ToolsNeedPerson,
    estimate_cost,
)
from planexec.models.pricing import PriceTable
from planexec.testing import ScriptedModel, scripted_tool
from planexec.workers.tools import Tool
from planexec.workers.worker import RoleWorker


def make_plan(*steps: dict, **extra: object) -> Plan:
    return Plan.from_data({"plan_id": "p", "goal": "ship it", "steps": list(steps), **extra})


def step(sid: str, action: str, *after: str, **extra: object) -> dict:
    return {"id": sid, "action": action, "depends_on": list(after), **extra}


DEPLOY = make_plan(step("test", "run_tests"), step("backup", "backup_db", "test"), step("deploy", "deploy_service", "backup"))


def role(name: str, model: str, tools: tuple[Tool, ...] = (), tasks: tuple[str, ...] = ("write",)) -> RoleWorker:
    return RoleWorker(name, model=ScriptedModel([], name=model), description=name, system_prompt="", tools=tools, tasks=tasks)


@pytest.fixture
def team() -> Registry:
    """Tools run_tests, backup_db, deploy_service, rm_rf, publish (declared requires_approval); roles writer, mystery, coder."""
    reg = Registry()
    for name in ("run_tests", "backup_db", "deploy_service", "rm_rf"):
        reg.add_tool(scripted_tool(name))

    async def publish(text: str) -> str:
        return text

    reg.add_tool(Tool(publish, requires_approval=True))
    reg.add_worker(role("writer", "openai:gpt-4o-mini"))
    reg.add_worker(role("mystery", "nowhere:unpriced-model"))
    reg.add_worker(role("coder", "openai:gpt-4o-mini", tools=(reg.tools["deploy_service"], reg.tools["rm_rf"]), tasks=("code",)))
    return reg


# --- built-ins ------------------------------------------------------------------------


def test_max_steps_rejects_a_longer_plan_naming_the_steps_over_the_limit() -> None:
    assert MaxSteps(3).review(DEPLOY, PolicyContext()).decision == "approve"
    verdict = MaxSteps(2).review(DEPLOY, PolicyContext())
    assert verdict.decision == "reject" and verdict.policy == "max_steps" and verdict.steps == ["deploy"]
    assert verdict.reasons == ["the plan has 3 steps, more than max_steps 2 (over the limit: deploy)"]


def test_max_cost_estimates_model_backed_steps_and_states_its_assumptions(team: Registry) -> None:
    plan = make_plan(step("draft", "write", worker="writer"), step("polish", "write", "draft", worker="writer"), step("t", "run_tests"))
    context = PolicyContext(registry=team)
    estimate = estimate_cost(plan, context)
    # gpt-4o-mini: $0.15 in, $0.60 out per million; 4000 in + 1000 out per model-backed step; the tool step is free
    assert estimate.dollars == pytest.approx(2 * 0.0012) and estimate.model_steps == 2 and "t" not in estimate.per_step

    over = MaxEstimatedCost(0.002).review(plan, context)
    assert over.decision == "reject"
    assert over.reasons[0].startswith("estimated cost $0.0024 is over max_cost $0.0020")
    assert "2 model-backed step(s)" in over.reasons[1] and "4000 tokens in + 1000 out each" in over.reasons[1]

    within = MaxEstimatedCost(0.01, input_tokens=1000, output_tokens=100).review(plan, context)
    assert within.decision == "approve" and "1000 tokens in + 100 out" in within.reasons[0] and "$0.0004" in within.reasons[0]


def test_max_cost_escalates_when_a_price_is_unknown_never_approves_silently(team: Registry) -> None:
    plan = make_plan(step("a", "write", worker="mystery"), step("b", "write", worker="writer"))
    verdict = MaxEstimatedCost(100).review(plan, PolicyContext(registry=team))
    assert verdict.decision == "escalate" and verdict.steps == ["a"]
    assert "step 'a': cost unknown: worker 'mystery' uses nowhere:unpriced-model, which has no price" in verdict.reasons
    # a price from the configuration makes it known
    prices = PriceTable.default({"nowhere:*": {"input": 1.0, "output": 1.0}})
    assert MaxEstimatedCost(100).review(plan, PolicyContext(registry=team, prices=prices)).decision == "approve"
    # without a registry nothing says which workers call models
    assert MaxEstimatedCost(100).review(plan, PolicyContext()).decision == "escalate"


def test_max_cost_counts_a_critic_check_as_a_model_call(team: Registry) -> None:
    plan = make_plan(step("t", "run_tests", success_criteria=[{"kind": "critic", "worker": "writer"}]))
    assert estimate_cost(plan, PolicyContext(registry=team)).per_step == {"t": pytest.approx(0.0012)}


def test_tools_need_person_escalates_naming_the_step_and_pattern(team: Registry) -> None:
    verdict = ToolsNeedPerson(["deploy_*"]).review(DEPLOY, PolicyContext(registry=team))
    assert verdict.decision == "escalate" and verdict.steps == ["deploy"]
    assert verdict.reasons == ["step 'deploy' calls 'deploy_service' (matches 'deploy_*'): a person must approve it"]
    # a role that may call the tool through its model counts too
    plan = make_plan(step("c", "code", worker="coder"))
    (reason,) = ToolsNeedPerson("deploy_service").review(plan, PolicyContext(registry=team)).reasons
    assert "step 'c' may call 'deploy_service' through role 'coder'" in reason
    assert ToolsNeedPerson("deploy_*").review(make_plan(step("t", "run_tests")), PolicyContext(registry=team)).decision == "approve"


def test_after_a_replan_only_new_or_changed_steps_need_a_person(team: Registry) -> None:
    approved = DEPLOY
    revised = make_plan(
        step("test", "run_tests"),
        step("backup", "backup_db", "test"),
        step("deploy", "deploy_service", "backup"),
        step("deploy2", "deploy_service", "deploy"),
        version=2,
        revises=1,
    )
    context = PolicyContext(registry=team, previous=approved)
    verdict = ToolsNeedPerson("deploy_*").review(revised, context)
    assert verdict.decision == "escalate" and verdict.steps == ["deploy2"] and verdict.scope == "changes"
    assert review_plan(revised, [ToolsNeedPerson("deploy_*")], context).scope == "changes"
    # unless the policy asks for the whole plan again
    whole = ToolsNeedPerson("deploy_*", on_revision="plan").review(revised, context)
    assert whole.steps == ["deploy", "deploy2"] and whole.scope == "plan"
    assert review_plan(revised, [ToolsNeedPerson("deploy_*", on_revision="plan")], context).scope == "plan"


def test_forbid_rejects_a_step_that_calls_a_forbidden_tool_and_escalates_a_role_that_may(team: Registry) -> None:
    plan = make_plan(step("clean", "rm_rf"), step("c", "code", worker="coder"))
    verdict = ForbidTools(["rm_*"]).review(plan, PolicyContext(registry=team))
    assert verdict.decision == "reject" and verdict.steps == ["clean", "c"]
    assert verdict.reasons[0] == "step 'clean' calls 'rm_rf' (matches 'rm_*'), which is forbidden"
    only_role = ForbidTools(["rm_*"]).review(make_plan(step("c", "code", worker="coder")), PolicyContext(registry=team))
    assert only_role.decision == "escalate" and "may call 'rm_rf' through role 'coder'" in only_role.reasons[0]


def test_requires_order_checks_the_dependency_transitively(team: Registry) -> None:
    rule = RequiresOrder(before="backup_*", then="deploy_*")
    context = PolicyContext(registry=team)
    assert rule.review(DEPLOY, context).decision == "approve"  # deploy <- backup directly
    chained = make_plan(step("backup", "backup_db"), step("test", "run_tests", "backup"), step("deploy", "deploy_service", "test"))
    assert rule.review(chained, context).decision == "approve"  # deploy <- test <- backup

    parallel = make_plan(step("backup", "backup_db"), step("deploy", "deploy_service"))
    verdict = rule.review(parallel, context)
    assert verdict.decision == "reject" and verdict.steps == ["deploy"]
    (reason,) = verdict.reasons
    assert reason.startswith("step 'deploy' calls 'deploy_service' (matches 'deploy_*') but does not depend")
    assert "steps that do (backup) are not upstream of it" in reason and "(rule: backup_* must come before deploy_*)" in reason

    none = rule.review(make_plan(step("deploy", "deploy_service")), context)
    assert "no step of the plan does" in none.reasons[0]


def test_risk_escalation_names_the_risk_level_and_the_steps_that_need_approval(team: Registry) -> None:
    context = PolicyContext(registry=team)
    assert RiskEscalation().review(DEPLOY, context).decision == "approve"
    high = RiskEscalation().review(make_plan(step("t", "run_tests"), risk_level="high"), context)
    assert high.decision == "escalate" and high.reasons == ["risk_level is 'high': a person must approve the plan"]

    plan = make_plan(step("t", "run_tests", requires_approval=True), step("p", "publish", parameters={"text": "hi"}))
    verdict = RiskEscalation().review(plan, context)
    assert verdict.decision == "escalate" and verdict.steps == ["t", "p"]
    assert verdict.reasons == ["step 't' is marked requires_approval", "step 'p' calls 'publish', a tool declared requires_approval"]
    assert RiskEscalation(levels=["critical"]).review(make_plan(step("t", "run_tests"), risk_level="high"), context).decision == "approve"
    with pytest.raises(ValueError, match="unknown risk level"):
        RiskEscalation(levels=["severe"])


def test_risk_after_a_replan_asks_for_the_changes_or_the_whole_plan_when_risk_went_up(team: Registry) -> None:
    approved = make_plan(step("t", "run_tests"), risk_level="high")
    revised = make_plan(step("t", "run_tests"), step("b", "backup_db", "t"), risk_level="high", version=2)
    verdict = RiskEscalation().review(revised, PolicyContext(registry=team, previous=approved))
    assert verdict.scope == "changes" and verdict.steps == ["b"]
    raised = make_plan(step("t", "run_tests"), step("b", "backup_db", "t"), risk_level="critical", version=2)
    verdict = RiskEscalation().review(raised, PolicyContext(registry=team, previous=approved))
    assert verdict.scope == "plan" and "risk_level is 'critical' (was 'high' in approved v1)" in verdict.reasons[0]


# --- Python policies ------------------------------------------------------------------------


def test_a_python_function_is_a_policy_with_or_without_the_context() -> None:
    @policy
    def no_weekend_deploys(plan: Plan) -> tuple[str, list[str]]:
        return ("reject", ["step 'deploy': no deploys on a weekend"]) if "deploy" in plan.step_ids else ("approve", [])

    @policy(name="knows_previous")
    def second(plan: Plan, context: PolicyContext) -> PolicyVerdict:
        return PolicyVerdict(decision="escalate" if context.previous is None else "approve", policy="whatever")

    assert isinstance(no_weekend_deploys, FunctionPolicy)
    verdict = no_weekend_deploys.review(DEPLOY, PolicyContext())
    assert verdict.decision == "reject" and verdict.policy == "no_weekend_deploys"
    assert verdict.reasons == ["step 'deploy': no deploys on a weekend"]
    assert second.review(DEPLOY, PolicyContext()) == PolicyVerdict(decision="escalate", policy="knows_previous")


def test_a_policy_that_fails_or_answers_nonsense_rejects() -> None:
    @policy
    def broken(plan: Plan) -> str:
        raise RuntimeError("database unreachable")

    @policy
    def forgetful(plan: Plan) -> None:
        return None

    review = review_plan(DEPLOY, [broken, forgetful, MaxSteps(10)])
    assert review.decision == "reject"
    assert review.reasons("reject") == [
        "broken: the policy failed: RuntimeError: database unreachable",
        "forgetful: the policy failed: TypeError: returned None; return a PolicyVerdict, 'approve', 'reject', 'escalate' or (decision, reasons)",
    ]


def test_a_policy_set_registers_functions_and_refuses_a_second_policy_of_the_same_name() -> None:
    policies = PolicySet([MaxSteps(5)])

    @policies.policy
    def always_ask(plan: Plan) -> str:
        return "escalate"

    assert list(policies.policies) == ["max_steps", "always_ask"]
    assert policies.review(DEPLOY).decision == "escalate"
    with pytest.raises(PolicyError, match="a policy named 'max_steps' is already registered"):
        policies.add(MaxSteps(3))


def test_policies_load_from_a_python_module_like_tools(tmp_path: Path) -> None:
    (tmp_path / "my_policies.py").write_text(
        "from planexec.governance.policies import policy\n"
        "from planexec.governance.rules import MaxSteps\n"
        "\n"
        "short = MaxSteps(2, name='short')\n"
        "\n"
        "@policy\n"
        "def no_deploy(plan):\n"
        "    return ('reject', ['deploy is frozen']) if 'deploy' in plan.step_ids else 'approve'\n"
        "\n"
        "def register_policies(policies):\n"
        "    policies.policy(lambda plan: 'approve', name='hooked')\n"
    )
    policies = load_policies([str(tmp_path / "my_policies.py")])
    assert sorted(policies.policies) == ["hooked", "no_deploy", "short"]
    assert policies.review(DEPLOY).decision == "reject"

    (tmp_path / "broken.py").write_text("raise RuntimeError('no config')\n")
    with pytest.raises(PolicyError, match=r"cannot load policy file '.*broken\.py': RuntimeError: no config"):
        load_policies([str(tmp_path / "broken.py")])
    with pytest.raises(PolicyError, match="policy file 'missing.py' does not exist"):
        load_policies(["missing.py"])


# --- the YAML rule file ------------------------------------------------------------------------

RULE_FILE = """\
max_steps: 10
max_cost: 0.50
needs_person: ["deploy_*"]
order:
  - {before: "backup_*", then: "deploy_*"}
forbid: ["rm_*"]
risk: [high, critical]
"""


def test_a_yaml_rule_file_makes_the_built_in_policies(tmp_path: Path, team: Registry) -> None:
    (tmp_path / "policies.yaml").write_text(RULE_FILE)
    policies = load_policies([str(tmp_path / "policies.yaml")])
    assert list(policies.policies) == ["max_steps", "max_cost", "needs_person", "order(backup_* before deploy_*)", "forbid", "risk"]
    review = policies.review(DEPLOY, PolicyContext(registry=team))
    assert review.decision == "escalate" and review.steps == ["deploy"]
    bad = make_plan(step("deploy", "deploy_service"), step("clean", "rm_rf"))
    assert policies.review(bad, PolicyContext(registry=team)).decision == "reject"


def test_the_rule_file_takes_cost_assumptions_revisions_and_python_modules(tmp_path: Path, team: Registry) -> None:
    (tmp_path / "extra.py").write_text(
        "from planexec.governance.policies import policy\n\n@policy\ndef deny_all(plan):\n    return 'reject'\n"
    )
    (tmp_path / "policies.yml").write_text(
        "max_cost: {dollars: 0.001, input_tokens: 100, output_tokens: 10}\non_revision: plan\nneeds_person: deploy_service\nmodules: [extra.py]\nrisk: false\n"
    )
    policies = load_policies([str(tmp_path / "policies.yml")])
    assert list(policies.policies) == ["max_cost", "needs_person", "deny_all"]
    cost = policies.policies["max_cost"]
    assert isinstance(cost, MaxEstimatedCost) and (cost.dollars, cost.input_tokens, cost.output_tokens) == (0.001, 100, 10)
    assert policies.policies["needs_person"].on_revision == "plan"  # type: ignore[attr-defined]


def test_the_same_rule_in_two_files_applies_twice_told_apart_by_file(tmp_path: Path) -> None:
    (tmp_path / "team.yaml").write_text("max_steps: 10\n")
    (tmp_path / "strict.yaml").write_text("max_steps: 2\n")
    policies = load_policies([str(tmp_path / "team.yaml"), str(tmp_path / "strict.yaml"), str(tmp_path / "team.yaml")])
    assert list(policies.policies) == ["max_steps", "max_steps (strict.yaml)"]
    assert [v.decision for v in policies.review(DEPLOY).verdicts] == ["approve", "reject"]


@pytest.mark.parametrize(
    ("text", "message", "line", "rule"),
    [
        ("max_steps: 10\nforbid: [rm_*\n", "not valid YAML", 3, None),
        ("max_steps: 10\nmax_stpes: 3\n", "unknown rule 'max_stpes' (known rules: max_steps, max_cost, needs_person", 2, "max_stpes"),
        ("max_steps: ten\n", "rule 'max_steps': expected a whole number of steps of at least 1, got 'ten'", 1, "max_steps"),
        ("max_cost: cheap\n", "rule 'max_cost': max_cost (US dollars) must be a number of at least 0, got 'cheap'", 1, "max_cost"),
        ("max_cost: {dollars: 1, tokens: 5}\n", "rule 'max_cost': expected {dollars, input_tokens, output_tokens}", 1, "max_cost"),
        ("needs_person: []\n", "rule 'needs_person': expected one or more tool names", 1, "needs_person"),
        (
            "order:\n  - {before: backup_*, then: deploy_*}\n  - {before: backup_*}\n",
            "rule 'order': each entry is {before: PATTERN, then: PATTERN}",
            3,
            "order",
        ),
        ("forbid:\n  - rm_*\n  - 7\n", "rule 'forbid': expected tool names or glob patterns", 3, "forbid"),
        ("risk: severe\n", "rule 'risk': expected true, false or risk levels", 1, "risk"),
        ("on_revision: sometimes\n", "rule 'on_revision': must be 'changes' or 'plan'", 1, "on_revision"),
        ("max_steps: 3\nforbid: [a]\nmax_steps: 4\n", "rule 'max_steps' appears twice (first at line 1)", 3, "max_steps"),
        ("- max_steps: 3\n", "a policy file is a mapping of rules", 1, None),
    ],
)
def test_a_bad_rule_file_names_the_file_line_and_rule(tmp_path: Path, text: str, message: str, line: int, rule: str | None) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as exc:
        load_policies([str(path)])
    assert str(exc.value).startswith(f"{path}:{line}: ")
    assert message in str(exc.value)
    assert (exc.value.path, exc.value.line, exc.value.rule) == (path, line, rule)


def test_a_missing_rule_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="policy file '.*nowhere.yaml' does not exist"):
        load_policies([str(tmp_path / "nowhere.yaml")])


def test_an_empty_rule_file_has_no_policies(tmp_path: Path) -> None:
    (tmp_path / "policies.yaml").write_text("# nothing yet\n")
    assert len(load_policies([str(tmp_path / "policies.yaml")])) == 0


# --- combining ---------------------------------------------------------------------------------


def fixed(decision: str, name: str, *steps: str) -> FunctionPolicy:
    return FunctionPolicy(
        lambda plan: PolicyVerdict(decision=decision, policy=name, reasons=[f"{name} says {decision}"], steps=list(steps)), name=name
    )  # type: ignore[arg-type]


def test_any_reject_rejects_then_any_escalate_escalates_else_approve_and_every_verdict_is_kept() -> None:
    ok, ask, no = fixed("approve", "ok"), fixed("escalate", "ask", "deploy"), fixed("reject", "no", "backup")
    assert review_plan(DEPLOY, [ok, ok.__class__(ok.fn, name="ok2")]).decision == "approve"
    escalated = review_plan(DEPLOY, [ok, ask])
    assert (
        escalated.decision == "escalate" and escalated.steps == ["deploy"] and escalated.reasons("escalate") == ["ask: ask says escalate"]
    )
    rejected = review_plan(DEPLOY, [ask, no, ok])
    assert rejected.decision == "reject" and rejected.steps == ["backup"]
    assert [v.policy for v in rejected.verdicts] == ["ask", "no", "ok"]
    assert review_plan(DEPLOY, []).decision == "approve"


def test_verdicts_and_reviews_have_a_stable_json_form() -> None:
    review = review_plan(DEPLOY, [MaxSteps(2), fixed("escalate", "ask", "deploy")])
    data = json.loads(review.to_json())
    assert data["decision"] == "reject" and data["plan_hash"] == DEPLOY.content_hash and data["plan_version"] == 1
    assert data["verdicts"][0] == {
        "decision": "reject",
        "policy": "max_steps",
        "reasons": ["the plan has 3 steps, more than max_steps 2 (over the limit: deploy)"],
        "steps": ["deploy"],
        "scope": "plan",
    }
    assert Review.from_json(review.to_json()) == review
