"""`tool.invoke` through the dispatcher: barrier first, the file once, evidence after a crash."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest

from qinglong_dispatcher import bootstrap, ports
from qinglong_dispatcher.actions.tool_invoke import file_write, sandbox
from qinglong_dispatcher.actions.tool_invoke import handler as tool_invoke
from qinglong_dispatcher.dispatching import dispatcher
from qinglong_dispatcher.domain import errors, records, recovery
from qinglong_dispatcher.domain.states import ExecutionStatus
from qinglong_dispatcher.domain.tools import steps
from tests.support import faults, repositories, tools
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS, make_dispatcher
from tests.support.stores import Harness

Status = steps.StepRunStatus


class SimulatedCrash(BaseException):
    """Stands for the process dying at a crash point."""


@pytest.fixture
def sandbox_dir(tmp_path: Path) -> Path:
    path = tmp_path / "tool-sandbox"
    path.mkdir()
    return path


def dispatcher_for(
    h: Harness, clock: ManualClock, sandbox_dir: Path, *, page_size: int = 16, concurrency: int = 1
) -> dispatcher.Dispatcher:
    return make_dispatcher(
        h.store,
        clock,
        handlers=tools.tool_handlers(h.store, clock, sandbox_dir),
        page_size=page_size,
        concurrency=concurrency,
    )


async def count(h: Harness, table: str) -> int:
    return int(await h.scalar(f"SELECT count(*) AS n FROM {faults.table(h, table)}"))


@pytest.mark.slow
async def test_fifty_approved_file_writes_make_fifty_files_and_fifty_barriers(
    harness: Harness, clock: ManualClock, sandbox_dir: Path
) -> None:
    run = await tools.live_run(harness, clock)
    submitted = [
        await tools.submit_tool(harness, clock, run, content=f"file {i}\n") for i in range(50)
    ]
    the_dispatcher = dispatcher_for(harness, clock, sandbox_dir, page_size=64, concurrency=8)
    report = await the_dispatcher.dispatch_batch()
    assert report.outcomes["succeeded"] == 50, report
    files = sorted((sandbox_dir / run.project_id).iterdir())
    assert len(files) == 50
    for i, item in enumerate(submitted):
        target = sandbox_dir / run.project_id / item.consumed.dispatch_id
        assert target.read_text() == f"file {i}\n"
        step = await repositories.steps(harness.store).get_step_run(item.step_run_id)
        assert step is not None
        assert (step.status, step.version, step.result_code) == (
            Status.SUCCEEDED,
            3,
            "file_written",
        )
        execution = await harness.store.get_execution(item.consumed.dispatch_id)
        assert execution is not None
        assert execution.status is ExecutionStatus.SUCCEEDED
    assert await count(harness, "tool_execution_start_barriers") == 50
    final = await repositories.runs(harness.store).get_run(run.run_id)
    assert final is not None
    assert (final.version, final.event_seq) == (run.version + 100, run.event_seq + 100)
    counts = await harness.store.counts(now_ms=clock.now_ms())
    assert counts.step_runs["succeeded"] == 50


async def test_the_file_is_idempotent_on_the_dispatch_id(
    harness: Harness, clock: ManualClock, sandbox_dir: Path
) -> None:
    run = await tools.live_run(harness, clock)
    same = await tools.submit_tool(harness, clock, run, content="same\n")
    other = await tools.submit_tool(harness, clock, run, content="planned\n")
    project = sandbox_dir / run.project_id
    project.mkdir()
    (project / same.consumed.dispatch_id).write_text("same\n")
    (project / other.consumed.dispatch_id).write_text("someone else's\n")
    await dispatcher_for(harness, clock, sandbox_dir).dispatch_batch()
    for item, status, code in (
        (same, Status.SUCCEEDED, "file_already_written"),
        (other, Status.FAILED, "file_content_conflict"),
    ):
        step = await repositories.steps(harness.store).get_step_run(item.step_run_id)
        assert step is not None
        assert (step.status, step.result_code) == (status, code)
        execution = await harness.store.get_execution(item.consumed.dispatch_id)
        assert execution is not None
        assert execution.status.value == status.value
    assert (project / other.consumed.dispatch_id).read_text() == "someone else's\n"


async def test_a_missing_sandbox_is_refused_before_any_barrier(
    harness: Harness, clock: ManualClock, tmp_path: Path
) -> None:
    run = await tools.live_run(harness, clock)
    submitted = await tools.submit_tool(harness, clock, run)
    report = await dispatcher_for(harness, clock, tmp_path / "absent").dispatch_batch()
    assert report.outcomes["retry_wait"] == 1
    execution = await harness.store.get_execution(submitted.consumed.dispatch_id)
    assert execution is not None
    assert (execution.status, execution.result_code) == (
        ExecutionStatus.RETRY_WAIT,
        "sandbox_unavailable",
    )
    step = await repositories.steps(harness.store).get_step_run(submitted.step_run_id)
    assert step is not None
    assert step.status is Status.WAITING_APPROVAL
    assert await count(harness, "tool_execution_start_barriers") == 0
    assert not (tmp_path / "absent").exists()


@dataclasses.dataclass
class BusyBarrier:
    """The real store, except that every `prepare` fails with a retryable error (its start
    barrier's transaction, which `tool.invoke`'s repository runs on the store)."""

    store: ports.Store
    prepares: int = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    async def barrier_transaction(self, work: object) -> ports.StartBarrierResult:
        self.prepares += 1
        raise errors.StoreBusy("injected: the Run row is locked")


async def test_a_prepare_that_never_succeeds_ends_failed_not_indeterminate(
    harness: Harness, clock: ManualClock, sandbox_dir: Path
) -> None:
    run = await tools.live_run(harness, clock)
    submitted = await tools.submit_tool(harness, clock, run)
    busy = BusyBarrier(harness.store)
    # A proxy of the real store (`__getattr__` forwards all but `prepare`): not a ports.Store
    # to mypy, which sees no members.
    handlers = bootstrap.handlers(busy, clock, tool_sandbox_dir=sandbox_dir)  # type: ignore[arg-type]
    the_dispatcher = make_dispatcher(
        harness.store, clock, handlers=handlers, lease_ms=3000, execute_timeout_ms=1500
    )
    report = await the_dispatcher.dispatch_batch()
    assert busy.prepares > 1  # retried with backoff within the execute budget
    execution = await harness.store.get_execution(submitted.consumed.dispatch_id)
    assert execution is not None
    assert (execution.status, execution.result_code) == (
        ExecutionStatus.FAILED,
        "start_unavailable",
    ), report
    step = await repositories.steps(harness.store).get_step_run(submitted.step_run_id)
    assert step is not None
    assert step.status is Status.FAILED
    assert not (sandbox_dir / run.project_id).exists()  # the adapter never ran


def crash_at(point: str) -> dispatcher.FaultHook:
    async def hook(where: str, dispatch: records.Dispatch) -> None:
        if where == point:
            raise SimulatedCrash(point)

    return hook


async def crash(harness: Harness, clock: ManualClock, sandbox_dir: Path, point: str) -> None:
    """Die at a dispatcher crash point, or at one of the action's (`after_adapter`)."""
    handler = tool_invoke.ToolInvokeHandler(
        harness.store,
        repositories.steps(harness.store),
        clock,
        adapter=file_write.FileWriteAdapter(sandbox_dir),
        profile="edge",
        fault_hook=crash_at(point),
    )
    the_dispatcher = make_dispatcher(
        harness.store,
        clock,
        handlers={tool_invoke.ACTION_TYPE: handler},
        fault_hook=crash_at(point),
    )
    with pytest.raises(BaseException) as info:
        await the_dispatcher.dispatch_batch()
    error = info.value
    assert isinstance(error, SimulatedCrash) or (
        isinstance(error, BaseExceptionGroup) and error.subgroup(SimulatedCrash) is not None
    )
    clock.advance(ms=LEASE_MS)


