"""Which policies a project uses: registered in code, loaded from Python modules and from a YAML rule file.

Owns `PolicySet` (policies by name; ``@policies.policy`` registers a
function, `load_module` a module's policies the way ``--tools`` loads
tools, `load_file` a YAML rule file, `load` either by the file's name),
`load_policies` and the rule file's format::

    max_steps: 10
    max_cost: 0.50                  # or {dollars: 0.5, input_tokens: 4000, output_tokens: 1000}
    needs_person: ["deploy_*"]
    order: [{before: "backup_*", then: "deploy_*"}]
    forbid: ["rm_*"]
    grants: {read_only: false, forbid: ["run_python"], bounds: {write_file: {path: {paths: ["out/*"]}}}}
    windows: {"deploy_*": "Sat 02:00-04:00 America/New_York"}   # these tools run only in these windows (or a list)
    risk: [high, critical]          # or true (high, critical), or false
    on_revision: changes            # after a replan: only new or changed steps (or: plan)
    modules: ["my_policies.py"]     # Python policies, beside this file

A file that is not YAML, an unknown or repeated rule, or a value a rule
rejects is a `PolicyError` naming the file, the line and the rule.
Imports `policies`, `policy_rules`, `registry` (module loading) and `errors`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from planexec.errors import PolicyError, RegistryError
from planexec.governance.policies import FunctionPolicy, Policy, PolicyContext, Review, review_plan
from planexec.governance.rules import (
    RISK_ORDER,
    ForbidTools,
    LimitGrants,
    MaxEstimatedCost,
    MaxSteps,
    RequiresOrder,
    RequireWindows,
    RiskEscalation,
    ToolsNeedPerson,
)
from planexec.plan.model import Plan
from planexec.workers.registry import import_spec

__all__ = ["RULES", "PolicySet", "load_policies"]

RULES = ("max_steps", "max_cost", "needs_person", "order", "forbid", "grants", "windows", "risk", "on_revision", "modules")
_YAML_SUFFIXES = (".yaml", ".yml")


class PolicySet:
    """Named policies, reviewed in the order they were added; iterable, so it can go to `review_plan`."""

    def __init__(self, policies: Iterable[Policy] = ()) -> None:
        self.policies: dict[str, Policy] = {}
        self.loaded: list[str] = []
        for p in policies:
            self.add(p)

    def __iter__(self) -> Iterator[Policy]:
        return iter(list(self.policies.values()))

    def __len__(self) -> int:
        return len(self.policies)

    def __repr__(self) -> str:
        return f"PolicySet({list(self.policies)})"

    def add(self, policy: Policy, *, replace: bool = False) -> Policy:
        """Add a policy under its name; `PolicyError` when another has that name (unless `replace`)."""
        if not isinstance(policy, Policy):
            raise PolicyError(f"{policy!r} is not a policy: it needs a `name` and a `review(plan, context)` method")
        known = self.policies.get(policy.name)
        if known is not None and known is not policy and not replace:
            raise PolicyError(f"a policy named {policy.name!r} is already registered", rule=policy.name)
        self.policies[policy.name] = policy
        return policy

    def policy(self, fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
        """Register a function as a policy (decorator, bare or with a name); returns the `FunctionPolicy`."""

        def wrap(f: Callable[..., Any]) -> FunctionPolicy:
            p = f if isinstance(f, FunctionPolicy) else FunctionPolicy(f, name=name)
            self.add(p)
            return p

        return wrap(fn) if fn is not None else wrap

    def review(self, plan: Plan, context: PolicyContext | None = None) -> Review:
        """Every policy's verdict on `plan` (see `review_plan`)."""
        return review_plan(plan, self, context)

    # --- loading ---------------------------------------------------------

    def load(self, spec: str) -> None:
        """Load a YAML rule file (``.yaml``/``.yml``) or a Python module (dotted name or ``.py`` path)."""
        if spec.lower().endswith(_YAML_SUFFIXES):
            self.load_file(Path(spec))
        else:
            self.load_module(spec)

    def load_module(self, spec: str) -> None:
        """Load a module's policies: its ``register_policies(policy_set)`` hook, if any, and its
        module-level policies (functions decorated with `policy`, instances such as ``MaxSteps(5)``)."""
        try:
            module = import_spec(spec, what="policy")
        except RegistryError as exc:
            raise PolicyError(str(exc), path=Path(spec) if spec.endswith(".py") else None) from exc
        hook = getattr(module, "register_policies", None)
        if callable(hook) and not isinstance(hook, FunctionPolicy):
            try:
                hook(self)
            except PolicyError:
                raise
            except Exception as exc:
                raise PolicyError(f"policy module {spec!r}: register_policies failed: {type(exc).__name__}: {exc}") from exc
        for value in list(vars(module).values()):
            if not isinstance(value, type) and isinstance(value, Policy) and self.policies.get(value.name) is not value:
                self.add(value)
        self.loaded.append(f"module {spec}")

    def load_file(self, path: str | Path) -> None:
        """Load a YAML rule file (see the module docstring); `PolicyError` names the file, line and rule."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise PolicyError(f"policy file {str(path)!r} does not exist", path=path) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyError(f"{path}: cannot read: {exc}", path=path) from None
        for _rule, policy_ in _parse_rules(text, path):
            if isinstance(policy_, str):  # a Python module named by `modules`
                self.load_module(policy_)
                continue
            if policy_.name in self.policies:  # the same rule in two files: both apply, told apart by file
                policy_.name = f"{policy_.name} ({path.name})"
            self.add(policy_)
        self.loaded.append(f"file {path}")


def load_policies(specs: Iterable[str]) -> PolicySet:
    """A `PolicySet` with each YAML file or Python module loaded (a spec given twice loads once)."""
    policies = PolicySet()
    seen: set[str] = set()
    for spec in specs:
        key = str(Path(spec).resolve()) if spec.lower().endswith((*_YAML_SUFFIXES, ".py")) else spec
        if key not in seen:
            seen.add(key)
            policies.load(spec)
    return policies


# --- the YAML rule file ---------------------------------------------------------------


class _RuleError(ValueError):
    """A value a rule rejects; `node` points at the offending item when it is not the whole value."""

    def __init__(self, message: str, node: yaml.Node | None = None) -> None:
        self.node = node
        super().__init__(message)


def _where(path: Path, line: int | None) -> str:
    return f"{path}:{line}" if line else str(path)


def _parse_rules(text: str, path: Path) -> list[tuple[str, Any]]:
    """(rule, policy or module spec) for each rule of the file, in file order."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise PolicyError(f"{_where(path, line)}: not valid YAML: {problem}", path=path, line=line) from None
    if root is None:
        return []
    if not isinstance(root, yaml.MappingNode) or not isinstance(data, dict):
        line = root.start_mark.line + 1
        raise PolicyError(f"{_where(path, line)}: a policy file is a mapping of rules (max_steps: 10, ...)", path=path, line=line)
    lines: dict[str, int] = {}
    nodes: dict[str, yaml.Node] = {}
    for key_node, value_node in root.value:
        key, line = str(key_node.value), key_node.start_mark.line + 1
        if key in lines:
            msg = f"rule {key!r} appears twice (first at line {lines[key]})"
            raise PolicyError(f"{_where(path, line)}: {msg}", path=path, line=line, rule=key)
        if key not in RULES:
            msg = f"unknown rule {key!r} (known rules: {', '.join(RULES)})"
            raise PolicyError(f"{_where(path, line)}: {msg}", path=path, line=line, rule=key)
        lines[key], nodes[key] = line, value_node
    on_revision = data.get("on_revision", "changes")
    if on_revision not in ("changes", "plan"):
        _raise(path, "on_revision", lines, _RuleError(f"must be 'changes' or 'plan', got {on_revision!r}"))
    out: list[tuple[str, Any]] = []
    for key in lines:
        if key == "on_revision":
            continue
        try:
            out += [(key, p) for p in _build(key, data[key], nodes[key], on_revision, path)]
        except (_RuleError, ValueError) as exc:
            _raise(path, key, lines, exc)
    return out


