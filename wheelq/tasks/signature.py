"""Tasks that follow tasks (docs/guides/workflows.md): a `Signature` is a task call with its
arguments checked and encoded, not enqueued (``f.s(...)``); ``a.then(b, delay=...)`` makes a
`Chain` whose links each follow the one before (`Client.enqueue(..., after=...)`),
`App.flow` a join (`Client.enqueue_flow`), and a `Flow` one join inside another. In eager
mode the links and children run inline, in order, and a link whose predecessor failed runs
only under ``on_parent_failure="run"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from wheelq.core.due import Delay
from wheelq.core.follow import JobRef, OnChildFailure, OnFailure, on_failure, policy_of
from wheelq.core.history import JobState
from wheelq.core.options import FlowSpec, JobSpec
from wheelq.errors import InvalidArgumentError, JobFailedError
from wheelq.tasks.handle import EagerMode, Enqueued, TaskHandle, TaskLike

R = TypeVar("R")
S = TypeVar("S")


class Signature(Generic[R]):
    """A task's call, its arguments checked and encoded (`TaskCall.s`): enqueue it, chain it
    (`then`), or make it a flow's parent or child (`App.flow`)."""

    def __init__(self, task: TaskLike[R], payload: Any, options: dict[str, Any]) -> None:
        self.task = task
        self.payload = payload
        self.options = options

    def __repr__(self) -> str:
        return f"<Signature {self.task.name}>"

    def then(
        self, next_call: Signature[S], *, delay: Delay = 0, on_parent_failure: str = "cancel"
    ) -> Chain[S]:
        """A chain: this call, then `next_call` `delay` after this one succeeded (seconds or a
        timedelta); `on_parent_failure` as for `Client.enqueue`'s ``after=``."""
        return Chain([(self, 0, OnFailure.CANCEL)]).then(
            next_call, delay=delay, on_parent_failure=on_parent_failure
        )

    def enqueue(self) -> TaskHandle[R]:
        """Enqueue this call, due now."""
        return Chain[R]([(self, 0, OnFailure.CANCEL)]).enqueue()

    async def aenqueue(self) -> TaskHandle[R]:
        """`enqueue`, awaited."""
        return await Chain[R]([(self, 0, OnFailure.CANCEL)]).aenqueue()

    def spec(self, delay: Delay | None = None) -> JobSpec:
        """This call as a flow's `JobSpec` (its topic, payload and options)."""
        return JobSpec(
            self.task.topic, self.payload, group=self.task.app.group, delay=delay, **self.options
        )


Link = tuple[Signature[Any], Delay, OnFailure]


class Chain(Generic[R]):
    """Task calls each due its delay after the one before succeeded (`Signature.then`)."""

    def __init__(self, links: list[Link]) -> None:
        self.links = links

    def __repr__(self) -> str:
        return "<Chain " + " -> ".join(s.task.name for s, _, _ in self.links) + ">"

    def then(
        self, next_call: Signature[S], *, delay: Delay = 0, on_parent_failure: str = "cancel"
    ) -> Chain[S]:
        """This chain, then `next_call` `delay` after its last link succeeded."""
        if not isinstance(next_call, Signature):
            raise InvalidArgumentError(
                "next_call", f"then takes a task's signature (f.s(...)), got {next_call!r:.60}"
            )
        return Chain([*self.links, (next_call, delay, on_failure(on_parent_failure))])

    def enqueue(self) -> TaskHandle[R]:
        """Enqueue every link, each following the one before; returns the last one's handle
        (its result is the chain's)."""
        first = self.links[0][0].task
        if (eager := first.app.eager_mode) is not None:
            return self._eager(eager)
        handle: TaskHandle[Any] | None = None
        for sig, delay, policy in self.links:
            client = sig.task.app.client
            follows = _follows(handle, policy)
            job_id = client.enqueue(
                sig.task.topic, sig.payload, delay=delay, **follows, **sig.options
            )
            handle = TaskHandle(sig.task, job_id)
        assert handle is not None
        return handle

    async def aenqueue(self) -> TaskHandle[R]:
        """`enqueue`, awaited."""
        first = self.links[0][0].task
        if (eager := first.app.eager_mode) is not None:
            return self._eager(eager)
        handle: TaskHandle[Any] | None = None
        for sig, delay, policy in self.links:
            client = sig.task.app.aclient
            follows = _follows(handle, policy)
            job_id = await client.enqueue(
                sig.task.topic, sig.payload, delay=delay, **follows, **sig.options
            )
            handle = TaskHandle(sig.task, job_id)
        assert handle is not None
        return handle

    def _eager(self, eager: EagerMode) -> TaskHandle[R]:
        """Each link inline, in order; one after a failure only under ``"run"`` (the rest
        end cancelled, unrun)."""
        handle: TaskHandle[Any] | None = None
        failed = False
        for sig, _, policy in self.links:
            call = Enqueued(sig.task, sig.payload, sig.options, None, None, None)
            if failed and policy is OnFailure.CANCEL:
                handle = eager.skip(call, JobState.CANCELLED, "a job it followed failed")
            else:
                handle = eager.send(call)
            failed = _failed(handle)
        assert handle is not None
        return handle