async def reconcile(harness: Harness, clock: ManualClock, sandbox_dir: Path | None) -> str:
    the_reconciler = bootstrap.build_reconciler(harness.store, clock, tool_sandbox_dir=sandbox_dir)
    report = await the_reconciler.reconcile_pass()
    (outcome,) = report.outcomes
    return outcome


async def test_a_crash_after_the_file_settles_by_evidence_and_the_file_is_written_once(
    harness: Harness, clock: ManualClock, sandbox_dir: Path
) -> None:
    run = await tools.live_run(harness, clock)
    submitted = await tools.submit_tool(harness, clock, run, content="exactly once\n")
    await crash(harness, clock, sandbox_dir, "after_adapter")
    target = sandbox_dir / run.project_id / submitted.consumed.dispatch_id
    written = target.stat()
    assert await reconcile(harness, clock, sandbox_dir) == "resolved_succeeded"
    step = await repositories.steps(harness.store).get_step_run(submitted.step_run_id)
    assert step is not None
    assert (step.status, step.result_code) == (Status.SUCCEEDED, "evidence_verified")
    resolution = await harness.store.get_resolution(submitted.consumed.dispatch_id)
    assert resolution is not None
    assert resolution.source is recovery.Source.EVIDENCE
    assert (target.stat().st_ino, target.stat().st_mtime_ns) == (
        written.st_ino,
        written.st_mtime_ns,
    )
    assert target.read_text() == "exactly once\n"
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no temp file left