def _raise(path: Path, rule: str, lines: dict[str, int], exc: Exception) -> None:
    node = getattr(exc, "node", None)
    line = node.start_mark.line + 1 if node is not None else lines[rule]
    raise PolicyError(f"{_where(path, line)}: rule {rule!r}: {exc}", path=path, line=line, rule=rule) from None


def _items(value: Any, node: yaml.Node) -> list[tuple[Any, yaml.Node]]:
    """A value that may be one item or a list of them, with each item's node."""
    if isinstance(value, list) and isinstance(node, yaml.SequenceNode):
        return list(zip(value, node.value))
    return [(value, node)]


def _names(value: Any, node: yaml.Node) -> list[str]:
    items = _items(value, node)
    for item, item_node in items:
        if not isinstance(item, str) or not item:
            raise _RuleError(f'expected tool names or glob patterns like "deploy_*", got {item!r}', item_node)
    if not items or value == []:
        raise _RuleError("expected one or more tool names or glob patterns, got an empty list", node)
    return [item for item, _ in items]


def _number(value: Any, what: str, node: yaml.Node, *, whole: bool = False) -> Any:
    kinds = (int,) if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value < 0:
        raise _RuleError(f"{what} must be {'a whole number' if whole else 'a number'} of at least 0, got {value!r}", node)
    return value