def _follows(handle: TaskHandle[Any] | None, policy: OnFailure) -> dict[str, Any]:
    if handle is None:
        return {}
    group = handle.task.app.group
    return {"after": JobRef(handle.topic, handle.id, group), "on_parent_failure": policy.value}


def _failed(handle: TaskHandle[Any]) -> bool:
    try:
        handle.result(0)
    except JobFailedError:
        return True
    return False


class Flow(Generic[R]):
    """A join of task calls as a value, not enqueued: a child of `App.flow` (or of another
    `Flow`), whose parent counts for the flow above as the child (`wheelq.FlowSpec`)."""

    def __init__(
        self,
        parent: Signature[R],
        children: Sequence[Signature[Any] | Flow[Any]],
        *,
        delay: Delay = 0,
        on_child_failure: str = "fail",
    ) -> None:
        self.parent = parent
        self.children = list(children)
        self.delay = delay
        self.policy = policy_of(OnChildFailure, on_child_failure, "on_child_failure")

    def __repr__(self) -> str:
        return f"<Flow {self.parent.task.name}: {len(self.children)} children>"


Child = Signature[Any] | Flow[Any]


def flow_specs(
    parent: Signature[Any], children: list[Child], on_child_failure: str, delay: Delay
) -> tuple[JobSpec, list[JobSpec | FlowSpec], OnChildFailure]:
    """`App.flow`'s arguments as `enqueue_flow`'s."""
    if not isinstance(parent, Signature):
        raise InvalidArgumentError(
            "parent", f"parent must be a task's signature, got {parent!r:.60}"
        )
    if not all(isinstance(c, Signature | Flow) for c in children):
        raise InvalidArgumentError(
            "children", "children must be task signatures (f.s(...)) or Flows of them"
        )
    policy = policy_of(OnChildFailure, on_child_failure, "on_child_failure")
    return parent.spec(delay), [_child_spec(c) for c in children], policy


def _child_spec(child: Child) -> JobSpec | FlowSpec:
    if isinstance(child, Signature):
        return child.spec()
    head, specs, policy = flow_specs(child.parent, child.children, child.policy.value, child.delay)
    return FlowSpec(head, specs, on_child_failure=policy.value)


def eager_flow(
    eager: EagerMode,
    parent: Signature[R],
    children: list[Child],
    policy: OnChildFailure,
) -> TaskHandle[R]:
    """`App.flow` in eager mode: each child inline, in order (a child `Flow` as a flow of
    its own), then the parent (unless a child failed under ``"fail"``: then the parent ends
    dead, unrun, and the children after the failed one are cancelled unrun)."""
    failed: str | None = None
    for child in children:
        if failed is not None and policy is OnChildFailure.FAIL:
            _skip(eager, child)
            continue
        if isinstance(child, Flow):
            handle: TaskHandle[Any] = eager_flow(eager, child.parent, child.children, child.policy)
        else:
            handle = eager.send(
                Enqueued(child.task, child.payload, child.options, None, None, None)
            )
        if _failed(handle) and failed is None:
            failed = f"a child ({handle.task.name}, {handle.id}) failed"
    call = Enqueued(parent.task, parent.payload, parent.options, None, None, None)
    if failed is not None and policy is OnChildFailure.FAIL:
        return eager.skip(call, JobState.DEAD, failed)
    return eager.send(call)


def _skip(eager: EagerMode, child: Child) -> None:
    """A child (a flow: its children, then its parent) cancelled unrun."""
    why = "its flow's parent failed"
    if isinstance(child, Flow):
        for kid in child.children:
            _skip(eager, kid)
        child = child.parent
    eager.skip(Enqueued(child.task, child.payload, child.options, None, None, None),
               JobState.CANCELLED, why)  # fmt: skip