@pytest.mark.parametrize(
    ("point", "change", "expected"),
    [
        ("after_start", None, "missing"),  # no barrier: the adapter cannot have run
        ("after_adapter", "delete", "missing"),
        ("after_adapter", "overwrite", "conflict"),
        ("after_adapter", "unmount", "unavailable"),
        ("after_adapter", "unset", "unavailable"),
    ],
)
async def test_evidence_is_missing_conflict_or_unavailable_but_never_guessed(
    harness: Harness,
    clock: ManualClock,
    sandbox_dir: Path,
    point: str,
    change: str | None,
    expected: str,
) -> None:
    run = await tools.live_run(harness, clock)
    submitted = await tools.submit_tool(harness, clock, run)
    (sandbox_dir / run.project_id).mkdir()
    await crash(harness, clock, sandbox_dir, point)
    target = sandbox_dir / run.project_id / submitted.consumed.dispatch_id
    seen: Path | None = sandbox_dir
    if change == "delete":
        target.unlink()
    elif change == "overwrite":
        target.write_text("tampered\n")
    elif change == "unmount":
        # An empty mount point: the directory is there, the shared storage is not.
        (sandbox_dir / run.project_id / target.name).unlink()
        (sandbox_dir / run.project_id).rmdir()
    elif change == "unset":
        seen = None
    assert await reconcile(harness, clock, seen) == expected
    execution = await harness.store.get_execution(submitted.consumed.dispatch_id)
    assert execution is not None
    assert execution.status is ExecutionStatus.EXECUTING  # still recovery_required
    step = await repositories.steps(harness.store).get_step_run(submitted.step_run_id)
    assert step is not None
    assert step.status is (Status.WAITING_APPROVAL if point == "after_start" else Status.RUNNING)


@pytest.mark.parametrize("failing", ["file", "directory"])
async def test_a_write_failing_before_the_rename_fails_and_after_it_is_indeterminate(
    harness: Harness,
    clock: ManualClock,
    sandbox_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    failing: str,
) -> None:
    run = await tools.live_run(harness, clock)
    submitted = await tools.submit_tool(harness, clock, run)
    (sandbox_dir / run.project_id).mkdir()
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        is_file = stat.S_ISREG(os.fstat(fd).st_mode)
        if is_file == (failing == "file"):
            raise OSError("injected: the disk went away")
        real_fsync(fd)

    monkeypatch.setattr("qinglong_dispatcher.actions.tool_invoke.file_write.os.fsync", fsync)
    await dispatcher_for(harness, clock, sandbox_dir).dispatch_batch()
    execution = await harness.store.get_execution(submitted.consumed.dispatch_id)
    step = await repositories.steps(harness.store).get_step_run(submitted.step_run_id)
    assert execution is not None
    assert step is not None
    written = sorted(p.name for p in (sandbox_dir / run.project_id).iterdir())
    if failing == "file":  # nothing became visible: an explicit failure
        assert (execution.status, execution.result_code) == (
            ExecutionStatus.FAILED,
            "file_write_failed",
        )
        assert step.status is Status.FAILED
        assert written == []
    else:  # renamed, durability unknown: indeterminate; the StepRun is lost, not left running
        assert execution.status is ExecutionStatus.BLOCKED
        assert execution.result_code == "indeterminate:adapter_raised"
        assert step.status is Status.LOST
        assert written == [submitted.consumed.dispatch_id]


def test_paths_are_derived_from_identifiers_and_never_leave_the_sandbox(tmp_path: Path) -> None:
    root = sandbox.root(tmp_path)
    assert sandbox.target(root, "proj-1", "d-1") == root / "proj-1" / "d-1"
    for project in ("..", ".", "a/b", "../x", "/etc", ""):
        with pytest.raises(errors.InvalidInput):
            sandbox.target(root, project, "d-1")
    outside = tmp_path.parent / "outside"
    outside.mkdir(exist_ok=True)
    (root / "linked").symlink_to(outside)
    with pytest.raises(errors.SandboxUnavailable):
        sandbox.require_inside(root, sandbox.project_dir(root, "linked"))
    with pytest.raises(errors.SandboxUnavailable):
        sandbox.root(tmp_path / "absent")
    with pytest.raises(errors.SandboxUnavailable):
        sandbox.root(None)


class _RaisingAdapter(file_write.FileWriteAdapter):
    """A reviewed adapter that fails in a way it cannot explain (after the barrier)."""

    async def write(
        self, *, project_id: str, dispatch_id: str, content: bytes
    ) -> file_write.Result:
        raise OSError("device went away")


async def test_an_adapter_that_raises_blocks_the_execution_and_loses_the_step_together(
    harness: Harness, clock: ManualClock, sandbox_dir: Path
) -> None:
    tool_steps = repositories.steps(harness.store)
    run = await tools.live_run(harness, clock)
    submitted = await tools.submit_tool(harness, clock, run, content="never explained\n")
    handler = tool_invoke.ToolInvokeHandler(
        harness.store,
        tool_steps,
        clock,
        adapter=_RaisingAdapter(sandbox_dir),
        profile="edge",
    )
    report = await make_dispatcher(
        harness.store, clock, handlers={tool_invoke.ACTION_TYPE: handler}
    ).dispatch_batch()
    assert report.outcomes["blocked"] == 1
    execution = await harness.store.get_execution(submitted.consumed.dispatch_id)
    assert execution is not None
    assert (execution.status, execution.result_code) == (
        ExecutionStatus.BLOCKED,
        "indeterminate:adapter_raised",
    )
    step = await tool_steps.get_step_run(submitted.step_run_id)
    assert step is not None
    assert step.status is Status.LOST