def _build(rule: str, value: Any, node: yaml.Node, on_revision: Any, path: Path) -> list[Any]:
    """The policies (or module specs, for `modules`) one rule of the file makes."""
    if rule == "max_steps":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _RuleError(f"expected a whole number of steps of at least 1, got {value!r}")
        return [MaxSteps(value)]
    if rule == "max_cost":
        if isinstance(value, dict):
            extra = sorted(set(value) - {"dollars", "input_tokens", "output_tokens"})
            if extra or "dollars" not in value:
                raise _RuleError(f"expected {{dollars, input_tokens, output_tokens}}, got keys {sorted(value)}")
            tokens = {k: _number(value[k], k, node, whole=True) for k in ("input_tokens", "output_tokens") if k in value}
            return [MaxEstimatedCost(_number(value["dollars"], "dollars", node), **tokens)]
        return [MaxEstimatedCost(_number(value, "max_cost (US dollars)", node))]
    if rule == "needs_person":
        return [ToolsNeedPerson(_names(value, node), on_revision=on_revision)]
    if rule == "forbid":
        return [ForbidTools(_names(value, node))]
    if rule == "grants":
        if not isinstance(value, dict) or set(value) - {"read_only", "forbid", "bounds"}:
            raise _RuleError(f"expected {{read_only, forbid, bounds}}, got {value!r}")
        try:
            return [
                LimitGrants(
                    value.get("bounds") or {},
                    forbid=_names(value["forbid"], node) if "forbid" in value else (),
                    read_only=bool(value.get("read_only", False)),
                )
            ]
        except (ValueError, TypeError, AttributeError) as exc:
            raise _RuleError(f"a bound is not valid: {exc}") from None
    if rule == "order":
        out = []
        for item, item_node in _items(value, node):
            if not isinstance(item, dict) or set(item) != {"before", "then"}:
                raise _RuleError(f"each entry is {{before: PATTERN, then: PATTERN}}, got {item!r}", item_node)
            out.append(RequiresOrder(before=_names(item["before"], item_node), then=_names(item["then"], item_node)))
        return out
    if rule == "windows":
        if not isinstance(value, dict) or not value:
            raise _RuleError(f'expected {{TOOL_PATTERN: "DAYS HH:MM-HH:MM ZONE" (or a list)}}, got {value!r}')
        try:
            return [RequireWindows(value)]
        except ValueError as exc:
            raise _RuleError(str(exc)) from None
    if rule == "risk":
        if value is False:
            return []
        levels = ("high", "critical") if value is True else [lv for lv, _ in _items(value, node)]
        if not levels or any(lv not in RISK_ORDER for lv in levels):
            raise _RuleError(f"expected true, false or risk levels from {', '.join(RISK_ORDER)}, got {value!r}")
        return [RiskEscalation(levels, on_revision=on_revision)]
    # modules: Python policy modules; a relative .py path is the file's neighbour
    return [str(path.parent / m) if m.endswith(".py") and not Path(m).is_absolute() else m for m in _names(value, node)]
