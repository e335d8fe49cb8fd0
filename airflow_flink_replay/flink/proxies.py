"""Side-effect policy at the resource boundary: proxies around an agent plan's resources, plus audit.

Every chat model, tool, vector store and embedding model an agent uses is a *resource provider* in the
agent plan; the runtime (``AgentPlan.get_resource``, the per-TaskManager resource cache) builds resources
from those providers. :func:`rewrite_plan_resources` replaces each provider with one that builds a proxy:

- Python tools (``FunctionTool``) → :class:`ToolPolicyProxy` (a ``FunctionTool`` subclass: same metadata,
  so chat models bind it unchanged);
- Python chat model setups, vector stores, embedding models → :class:`ChatModelPolicyProxy`,
  :class:`VectorStorePolicyProxy`, :class:`EmbeddingModelPolicyProxy`, which build the original resource
  from its original class + arguments and forward every public method through the policy.

For each attempted call the proxy asks the :class:`~airflow_flink_replay.core.policy.ReplayPolicy`:
``allow`` calls through, ``record`` returns the declared stand-in without calling, ``block`` raises
:class:`ReplayPolicyBlocked` naming the resource. Every attempt writes one
:class:`~airflow_flink_replay.core.audit.AuditRecord` to the audit target
(:mod:`~airflow_flink_replay.flink.audit_sink`: the variant's audit topic, or
``<audit_dir>/audit-<variant>-<pid>.jsonl``).

Java resources (``JavaResourceProvider``) and MCP tools are left as they are (logged). Calls an action makes
outside the framework (raw HTTP, files, processes) are not mediated: the unmediated-call guard
(:mod:`airflow_flink_replay.flink.unmediated`) audits them and applies the policy's ``unmediated`` decision.

Durable execution identity is preserved: the guarded callables carry the wrapped method's
``__module__``/``__qualname__``, so Flink Agents' call-result cache keys do not change.
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import threading
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.resource import Resource, ResourceDescriptor, ResourceType
from flink_agents.api.vector_stores.vector_store import Collection, Document, VectorStoreQueryResult
from flink_agents.plan.function import PythonFunction
from flink_agents.plan.resource_provider import PythonResourceProvider, PythonSerializableResourceProvider
from flink_agents.plan.tools.function_tool import FunctionTool
from pydantic import BaseModel, PrivateAttr

from airflow_flink_replay.core.audit import REPLAY_NAMESPACE, AuditRecord
from airflow_flink_replay.core.call_match import CallArguments, MatchRule
from airflow_flink_replay.core.cassette import (
    Cassette,
    CassetteMatch,
    CassetteRecording,
    ResultRefused,
    declared_result_types,
    decode_result,
)
from airflow_flink_replay.core.policy import CallMatch, Decision, ReplayPolicy
from airflow_flink_replay.exceptions import ReplayPolicyBlocked
from airflow_flink_replay.flink import unmediated
from airflow_flink_replay.flink.audit_context import MARKER_CONFIG_KEY, current_key, marker_entry
from airflow_flink_replay.flink.audit_sink import is_folder, write_audit
from airflow_flink_replay.flink.cassette_io import load_cassette, recorder_for

_log = logging.getLogger(__name__)

#: ``afr_mode`` of production's proxies (recording), as opposed to a replay's (``replay``).
PRODUCTION_MODE = "production"
#: A replay's cassette is shared by the task's threads (the action and its async pool).
_CASSETTE_LOCK = threading.Lock()
#: Result types every replay may rebuild a served result as: what Flink Agents' own resources return (a chat
#: model's message, a vector store's query result, documents and collections), whatever a resource declares.
BUILTIN_RESULT_TYPES: Mapping[str, type[BaseModel]] = declared_result_types(
    ChatMessage | VectorStoreQueryResult | list[Document] | list[Collection]
)
#: What a served result of one call may be rebuilt as (see :func:`declared_result_types_of`).
ResultTypes = Callable[[], Mapping[str, type[BaseModel]]]

__all__ = [
    "ChatModelPolicyProxy",
    "EmbeddingModelPolicyProxy",
    "ReplayPolicyBlocked",
    "ToolPolicyProxy",
    "VectorStorePolicyProxy",
    "guarded_call",
    "record_plan_resources",
    "recorded_call",
    "rewrite_plan_resources",
]


@functools.lru_cache(maxsize=32)
def _policy(policy_json: str) -> ReplayPolicy:
    return ReplayPolicy.model_validate_json(policy_json) if policy_json else ReplayPolicy()


def guarded_call(
    *,
    policy: ReplayPolicy,
    variant: str,
    audit_dir: str,
    resource_type: str,
    resource_name: str,
    method: str,
    key: str,
    call: Any,
    args: tuple,
    kwargs: dict,
    to_result: Any = None,
    replace: dict[str, str] | None = None,
    cassette: Cassette | None = None,
    result_types: ResultTypes | None = None,
    stage: str = "",
) -> Any:
    """Apply ``policy`` to one call and audit it (``stage``: the pipeline stage whose agent calls, named in the
    audit record) (see the module docstring); ``replace`` names the strings the
    audit reads as placeholders (the replay's own namespace), so variants' audits compare call for call;
    ``cassette``: production's recorded calls, served to ``replay`` decisions (an unmatched one gets the
    policy's fallback decision, audited with it). A resource the candidate changed (``policy.changed``) is never
    served them (:meth:`ReplayPolicy.decide`); its calls are audited with ``changed``. A served call is audited
    with how it matched (``matched``, ``similarity``), and every call of a resource with free-text arguments with
    the digest of its identifying ones (:func:`_call_arguments`). ``result_types``: what a served result may be
    rebuilt as (:func:`_serve`; default :data:`BUILTIN_RESULT_TYPES`)."""
    decision = policy.decide(resource_type, resource_name, method, cassette=cassette is not None)
    fallback: Decision | None = None
    changed = policy.is_changed(resource_name)  # the candidate changed it: never replayed, audited as such
    arguments, matching = _call_arguments(policy, cassette, resource_name, method, args, kwargs, replace,
                                          replay=decision == Decision.REPLAY)
    refused: str | None = None  # why the recorded call that matched could not be served

    def audit(outcome: str, error: str | None = None) -> None:
        write_audit(
            audit_dir,
            AuditRecord.for_call(
                variant=variant, key=key, resource_type=resource_type, resource_name=resource_name, method=method,
                args=args, kwargs=kwargs, decision=decision.value,
                outcome=outcome,
                error="; ".join(e for e in (refused, error) if e) or None,
                replace=replace,
                fallback=fallback.value if fallback is not None else None,
                changed=changed,
                stage=stage,
                **matching,
            ),
        )

    applied = decision
    if decision == Decision.REPLAY:
        assert cassette is not None  # decide() gives replay only with a cassette
        found, result, refused = _serve(cassette, policy.call_match_for(resource_name, method), resource_name,
                                        method, key, arguments or CallArguments.of(args, kwargs, replace),
                                        result_types)
        if found is not None:
            matching.update(matched=found.matched, similarity=found.similarity)
            audit("replayed")
            return result
        applied = fallback = policy.fallback(resource_type, resource_name, method)
    if applied == Decision.ALLOW:
        try:
            with unmediated.mediated():  # what the resource does is its own call, not an unmediated one
                result = call(*args, **kwargs)
        except Exception as exc:
            audit("error", f"{type(exc).__name__}: {exc}")
            raise
        audit("ok")
        return result
    if applied == Decision.RECORD:
        audit("recorded")
        stand_in = policy.stand_in(resource_type, resource_name, method)
        return to_result(stand_in) if to_result else stand_in
    message = (
        f"replay policy blocks {resource_type} '{resource_name}' (method {method}); "
        f"set the policy for '{resource_name}' to allow or record to let the replay continue"
    )
    audit("blocked", message)
    raise ReplayPolicyBlocked(message)


def _serve(
    cassette: Cassette,
    declared: CallMatch | None,
    resource_name: str,
    method: str,
    key: str,
    arguments: CallArguments,
    result_types: ResultTypes | None,
) -> tuple[CassetteMatch | None, Any, str | None]:
    """The recorded call served to a ``replay`` decision and its result, rebuilt as a declared result type; else
    ``(None, None, why)``: no recorded call matches (``why`` None), or the one that does names a type not
    declared (:class:`ResultRefused`: the call counts as unmatched, the recorded call stays used up)."""
    with _CASSETTE_LOCK:
        found = cassette.match(resource_name, method, key, arguments, declared)
    if found is None:
        return None, None, None
    try:
        types = result_types() if result_types is not None else BUILTIN_RESULT_TYPES
        return found, decode_result(found.entry.result, found.entry.codec, types), None
    except ResultRefused as exc:
        with _CASSETTE_LOCK:
            cassette.refuse(found)
        return None, None, f"result_refused: {exc}"


def declared_result_types_of(proxy: Any, method: str) -> Mapping[str, type[BaseModel]]:
    """What a served result of ``proxy.method`` may be rebuilt as: :data:`BUILTIN_RESULT_TYPES` and the result
    types the job's code declares for it — the return annotation of a tool's function, or of the resource class's
    method (:func:`~airflow_flink_replay.core.cassette.declared_result_types`). Read from the plan's own classes
    and functions (imported by the names the plan gives, never by a cassette record's)."""
    if isinstance(proxy, ToolPolicyProxy):
        func = proxy.func
        target = _plan_function(func.module, func.qualname) if isinstance(func, PythonFunction) else None
    else:
        target = getattr(type(proxy.inner()), method, None)
    try:
        returns = typing.get_type_hints(target).get("return") if callable(target) else None
    except Exception:  # an annotation that does not resolve declares nothing
        returns = None
    return {**BUILTIN_RESULT_TYPES, **declared_result_types(returns)}


def _plan_function(module: str, qualname: str) -> Any:
    """The plan's function ``module:qualname`` (a tool's), or ``None`` when it does not resolve."""
    try:
        with unmediated.mediated():  # importing the job's own module is its own business, as in inner()
            found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return found


def _call_arguments(
    policy: ReplayPolicy,
    cassette: Cassette | None,
    resource_name: str,
    method: str,
    args: tuple,
    kwargs: dict,
    replace: dict[str, str] | None,
    *,
    replay: bool,
) -> tuple[CallArguments | None, dict[str, Any]]:
    """The call's arguments one by one, when a ``replay`` decision matches them or the resource has free-text
    arguments (declared in ``policy.call_match``, else inferred from the cassette), and the audit fields that
    follow: ``identity_digest`` for a resource with free text — every variant computes it alike, so the comparison
    tells a changed id from a reworded reason. Other calls (a chat model's prompt) are not taken apart."""
    declared = policy.call_match_for(resource_name, method)
    rule: MatchRule | None
    if cassette is not None:
        with _CASSETTE_LOCK:
            rule = cassette.rule(resource_name, method, declared)
    else:
        rule = MatchRule.declared(declared) if declared is not None else None
    free_text = rule is not None and rule.has_free_text
    if not (replay or free_text):
        return None, {}
    arguments = CallArguments.of(args, kwargs, replace)
    return arguments, ({"identity_digest": rule.identity_digest(arguments)} if rule is not None and free_text else {})


def recorded_call(
    *,
    recording: str,
    resource_type: str,
    resource_name: str,
    method: str,
    key: str,
    call: Any,
    args: tuple,
    kwargs: dict,
) -> Any:
    """Production's side: make the call as always and, when the recording selects it, write it (result or
    error) to the cassette topic."""
    recorder = recorder_for(recording)
    if not recorder.records(resource_type, resource_name, method):
        return call(*args, **kwargs)
    fields: dict[str, Any] = {"resource_type": resource_type, "resource_name": resource_name, "method": method,
                              "key": key, "args": args, "kwargs": kwargs}
    try:
        result = call(*args, **kwargs)
    except Exception as exc:
        recorder.record(**fields, error=exc)
        raise
    recorder.record(**fields, result=result)
    return result


def _dispatch(proxy: Any, resource_type: str, method: str, key: str, call: Any, args: tuple, kwargs: dict,
              to_result: Any = None) -> Any:
    """A proxied call: recorded in production (``afr_mode`` ``production``), governed in a replay."""
    if proxy.afr_mode == PRODUCTION_MODE:
        return recorded_call(recording=proxy.afr_cassette, resource_type=resource_type,
                             resource_name=proxy.afr_resource_name, method=method, key=key, call=call, args=args,
                             kwargs=kwargs)
    return guarded_call(
        policy=_policy(proxy.afr_policy),
        variant=proxy.afr_variant,
        audit_dir=proxy.afr_audit_dir,
        resource_type=resource_type,
        resource_name=proxy.afr_resource_name,
        method=method,
        key=key,
        call=call,
        args=args,
        kwargs=kwargs,
        to_result=to_result,
        replace=proxy.afr_replace,
        cassette=load_cassette(proxy.afr_cassette) if proxy.afr_cassette else None,
        result_types=lambda: declared_result_types_of(proxy, method),
        stage=proxy.afr_stage,
    )


def _chat_stand_in(value: Any) -> ChatMessage:
    content = value if isinstance(value, str) else json.dumps(value)
    return ChatMessage(role=MessageRole.ASSISTANT, content=content)


# --------------------------------------------------------------------------------------------- proxies
class ToolPolicyProxy(FunctionTool):
    """A ``FunctionTool`` whose ``call`` goes through the replay policy."""

    afr_resource_name: str
    afr_variant: str
    afr_audit_dir: str
    afr_policy: str = ""
    afr_replace: dict[str, str] = {}
    #: ``replay`` (governed by the policy) or ``production`` (called through, recorded to the cassette)
    afr_mode: str = "replay"
    #: replay: the CassetteWindow JSON to serve from ('' = none); production: the CassetteRecording JSON
    afr_cassette: str = ""
    #: the pipeline stage whose agent holds the resource ('' = a job of one agent), named in audit records
    afr_stage: str = ""

    @property
    def call(self) -> Any:  # type: ignore[override]
        """The guarded call, bound to the key of the action that looks it up."""
        key = current_key()
        inner = super().call

        def call(*args: Any, **kwargs: Any) -> Any:
            return _dispatch(self, "tool", "call", key, inner, args, kwargs)

        call.__module__ = FunctionTool.call.__module__
        call.__qualname__ = FunctionTool.call.__qualname__
        return call


class _ResourcePolicyProxy(Resource):
    """Builds the original resource and forwards its public methods through the policy."""

    kind: ClassVar[ResourceType]
    inner_module: str
    inner_clazz: str
    inner_arguments: dict[str, Any] = {}
    afr_resource_name: str
    afr_variant: str
    afr_audit_dir: str
    afr_policy: str = ""
    afr_replace: dict[str, str] = {}
    #: ``replay`` (governed by the policy) or ``production`` (called through, recorded to the cassette)
    afr_mode: str = "replay"
    #: replay: the CassetteWindow JSON to serve from ('' = none); production: the CassetteRecording JSON
    afr_cassette: str = ""
    #: the pipeline stage whose agent holds the resource ('' = a job of one agent), named in audit records
    afr_stage: str = ""
    _inner: Any = PrivateAttr(default=None)

    @classmethod
    def resource_type(cls) -> ResourceType:
        """The proxied resource's type."""
        return cls.kind

    def inner(self) -> Resource:
        """The real resource (built on first use from its original class and arguments)."""
        if self._inner is None:
            import importlib

            with unmediated.mediated():  # importing and building the resource (its clients) is its own business
                cls = getattr(importlib.import_module(self.inner_module), self.inner_clazz)
                self._inner = cls(**self.inner_arguments, get_resource=self.get_resource)
            if self.metric_group is not None:
                self._inner.set_metric_group(self.metric_group)
        return self._inner

    def set_metric_group(self, metric_group: Any) -> None:
        """Bind the metric group to the proxy and the real resource."""
        super().set_metric_group(metric_group)
        if self._inner is not None:
            self._inner.set_metric_group(metric_group)

    def close(self) -> None:
        """Close the real resource."""
        if self._inner is not None:
            self._inner.close()

    def _to_result(self, method: str) -> Any:
        return None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in type(self).__private_attributes__:
            return super().__getattr__(name)  # type: ignore[misc]
        target = getattr(self.inner(), name)
        if name.startswith("_") or not callable(target):
            return target
        key = current_key()

        def call(*args: Any, **kwargs: Any) -> Any:
            return _dispatch(self, self.kind.value, name, key, target, args, kwargs, self._to_result(name))

        call.__module__ = getattr(target, "__module__", None) or self.inner_module
        call.__qualname__ = getattr(target, "__qualname__", f"{self.inner_clazz}.{name}")
        return call


class ChatModelPolicyProxy(_ResourcePolicyProxy):
    """Proxy of a chat model setup (``chat``); a recorded chat returns the stand-in as assistant message."""

    kind: ClassVar[ResourceType] = ResourceType.CHAT_MODEL

    def _to_result(self, method: str) -> Any:
        return _chat_stand_in if method == "chat" else None


class VectorStorePolicyProxy(_ResourcePolicyProxy):
    """Proxy of a vector store (reads and writes told apart by method name, see ReplayPolicy.read_methods)."""

    kind: ClassVar[ResourceType] = ResourceType.VECTOR_STORE


class EmbeddingModelPolicyProxy(_ResourcePolicyProxy):
    """Proxy of an embedding model setup."""

    kind: ClassVar[ResourceType] = ResourceType.EMBEDDING_MODEL


_PROXY_FOR: dict[ResourceType, type[_ResourcePolicyProxy]] = {
    ResourceType.CHAT_MODEL: ChatModelPolicyProxy,
    ResourceType.VECTOR_STORE: VectorStorePolicyProxy,
    ResourceType.EMBEDDING_MODEL: EmbeddingModelPolicyProxy,
}


# --------------------------------------------------------------------------------------------- plan rewrite
def rewrite_plan_resources(
    plan: Any,
    policy: ReplayPolicy,
    variant: str,
    audit_dir: str,
    key_field: str = "",
    namespace: str = "",
    cassette: str = "",
    key_selector: Any = None,
    stage: str = "",
) -> dict[str, list[str]]:
    """Wrap every governed resource provider of ``plan`` (an ``AgentPlan``) in a policy proxy, in place.

    Also marks every action's config with a ``KeyHookMarker`` so the TaskManager installs the key hook
    (:mod:`airflow_flink_replay.flink.audit_context`) when it loads the plan; ``key_selector`` (the job
    definition's, shipped pickled) or else ``key_field`` (the input field that is the agent key) lets audit
    records name the key text (:func:`~airflow_flink_replay.flink.agent_job.audit_key_source` gives both);
    ``namespace`` (the replay's job
    identifier, its own Mem0 ``user_id``) reads as ``<replay-namespace>`` in audited arguments; ``cassette``
    (a :class:`~airflow_flink_replay.core.cassette.CassetteWindow` as JSON) is production's recorded calls the
    ``replay`` decisions are served from; ``stage``: the pipeline stage of the plan's agent (audit records name
    it; '' for a job of one agent). Returns what was wrapped and what was left unmediated, per resource type.
    """
    if is_folder(audit_dir):
        Path(audit_dir).mkdir(parents=True, exist_ok=True)
    common = {
        "afr_variant": variant,
        "afr_audit_dir": str(audit_dir),
        "afr_policy": policy.model_dump_json(),
        "afr_replace": {namespace: REPLAY_NAMESPACE} if namespace else {},
        "afr_cassette": cassette,
        "afr_stage": stage,
    }
    report = _wrap_resources(plan, common, lambda rtype, name: True)
    _mark_actions(plan, key_field, key_selector)
    return report


def record_plan_resources(
    plan: Any, recording: CassetteRecording, key_field: str = "", key_selector: Any = None
) -> dict[str, list[str]]:
    """Production's side: wrap the resources ``recording`` may select in recording proxies, in place — every
    call goes through unchanged, the selected ones are written to the cassette topic too (with the agent key,
    hence the ``KeyHookMarker`` on every action, learning keys as in a replay: ``key_field``/``key_selector``
    as for :func:`rewrite_plan_resources`). Returns what was wrapped."""
    common = {
        "afr_variant": PRODUCTION_MODE,
        "afr_audit_dir": "",
        "afr_mode": PRODUCTION_MODE,
        "afr_cassette": recording.model_dump_json(),
        "afr_replace": {},
    }
    selectors = set(recording.record)

    def selected(rtype: ResourceType, name: str) -> bool:
        typed = {rtype.value, name} | ({"vector_store.read"} if rtype == ResourceType.VECTOR_STORE else set())
        return bool(typed & selectors) or any(s.startswith(f"{name}.") for s in selectors)

    report = _wrap_resources(plan, common, selected)
    _mark_actions(plan, key_field, key_selector)
    return report


def _wrap_resources(plan: Any, common: dict, selected: Any) -> dict[str, list[str]]:
    report: dict[str, list[str]] = {"wrapped": [], "unmediated": []}
    providers = plan.resource_providers or {}
    for rtype in (ResourceType.TOOL, ResourceType.CHAT_MODEL, ResourceType.VECTOR_STORE, ResourceType.EMBEDDING_MODEL):
        for name, provider in list(providers.get(rtype, {}).items()):
            if not selected(rtype, name):
                continue
            new = _wrap_provider(rtype, name, provider, plan, common)
            if new is None:
                report["unmediated"].append(f"{rtype.value}:{name}")
                _log.warning("replay policy cannot mediate %s %r (%s)", rtype.value, name, type(provider).__name__)
                continue
            providers[rtype][name] = new
            report["wrapped"].append(f"{rtype.value}:{name}")
    return report


def _mark_actions(plan: Any, key_field: str, key_selector: Any = None) -> None:
    """Put the key hook's marker (:func:`~airflow_flink_replay.flink.audit_context.marker_entry`) into every
    action's config: production and a replay learn keys alike, so their cassette entries and calls match."""
    entry = marker_entry(key_field, key_selector)
    for name, act in list(plan.actions.items()):
        config = dict(act.config or {})
        config[MARKER_CONFIG_KEY] = entry
        plan.actions[name] = act.model_copy(update={"config": config})


def _wrap_provider(rtype: ResourceType, name: str, provider: Any, plan: Any, common: dict) -> Any | None:
    if rtype == ResourceType.TOOL:
        if not isinstance(provider, PythonSerializableResourceProvider):
            return None
        if (provider.module, provider.clazz) == (ToolPolicyProxy.__module__, ToolPolicyProxy.__name__):
            return provider
        if provider.clazz != "FunctionTool":
            return None
        serialized = dict(provider.serialized, afr_resource_name=name, **common)
        return PythonSerializableResourceProvider(
            name=name,
            type=rtype,
            module=ToolPolicyProxy.__module__,
            clazz=ToolPolicyProxy.__name__,
            serialized=serialized,
        )
    if not isinstance(provider, PythonResourceProvider):
        return None
    desc = provider.descriptor
    proxy_cls = _PROXY_FOR[rtype]
    if desc.target_clazz == proxy_cls.__name__:
        return provider
    inner_args: dict[str, Any] = {}
    if plan.config is not None:
        inner_args.update(plan.config.get_config_data_by_prefix(desc.target_clazz))
    inner_args.update(desc.arguments)
    return PythonResourceProvider(
        name=name,
        type=rtype,
        descriptor=ResourceDescriptor(
            clazz=f"{proxy_cls.__module__}.{proxy_cls.__name__}",
            inner_module=desc.target_module,
            inner_clazz=desc.target_clazz,
            inner_arguments=inner_args,
            afr_resource_name=name,
            **common,
        ),
    )
