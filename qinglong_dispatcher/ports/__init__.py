"""The ports: every protocol the core depends on, importing only the domain.

The dispatcher, the actions, recovery, the lifecycle and the CLI are written against these;
the adapters implement them. One module per area; this package re-exports them all, so a
caller writes `ports.Store` or `ports.ApprovedActionHandler`.
"""

from __future__ import annotations

from qinglong_dispatcher.ports.approvals import (
    ApprovalStore,
    PlanStore,
    StoredPlan,
)
from qinglong_dispatcher.ports.audit_export import AuditExportStore
from qinglong_dispatcher.ports.auth import (
    Authenticator,
)
from qinglong_dispatcher.ports.clock import (
    Clock,
)
from qinglong_dispatcher.ports.dispatches import (
    CancelStore,
    DispatchReadStore,
    PlanReadStore,
)
from qinglong_dispatcher.ports.executions import (
    BACKLOG_CAP,
    CompletionRequest,
    DispatchStore,
    EffectOf,
    ExecutionStore,
    PageEffects,
    PageItem,
    PageOutcome,
    PageResult,
    PageStore,
    PassageBatch,
    Passed,
)
from qinglong_dispatcher.ports.handlers import (
    ApprovedActionHandler,
    Closable,
    EvidenceProvider,
    ExecuteKind,
    ExecuteResult,
    ExecutionContext,
    InspectKind,
    InspectResult,
    PassingHandler,
    PrefetchingHandler,
    TransactionalHandler,
)
from qinglong_dispatcher.ports.notes import NoteStore
from qinglong_dispatcher.ports.plan_keys import (
    CheckBatch,
    PlanKey,
    PlanKeyProbe,
    PlanKeyStore,
    ResealBatch,
)
from qinglong_dispatcher.ports.policies import (
    PolicyReadStore,
    PolicyStore,
)
from qinglong_dispatcher.ports.principals import (
    ActingStore,
    PrincipalStores,
    TokenStore,
)
from qinglong_dispatcher.ports.recovery import (
    RecoveryStore,
)
from qinglong_dispatcher.ports.retention import (
    PruneStore,
)
from qinglong_dispatcher.ports.runs import (
    RunCreateOutcome,
    RunCreateRepository,
    RunCreateRequest,
    RunCreateResult,
)
from qinglong_dispatcher.ports.store import (
    Store,
)
from qinglong_dispatcher.ports.targets import (
    TargetReadStore,
)
from qinglong_dispatcher.ports.tool_steps import (
    StartBarrierResult,
    StartOutcome,
    ToolExecutionStartBarrierRepository,
    ToolStepCompletion,
    ToolStepCompletionResult,
    ToolStepOutcome,
    ToolStepRepository,
    ToolSteps,
)
from qinglong_dispatcher.ports.tracing import (
    NOOP,
    NoopTracer,
    Span,
    Tracer,
)
from qinglong_dispatcher.ports.ui_sessions import UiSessionStore
from qinglong_dispatcher.ports.wakeup import (
    WakeupEvents,
    WakeupListener,
)

__all__ = [
    "BACKLOG_CAP",
    "NOOP",
    "ActingStore",
    "ApprovalStore",
    "ApprovedActionHandler",
    "AuditExportStore",
    "Authenticator",
    "CancelStore",
    "CheckBatch",
    "Clock",
    "Closable",
    "CompletionRequest",
    "DispatchReadStore",
    "DispatchStore",
    "EffectOf",
    "EvidenceProvider",
    "ExecuteKind",
    "ExecuteResult",
    "ExecutionContext",
    "ExecutionStore",
    "InspectKind",
    "InspectResult",
    "NoopTracer",
    "NoteStore",
    "PageEffects",
    "PageItem",
    "PageOutcome",
    "PageResult",
    "PageStore",
    "PassageBatch",
    "Passed",
    "PassingHandler",
    "PlanKey",
    "PlanKeyProbe",
    "PlanKeyStore",
    "PlanReadStore",
    "PlanStore",
    "PolicyReadStore",
    "PolicyStore",
    "PrefetchingHandler",
    "PrincipalStores",
    "PruneStore",
    "RecoveryStore",
    "ResealBatch",
    "RunCreateOutcome",
    "RunCreateRepository",
    "RunCreateRequest",
    "RunCreateResult",
    "Span",
    "StartBarrierResult",
    "StartOutcome",
    "Store",
    "StoredPlan",
    "TargetReadStore",
    "TokenStore",
    "ToolExecutionStartBarrierRepository",
    "ToolStepCompletion",
    "ToolStepCompletionResult",
    "ToolStepOutcome",
    "ToolStepRepository",
    "ToolSteps",
    "Tracer",
    "TransactionalHandler",
    "UiSessionStore",
    "WakeupEvents",
    "WakeupListener",
]
