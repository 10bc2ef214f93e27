"""The jobs and commands wire types, as TypedDicts (what the calls take and answer).

Generated from the Rust types in mqstore-core (core/src/wire_types.rs): do not edit.
Change the Rust type and run
``MQSTORE_UPDATE_WIRE_TYPES=1 cargo test -p mqstore-core --lib wire_types``.
"""

# The docs are the Rust doc comments, en dashes and all.
# ruff: noqa: E501, RUF001

from __future__ import annotations

from typing import Any, Literal, TypedDict, Union

__all__ = [
    "AbortAction",
    "AbortConfig",
    "AbortCriteria",
    "CommandAnswer",
    "CommandDefinition",
    "CommandDefinitionsAnswer",
    "CommandDefinitionsAnswer0",
    "CommandDefinitionsAnswer1",
    "CommandDefinitionsAnswer2",
    "CommandDefinitionsRequest",
    "CommandDefinitionsRequestCreate",
    "CommandDefinitionsRequestDelete",
    "CommandDefinitionsRequestGet",
    "CommandDefinitionsRequestList",
    "CommandParameter",
    "CommandPayload",
    "CommandRecord",
    "CommandStatus",
    "EndBehavior",
    "ExecutionAccepted",
    "ExecutionCancel",
    "ExecutionListing",
    "ExecutionState",
    "ExecutionsPage",
    "ExponentialRate",
    "FailureType",
    "GroupListing",
    "JobCreated",
    "JobDescription",
    "JobExecution",
    "JobExecutionStatus",
    "JobListing",
    "JobProcessDetails",
    "JobSpec",
    "JobStatus",
    "JobSummary",
    "JobTemplate",
    "JobUpdate",
    "JobsPage",
    "MaintenanceWindow",
    "Membership",
    "NamedShadowsPage",
    "Notify",
    "NotifyJobs",
    "NotifyNext",
    "OperatorRequest",
    "OperatorRequestAddThingToThingGroup",
    "OperatorRequestCancelJob",
    "OperatorRequestCancelJobExecution",
    "OperatorRequestCreateJob",
    "OperatorRequestCreateJobTemplate",
    "OperatorRequestCreateThingGroup",
    "OperatorRequestDeleteJob",
    "OperatorRequestDeleteJobExecution",
    "OperatorRequestDeleteJobTemplate",
    "OperatorRequestDeleteThingGroup",
    "OperatorRequestDescribeJob",
    "OperatorRequestDescribeJobExecution",
    "OperatorRequestDescribeJobTemplate",
    "OperatorRequestDescribeThingGroup",
    "OperatorRequestListJobExecutions",
    "OperatorRequestListJobTemplates",
    "OperatorRequestListJobs",
    "OperatorRequestListNamedShadowsForThing",
    "OperatorRequestListThingGroups",
    "OperatorRequestListThingsInThingGroup",
    "OperatorRequestRemoveThingFromThingGroup",
    "OperatorRequestUpdateJob",
    "PendingJobs",
    "RateIncreaseCriteria",
    "Rejected",
    "RetryConfig",
    "RetryCriteria",
    "RolloutConfig",
    "RolloutProgress",
    "SchedulingConfig",
    "TargetSelection",
    "TemplateListing",
    "TemplatesPage",
    "ThingGroupDescription",
    "ThingGroupMetadata",
    "ThingGroupProperties",
    "ThingGroupsPage",
    "ThingsPage",
    "TimeoutConfig",
    "UpdateAccepted",
]


class _ExecutionCancelRequired(TypedDict):
    jobId: str
    """The job's id (AWS's `jobId`)."""
    thingName: str
    """The thing whose execution to cancel."""


class ExecutionCancel(_ExecutionCancelRequired, total=False):
    """What `cancelJobExecution` takes."""

    expectedVersion: int
    """Refuse unless the execution still has this version (AWS's `expectedVersion`)."""
    force: bool
    """Also what is in progress (AWS's `force`)."""
    statusDetails: dict[str, str]
    """The device's own key/value details of its status (AWS's `statusDetails`)."""


class _JobSpecRequired(TypedDict):
    jobId: str
    """The job's id (AWS's `jobId`)."""
    targets: list[str]
    """The things and thing groups it runs on: names (a thing), `thing/NAME`,
    `thinggroup/NAME`, or AWS's ARNs of either.
    """


class JobSpec(_JobSpecRequired, total=False):
    """What an operator asks for when creating a job: AWS's `CreateJob` fields."""

    abortConfig: AbortConfig
    """When the job is canceled for too many failures (AWS's `abortConfig`)."""
    description: str
    """What it is for, for people (AWS's `description`)."""
    document: dict[str, Any]
    """A JSON object (absent when it comes from the template)."""
    documentParameters: dict[str, str]
    """Values for the document's `${aws:iot:parameter:NAME}` placeholders."""
    jobExecutionsRetryConfig: RetryConfig
    """How often failed executions are retried (AWS's `jobExecutionsRetryConfig`)."""
    jobExecutionsRolloutConfig: RolloutConfig
    """How fast things are notified (AWS's `jobExecutionsRolloutConfig`)."""
    jobTemplateArn: str
    """The template it starts from (its id, `jobtemplate/ID` or AWS's ARN)."""
    schedulingConfig: SchedulingConfig
    """When it starts, ends, and may roll out (AWS's `schedulingConfig`)."""
    targetSelection: TargetSelection
    """SNAPSHOT (the default) or CONTINUOUS: whether things added to its groups later get it."""
    timeoutConfig: TimeoutConfig
    """When executions in progress time out (AWS's `timeoutConfig`)."""


class _JobTemplateRequired(TypedDict):
    jobTemplateId: str
    """The template's id (AWS's `jobTemplateId`)."""


class JobTemplate(_JobTemplateRequired, total=False):
    """A job template: what `createJobTemplate` takes and `describeJobTemplate` answers."""

    abortConfig: AbortConfig
    """When the job is canceled for too many failures (AWS's `abortConfig`)."""
    createdAt: int
    """Answered by `describeJobTemplate` (epoch seconds)."""
    description: str
    """What it is for, for people (AWS's `description`)."""
    document: dict[str, Any]
    """A JSON object; may hold `${aws:iot:parameter:NAME}` placeholders that a job's
    `documentParameters` fill.
    """
    jobExecutionsRetryConfig: RetryConfig
    """How often failed executions are retried (AWS's `jobExecutionsRetryConfig`)."""
    jobExecutionsRolloutConfig: RolloutConfig
    """How fast things are notified (AWS's `jobExecutionsRolloutConfig`)."""
    jobTemplateArn: str
    """Answered by `describeJobTemplate`: `arn:aws:iot:…:jobtemplate/{id}`."""
    maintenanceWindows: list[MaintenanceWindow]
    """When the rollout may notify things (AWS's `maintenanceWindows`)."""
    timeoutConfig: TimeoutConfig
    """When executions in progress time out (AWS's `timeoutConfig`)."""


class _JobUpdateRequired(TypedDict):
    jobId: str
    """The job to change."""


class JobUpdate(_JobUpdateRequired, total=False):
    """What `updateJob` changes: the settings given (absent: unchanged)."""

    abortConfig: AbortConfig
    """When the job is canceled for too many failures (AWS's `abortConfig`)."""
    description: str
    """What it is for, for people (AWS's `description`)."""
    jobExecutionsRetryConfig: RetryConfig
    """How often failed executions are retried (AWS's `jobExecutionsRetryConfig`)."""
    jobExecutionsRolloutConfig: RolloutConfig
    """How fast things are notified (AWS's `jobExecutionsRolloutConfig`)."""
    timeoutConfig: TimeoutConfig
    """When executions in progress time out (AWS's `timeoutConfig`)."""


class Membership(TypedDict, total=False):
    """Which group and which thing an `addThingToThingGroup` or `removeThingFromThingGroup`
    names: each by name or by ARN, as AWS takes them.
    """

    thingArn: str
    """The thing's ARN (AWS's `thingArn`)."""
    thingGroupArn: str
    """The group's ARN (AWS's `thingGroupArn`)."""
    thingGroupName: str
    """The group's name (AWS's `thingGroupName`)."""
    thingName: str
    """The thing's name (AWS's `thingName`)."""


AbortAction = Literal["CANCEL"]
"""What an abort does."""


class AbortConfig(TypedDict):
    """`abortConfig`."""

    criteriaList: list[AbortCriteria]
    """The criteria, each checked on its own (AWS's `criteriaList`)."""


class AbortCriteria(TypedDict):
    """When a job is aborted (canceled): once at least `minNumberOfExecutedThings` things ended
    their execution and `thresholdPercentage` % of them or more ended with `failureType`.
    """

    action: AbortAction
    """CANCEL (AWS's only action)."""
    failureType: FailureType
    """Which ending counts (AWS's `failureType`)."""
    minNumberOfExecutedThings: int
    """At least 1."""
    thresholdPercentage: float
    """0–100, at most two decimals."""


class _CommandAnswerRequired(TypedDict):
    payload: str
    """The device's answer, as it sent it."""
    status: CommandStatus
    """SUCCEEDED, FAILED or REJECTED; IN_PROGRESS for a progress report; TIMED_OUT when the
    device itself says so (final, unlike the service's own timeout).
    """


class CommandAnswer(_CommandAnswerRequired, total=False):
    """What a device answered, read by its profile."""

    appErrorCode: str
    """An application error (Azure IoT Operations `AppErrCode`)."""
    appErrorPayload: str
    """The application error's payload (`AppErrPayload`), when the device sent one."""
    code: int
    """The device's own status code: `__stat`, a `{status}` topic segment, a JSON field."""
    contentType: str
    """The answer's content type, when the device gave one."""
    message: str
    """Why it failed or was rejected, in the device's words (`__stMsg`, `__propName=...`)."""
    reasonCode: str
    """The device's reason code (AWS IoT commands' `statusReason.reasonCode`; its
    `reasonDescription` is `Answer::message`), or the status word a topic profile read.
    """
    result: Any
    """Typed results (AWS IoT commands' `result`: name → `{"s": …}`, `{"b": …}` or
    `{"bin": base64}`), as the device sent them.
    """


class _CommandDefinitionRequired(TypedDict):
    commandId: str
    """`[a-zA-Z0-9_-]{1,64}`."""


class CommandDefinition(_CommandDefinitionRequired, total=False):
    """A stored command."""

    createdMs: int
    """When it was stored (ms since the epoch; set by the service)."""
    description: str
    """What the command is for, for people."""
    mandatoryParameters: list[CommandParameter]
    """The template's parameters; one without a default must be given at start."""
    payload: CommandPayload
    """A fixed payload (exclusive with `payload_template`)."""
    payloadTemplate: str
    """A JSON text with `${aws:iot:commandexecution::parameter:NAME}` where parameters go."""


class CommandDefinitionsAnswer0(TypedDict):
    """To `create` and `get`: the stored command."""

    command: CommandDefinition
    """The stored command (with its `createdMs`)."""


class CommandDefinitionsAnswer1(TypedDict):
    """To `list`: every stored command, by id."""

    commands: list[CommandDefinition]
    """The stored commands."""


class CommandDefinitionsAnswer2(TypedDict):
    """To `delete`: whether there was one."""

    deleted: bool
    """False when no command had the id."""


CommandDefinitionsAnswer = Union[
    "CommandDefinitionsAnswer0", "CommandDefinitionsAnswer1", "CommandDefinitionsAnswer2"
]
"""The service's answer to a `DefinitionsRequest` (`__stat` 200)."""


class CommandDefinitionsRequestCreate(TypedDict):
    """Store a command."""

    command: CommandDefinition
    """The command to store."""
    op: Literal["create"]


class CommandDefinitionsRequestGet(TypedDict):
    """One stored command."""

    commandId: str
    """The stored command's id."""
    op: Literal["get"]


class CommandDefinitionsRequestList(TypedDict):
    """Every stored command."""

    op: Literal["list"]


class CommandDefinitionsRequestDelete(TypedDict):
    """Delete a stored command."""

    commandId: str
    """The stored command's id."""
    op: Literal["delete"]


CommandDefinitionsRequest = Union[
    "CommandDefinitionsRequestCreate",
    "CommandDefinitionsRequestGet",
    "CommandDefinitionsRequestList",
    "CommandDefinitionsRequestDelete",
]
"""A request on `DEFINITIONS_TOPIC`."""


class _CommandParameterRequired(TypedDict):
    name: str
    """The parameter's name, as the template names it."""


class CommandParameter(_CommandParameterRequired, total=False):
    """A template parameter and its default."""

    defaultValue: Any
    """Its value when a start gives none (`{"S": ...}`, `{"I": ...}`, ...)."""


class _CommandPayloadRequired(TypedDict):
    content: str
    """The payload, as text (base64 for binary content types)."""


class CommandPayload(_CommandPayloadRequired, total=False):
    """A fixed payload: `content` as text, or base64 with `contentType` not JSON or text."""

    contentType: str
    """Its content type."""


class _CommandRecordRequired(TypedDict):
    answerFilter: str
    """What the answer's topic must look like (an MQTT filter: `+` where a status goes)."""
    correlated: bool
    """Answers are matched by id (false: by topic only, the legacy mode)."""
    deadlineMs: int
    """When it times out, in ms since the epoch."""
    id: str
    """The command's id (a version 4 UUID)."""
    node: str
    """The node whose caller waits for the answer."""
    profile: str
    """The profile's name."""
    sentMs: int
    """When it was sent, in ms since the epoch."""
    status: CommandStatus
    """Where it is: SENT, DELIVERED, IN_PROGRESS, SUCCEEDED, FAILED, ..."""
    topic: str
    """The device's command topic."""
    updatedMs: int
    """When the record last changed, in ms since the epoch."""


class CommandRecord(_CommandRecordRequired, total=False):
    """A command's status record: the registry's entry while it waits, and what a status query
    or a watch sees afterwards (until it is forgotten, three timeouts after it was sent).
    """

    answer: CommandAnswer
    """The device's last report (boxed: a record waiting for it stays small)."""
    command: str
    """The stored command it was started from (`definitions`), if any."""
    duplicates: int
    """Answers after the first (dropped, counted)."""
    late: bool
    """The answer came after the timeout."""
    orphaned: bool
    """The answer reached a node after the node waiting for it was gone."""


CommandStatus = Literal[
    "SENT", "DELIVERED", "IN_PROGRESS", "SUCCEEDED", "FAILED", "REJECTED", "TIMED_OUT"
]
"""Where an awaited command stands."""


EndBehavior = Literal["STOP_ROLLOUT", "CANCEL", "FORCE_CANCEL"]
"""What happens at a job's `endTime`."""


class ExecutionAccepted(TypedDict, total=False):
    """What an accepted start-next or describe answered: the execution, absent when the thing
    has none pending.
    """

    execution: JobExecution
    """The execution, or None when there is none."""


class _ExecutionListingRequired(TypedDict):
    executionNumber: int
    """Which execution of the job on this thing this is, from 1 (AWS's `executionNumber`)."""
    jobId: str
    """The job's id (AWS's `jobId`)."""
    lastUpdatedAt: int
    """When it last changed, in seconds since the epoch (AWS's `lastUpdatedAt`)."""
    queuedAt: int
    """When the execution was queued, in seconds since the epoch (AWS's `queuedAt`)."""
    status: JobExecutionStatus
    """The execution's status."""
    thingName: str
    """The thing's name (AWS's `thingName`)."""
    versionNumber: int
    """The execution's version, raised by every update (AWS's `versionNumber`)."""


class ExecutionListing(_ExecutionListingRequired, total=False):
    """One entry of `listJobExecutions`: a thing's latest execution of a job."""

    startedAt: int
    """When the execution started, in seconds since the epoch (AWS's `startedAt`)."""


class _ExecutionStateRequired(TypedDict):
    status: JobExecutionStatus
    """The execution's status."""
    versionNumber: int
    """The execution's version, raised by every update (AWS's `versionNumber`)."""


class ExecutionState(_ExecutionStateRequired, total=False):
    """An execution's `executionState` (update replies, and rejections)."""

    statusDetails: dict[str, str]
    """The device's own key/value details of its status (AWS's `statusDetails`)."""


class _ExecutionsPageRequired(TypedDict):
    executions: list[ExecutionListing]
    """This page's entries."""


class ExecutionsPage(_ExecutionsPageRequired, total=False):
    """A page of executions (each thing's latest of each job): what `listJobExecutions` answers."""

    nextToken: str
    """The token of the next page; absent on the last (AWS's `nextToken`)."""


class ExponentialRate(TypedDict):
    """A rate that starts at `baseRatePerMinute` and is multiplied by `incrementFactor` each time
    the criteria's count of things is reached (never above `maximumPerMinute`).
    """

    baseRatePerMinute: int
    """1–1000."""
    incrementFactor: float
    """1.1–5, at most one decimal."""
    rateIncreaseCriteria: RateIncreaseCriteria
    """When the rate grows (AWS's `rateIncreaseCriteria`)."""


FailureType = Literal["FAILED", "REJECTED", "TIMED_OUT", "ALL"]
"""The execution failures a retry or an abort criterion counts."""


class GroupListing(TypedDict):
    """One entry of `listThingGroups` (AWS's `GroupNameAndArn`)."""

    groupArn: str
    """The group's ARN (AWS's `groupArn`)."""
    groupName: str
    """The group's name (AWS's `groupName`)."""


class JobCreated(TypedDict):
    """What `createJob` answers."""

    jobId: str
    """The job's id (AWS's `jobId`)."""
    targets: int
    """How many things it targets."""


class _JobDescriptionRequired(TypedDict):
    createdAt: int
    """Epoch seconds."""
    document: dict[str, Any]
    """The job document the devices get (AWS's `document`)."""
    executions: dict[str, int]
    """How many of its latest executions are in each status."""
    jobArn: str
    """The job's ARN (AWS's `jobArn`): `arn:aws:iot:mqstore:000000000000:job/{jobId}`."""
    jobId: str
    """The job's id (AWS's `jobId`)."""
    jobProcessDetails: JobProcessDetails
    """How many executions are in each status (AWS's `jobProcessDetails`)."""
    lastUpdatedAt: int
    """When it last changed, in seconds since the epoch (AWS's `lastUpdatedAt`)."""
    rollout: RolloutProgress
    """How far its rollout got."""
    status: JobStatus
    """The job's status."""
    targetSelection: TargetSelection
    """`SNAPSHOT`, or `CONTINUOUS` for things added to its groups later (AWS's `targetSelection`)."""
    targets: list[str]
    """The things and groups it targets (names or ARNs)."""


class JobDescription(_JobDescriptionRequired, total=False):
    """A job as `describeJob` answers: AWS's `Job` (its document inside), with the counts of its
    latest executions by status (`executions`) and its rollout's progress (`rollout`).
    """

    abortConfig: AbortConfig
    """When the job is canceled for too many failures (AWS's `abortConfig`)."""
    comment: str
    """Why, for people (AWS's `comment`)."""
    completedAt: int
    """When it completed, in seconds since the epoch (AWS's `completedAt`)."""
    description: str
    """What it is for, for people (AWS's `description`)."""
    documentParameters: dict[str, str]
    """The values filled into its template's placeholders (AWS's `documentParameters`)."""
    forceCanceled: bool
    """Canceled with `force` (AWS's `forceCanceled`)."""
    jobExecutionsRetryConfig: RetryConfig
    """How often failed executions are retried (AWS's `jobExecutionsRetryConfig`)."""
    jobExecutionsRolloutConfig: RolloutConfig
    """How fast things are notified (AWS's `jobExecutionsRolloutConfig`)."""
    jobTemplateArn: str
    """The template's ARN (AWS's `jobTemplateArn`)."""
    reasonCode: str
    """A code saying why, for tooling (AWS's `reasonCode`)."""
    schedulingConfig: SchedulingConfig
    """When it starts, ends, and may roll out (AWS's `schedulingConfig`)."""
    timeoutConfig: TimeoutConfig
    """When executions in progress time out (AWS's `timeoutConfig`)."""


class _JobExecutionRequired(TypedDict):
    executionNumber: int
    """Which execution of the job on this thing this is, from 1 (AWS's `executionNumber`)."""
    jobId: str
    """The job's id (AWS's `jobId`)."""
    lastUpdatedAt: int
    """When it last changed, in seconds since the epoch (AWS's `lastUpdatedAt`)."""
    queuedAt: int
    """When the execution was queued, in seconds since the epoch (AWS's `queuedAt`)."""
    status: JobExecutionStatus
    """The execution's status."""
    versionNumber: int
    """The execution's version, raised by every update (AWS's `versionNumber`)."""


class JobExecution(_JobExecutionRequired, total=False):
    """A `JobExecution` (start-next, describe, notify-next)."""

    approximateSecondsBeforeTimedOut: int
    """While IN_PROGRESS with a timer running."""
    jobDocument: dict[str, Any]
    """The job document, unless the request asked to leave it out."""
    startedAt: int
    """When the execution started, in seconds since the epoch (AWS's `startedAt`)."""
    statusDetails: dict[str, str]
    """The device's own key/value details of its status (AWS's `statusDetails`)."""
    thingName: str
    """Absent from notify-next."""


JobExecutionStatus = Literal[
    "QUEUED", "IN_PROGRESS", "SUCCEEDED", "FAILED", "REJECTED", "TIMED_OUT", "CANCELED", "REMOVED"
]
"""A job execution's status."""


class _JobListingRequired(TypedDict):
    createdAt: int
    """When it was made, in seconds since the epoch (AWS's `createdAt`)."""
    jobId: str
    """The job's id (AWS's `jobId`)."""
    lastUpdatedAt: int
    """When it last changed, in seconds since the epoch (AWS's `lastUpdatedAt`)."""
    status: JobStatus
    """The job's status."""
    targets: int
    """How many things it targets."""


class JobListing(_JobListingRequired, total=False):
    """One entry of `listJobs` (AWS's `JobSummary`, with the number of things)."""

    completedAt: int
    """When it completed, in seconds since the epoch (AWS's `completedAt`)."""


class JobProcessDetails(TypedDict):
    """AWS's `jobProcessDetails`: things per status of their latest execution."""

    numberOfCanceledThings: int
    """Executions canceled."""
    numberOfFailedThings: int
    """Executions that failed."""
    numberOfInProgressThings: int
    """Executions in progress."""
    numberOfQueuedThings: int
    """Executions queued."""
    numberOfRejectedThings: int
    """Executions the device rejected."""
    numberOfRemovedThings: int
    """Executions removed (their thing left the group, or was deleted)."""
    numberOfSucceededThings: int
    """After this many more things succeeded (AWS's `numberOfSucceededThings`)."""
    numberOfTimedOutThings: int
    """Executions that timed out."""


JobStatus = Literal["SCHEDULED", "IN_PROGRESS", "CANCELED", "COMPLETED", "DELETION_IN_PROGRESS"]
"""A job's status."""


class _JobSummaryRequired(TypedDict):
    executionNumber: int
    """Which execution of the job on this thing this is, from 1 (AWS's `executionNumber`)."""
    jobId: str
    """The job's id (AWS's `jobId`)."""
    lastUpdatedAt: int
    """When it last changed, in seconds since the epoch (AWS's `lastUpdatedAt`)."""
    queuedAt: int
    """Epoch seconds."""
    versionNumber: int
    """The execution's version, raised by every update (AWS's `versionNumber`)."""


class JobSummary(_JobSummaryRequired, total=False):
    """A `JobExecutionSummary`: an entry of a pending list."""

    startedAt: int
    """When the execution started, in seconds since the epoch (AWS's `startedAt`)."""


class _JobsPageRequired(TypedDict):
    jobs: list[JobListing]
    """This page's entries."""


class JobsPage(_JobsPageRequired, total=False):
    """A page of jobs: what `listJobs` answers."""

    nextToken: str
    """The token of the next page; absent on the last (AWS's `nextToken`)."""


class MaintenanceWindow(TypedDict):
    """A recurring window the rollout runs in: from each time its cron fires
    (`cron(min hour day-of-month month day-of-week year)`, AWS's form) for its duration.
    """

    durationInMinutes: int
    """How long the window stays open (AWS's `durationInMinutes`)."""
    startTime: str
    """When the window opens: AWS's cron expression, UTC."""


class _NamedShadowsPageRequired(TypedDict):
    results: list[str]
    """The shadows' names (deleted ones left out)."""
    timestamp: int
    """When the list was read, in epoch seconds."""


class NamedShadowsPage(_NamedShadowsPageRequired, total=False):
    """A page of a thing's named shadows: what `listNamedShadowsForThing` answers (AWS's
    `ListNamedShadowsForThing` response).
    """

    nextToken: str
    """The token of the next page; absent on the last (AWS's `nextToken`)."""


class Notify(TypedDict):
    """`notify`: the thing's pending list changed membership; the first ten of it."""

    jobs: NotifyJobs
    """The thing's pending executions, by status."""
    timestamp: int
    """When it was published, in seconds since the epoch."""


class NotifyJobs(TypedDict, total=False):
    """The executions of a `notify`, by status (a status without executions is absent)."""

    IN_PROGRESS: list[JobSummary]
    """Executions in progress (AWS's `IN_PROGRESS`)."""
    QUEUED: list[JobSummary]
    """Executions queued (AWS's `QUEUED`)."""


class _NotifyNextRequired(TypedDict):
    timestamp: int
    """When it was published, in seconds since the epoch."""


class NotifyNext(_NotifyNextRequired, total=False):
    """`notify-next`: the first entry of the pending list changed; absent when it became empty."""

    execution: JobExecution
    """The next execution to run, or None when nothing is pending."""


class OperatorRequestCreateJob(JobSpec):
    """Create a job (`createJob`)."""

    op: Literal["createJob"]


class OperatorRequestUpdateJob(JobUpdate):
    """Changes what AWS's `UpdateJob` changes: the description and the timeout, retry,
    rollout and abort configurations (absent fields stay as they are).
    """

    op: Literal["updateJob"]


class _OperatorRequestCancelJobRequired(TypedDict):
    jobId: str
    """The job's id."""
    op: Literal["cancelJob"]


class OperatorRequestCancelJob(_OperatorRequestCancelJobRequired, total=False):
    """The job becomes CANCELED: QUEUED executions become CANCELED; IN_PROGRESS ones too with
    `force`.
    """

    comment: str
    """Why, for people (AWS's `comment`)."""
    force: bool
    """Also what is in progress (AWS's `force`)."""
    reasonCode: str
    """A code saying why, for tooling (AWS's `reasonCode`)."""


class _OperatorRequestDeleteJobRequired(TypedDict):
    jobId: str
    """The job's id."""
    op: Literal["deleteJob"]


class OperatorRequestDeleteJob(_OperatorRequestDeleteJobRequired, total=False):
    """Deletes a job and its executions (`force` when some are IN_PROGRESS)."""

    force: bool
    """Also what is in progress (AWS's `force`)."""


class OperatorRequestCancelJobExecution(ExecutionCancel):
    """One thing's execution becomes CANCELED (`force` for an IN_PROGRESS one;
    `expectedVersion` as in the device API).
    """

    op: Literal["cancelJobExecution"]


class _OperatorRequestDeleteJobExecutionRequired(TypedDict):
    jobId: str
    """The job's id."""
    op: Literal["deleteJobExecution"]
    thingName: str
    """The thing's name."""


class OperatorRequestDeleteJobExecution(_OperatorRequestDeleteJobExecutionRequired, total=False):
    """Removes one execution (`force` for an IN_PROGRESS one)."""

    force: bool
    """Also what is in progress (AWS's `force`)."""


class OperatorRequestDescribeJob(TypedDict):
    """A job (`describeJob`)."""

    jobId: str
    """The job's id."""
    op: Literal["describeJob"]


class OperatorRequestDescribeJobExecution(TypedDict):
    """A thing's execution of a job (`describeJobExecution`)."""

    jobId: str
    """The job's id."""
    op: Literal["describeJobExecution"]
    thingName: str
    """The thing's name."""


class _OperatorRequestListJobsRequired(TypedDict):
    op: Literal["listJobs"]


class OperatorRequestListJobs(_OperatorRequestListJobsRequired, total=False):
    """Jobs in id order, narrowed by status, a page at a time."""

    maxResults: int
    """1–250 (AWS's range); every entry when absent."""
    nextToken: str
    """The token of the next page; None on the last (AWS's `nextToken`)."""
    status: JobStatus
    """Only those in this status."""


class _OperatorRequestListJobExecutionsRequired(TypedDict):
    op: Literal["listJobExecutions"]


class OperatorRequestListJobExecutions(_OperatorRequestListJobExecutionsRequired, total=False):
    """Every latest execution, narrowed by thing, job and status, in (thing, job) order, a page
    at a time.
    """

    jobId: str
    """The job's id."""
    maxResults: int
    """1–250 (AWS's range); every entry when absent."""
    nextToken: str
    """The token of the next page; None on the last (AWS's `nextToken`)."""
    status: JobExecutionStatus
    """Only those in this status."""
    thingName: str
    """The thing's name."""


class _OperatorRequestCreateThingGroupRequired(TypedDict):
    op: Literal["createThingGroup"]
    thingGroupName: str
    """The group's name (AWS's `thingGroupName`)."""


class OperatorRequestCreateThingGroup(_OperatorRequestCreateThingGroupRequired, total=False):
    """A static thing group (AWS's `CreateThingGroup`)."""

    thingGroupProperties: ThingGroupProperties
    """The group's properties (AWS's `thingGroupProperties`)."""


class OperatorRequestDeleteThingGroup(TypedDict):
    """Removes a group and its membership (jobs that targeted it keep their things)."""

    op: Literal["deleteThingGroup"]
    thingGroupName: str
    """The group's name (AWS's `thingGroupName`)."""


class OperatorRequestDescribeThingGroup(TypedDict):
    """A thing group (`describeThingGroup`)."""

    op: Literal["describeThingGroup"]
    thingGroupName: str
    """The group's name (AWS's `thingGroupName`)."""


class _OperatorRequestListThingGroupsRequired(TypedDict):
    op: Literal["listThingGroups"]


class OperatorRequestListThingGroups(_OperatorRequestListThingGroupsRequired, total=False):
    """Groups in name order, a page at a time."""

    maxResults: int
    """1–250 (AWS's range); every entry when absent."""
    nextToken: str
    """The token of the next page; None on the last (AWS's `nextToken`)."""


class OperatorRequestAddThingToThingGroup(Membership):
    """Adds a thing to a group (the group and the thing by name or ARN); continuous jobs
    on the group get an execution on it.
    """

    op: Literal["addThingToThingGroup"]


class OperatorRequestRemoveThingFromThingGroup(Membership):
    """Removes a thing from a group; its QUEUED executions of continuous jobs on the group
    become REMOVED.
    """

    op: Literal["removeThingFromThingGroup"]


class _OperatorRequestListThingsInThingGroupRequired(TypedDict):
    op: Literal["listThingsInThingGroup"]
    thingGroupName: str
    """The group's name (AWS's `thingGroupName`)."""


class OperatorRequestListThingsInThingGroup(
    _OperatorRequestListThingsInThingGroupRequired, total=False
):
    """A group's things in name order, a page at a time."""

    maxResults: int
    """1–250 (AWS's range); every entry when absent."""
    nextToken: str
    """The token of the next page; None on the last (AWS's `nextToken`)."""


class _OperatorRequestListNamedShadowsForThingRequired(TypedDict):
    op: Literal["listNamedShadowsForThing"]
    thingName: str
    """The thing (AWS's `thingName`)."""


class OperatorRequestListNamedShadowsForThing(
    _OperatorRequestListNamedShadowsForThingRequired, total=False
):
    """The names of a thing's named shadows in name order, a page at a time (AWS's
    `ListNamedShadowsForThing`, a REST call there: an operator call here).
    """

    maxResults: int
    """1–250 (AWS's range); every entry when absent."""
    nextToken: str
    """The token of the next page; None on the last (AWS's `nextToken`)."""


class OperatorRequestCreateJobTemplate(JobTemplate):
    """A job template (AWS's `CreateJobTemplate`): a document and configurations that
    `createJob` with `jobTemplateArn` starts from.
    """

    op: Literal["createJobTemplate"]


class OperatorRequestDescribeJobTemplate(TypedDict):
    """A job template (`describeJobTemplate`)."""

    jobTemplateId: str
    """The template's id (AWS's `jobTemplateId`)."""
    op: Literal["describeJobTemplate"]


class _OperatorRequestListJobTemplatesRequired(TypedDict):
    op: Literal["listJobTemplates"]


class OperatorRequestListJobTemplates(_OperatorRequestListJobTemplatesRequired, total=False):
    """Templates in id order, a page at a time."""

    maxResults: int
    """1–250 (AWS's range); every entry when absent."""
    nextToken: str
    """The token of the next page; None on the last (AWS's `nextToken`)."""


class OperatorRequestDeleteJobTemplate(TypedDict):
    """Delete a job template (`deleteJobTemplate`)."""

    jobTemplateId: str
    """The template's id (AWS's `jobTemplateId`)."""
    op: Literal["deleteJobTemplate"]


OperatorRequest = Union[
    "OperatorRequestCreateJob",
    "OperatorRequestUpdateJob",
    "OperatorRequestCancelJob",
    "OperatorRequestDeleteJob",
    "OperatorRequestCancelJobExecution",
    "OperatorRequestDeleteJobExecution",
    "OperatorRequestDescribeJob",
    "OperatorRequestDescribeJobExecution",
    "OperatorRequestListJobs",
    "OperatorRequestListJobExecutions",
    "OperatorRequestCreateThingGroup",
    "OperatorRequestDeleteThingGroup",
    "OperatorRequestDescribeThingGroup",
    "OperatorRequestListThingGroups",
    "OperatorRequestAddThingToThingGroup",
    "OperatorRequestRemoveThingFromThingGroup",
    "OperatorRequestListThingsInThingGroup",
    "OperatorRequestListNamedShadowsForThing",
    "OperatorRequestCreateJobTemplate",
    "OperatorRequestDescribeJobTemplate",
    "OperatorRequestListJobTemplates",
    "OperatorRequestDeleteJobTemplate",
]
"""One call of the operator API: `{"op": "createJob", ...}` with AWS's field names."""


class PendingJobs(TypedDict):
    """A thing's pending list (`get`): IN_PROGRESS and QUEUED executions, in order."""

    inProgressJobs: list[JobSummary]
    """Executions in progress (AWS's `inProgressJobs`)."""
    queuedJobs: list[JobSummary]
    """Executions queued (AWS's `queuedJobs`)."""


class RateIncreaseCriteria(TypedDict, total=False):
    """When an exponential rate goes up: each time this many more things were notified, or
    succeeded (one of the two).
    """

    numberOfNotifiedThings: int
    """After this many more things were notified (AWS's `numberOfNotifiedThings`)."""
    numberOfSucceededThings: int
    """After this many more things succeeded (AWS's `numberOfSucceededThings`)."""


class _RejectedRequired(TypedDict):
    code: str
    """AWS's error code (`InvalidRequest`, `VersionMismatch`, ...)."""
    message: str
    """What went wrong, for people."""


class Rejected(_RejectedRequired, total=False):
    """A `/rejected` reply's body."""

    executionState: ExecutionState
    """The execution's state, for state errors."""


class RetryConfig(TypedDict):
    """`jobExecutionsRetryConfig`."""

    criteriaList: list[RetryCriteria]
    """The criteria, each checked on its own (AWS's `criteriaList`)."""


class RetryCriteria(TypedDict):
    """How often executions that end with one type of failure are queued again."""

    failureType: FailureType
    """FAILED, TIMED_OUT or ALL (either)."""
    numberOfRetries: int
    """0–10; the criteria's sum at most 10."""


class RolloutConfig(TypedDict, total=False):
    """`jobExecutionsRolloutConfig`: how fast executions are queued."""

    exponentialRate: ExponentialRate
    """A rate that grows as things succeed (AWS's `exponentialRate`)."""
    maximumPerMinute: int
    """Things notified per minute at most (1–1000)."""


class _RolloutProgressRequired(TypedDict):
    notifiedThings: int
    """Things notified so far."""
    totalThings: int
    """Things the job targets in all."""


class RolloutProgress(_RolloutProgressRequired, total=False):
    """How far a job's rollout got (mqstore's, beside AWS's fields): things notified of the
    total, and the rate it is rolled out at now (absent: as fast as the broker takes it).
    """

    nextWindowAt: int
    """…or, outside them, when the next one opens."""
    ratePerMinute: float
    """Things notified per minute now; None when not limited."""
    windowClosesAt: int
    """With maintenance windows: when the open one closes (epoch seconds)…"""


class SchedulingConfig(TypedDict, total=False):
    """`schedulingConfig`: when a job starts and ends, and the windows it rolls out in. Times
    are UTC, `YYYY-MM-DDTHH:MM` (seconds and a `Z` allowed).
    """

    endBehavior: EndBehavior
    """What happens at `end_time` (AWS's `endBehavior`)."""
    endTime: str
    """When it ends (AWS's `endTime`, ISO 8601)."""
    maintenanceWindows: list[MaintenanceWindow]
    """When the rollout may notify things (AWS's `maintenanceWindows`)."""
    startTime: str
    """When the rollout starts (ISO 8601, UTC), or now."""


TargetSelection = Literal["SNAPSHOT", "CONTINUOUS"]
"""`targetSelection`: the things of a job's groups when it is created, or also those added
later.
"""


class _TemplateListingRequired(TypedDict):
    createdAt: int
    """When it was made, in seconds since the epoch (AWS's `createdAt`)."""
    jobTemplateArn: str
    """The template's ARN (AWS's `jobTemplateArn`)."""
    jobTemplateId: str
    """The template's id (AWS's `jobTemplateId`)."""


class TemplateListing(_TemplateListingRequired, total=False):
    """One entry of `listJobTemplates` (AWS's `JobTemplateSummary`)."""

    description: str
    """What it is for, for people (AWS's `description`)."""


class _TemplatesPageRequired(TypedDict):
    jobTemplates: list[TemplateListing]
    """This page's entries."""


class TemplatesPage(_TemplatesPageRequired, total=False):
    """A page of job templates: what `listJobTemplates` answers."""

    nextToken: str
    """The token of the next page; absent on the last (AWS's `nextToken`)."""


class ThingGroupDescription(TypedDict):
    """A thing group as `describeThingGroup` answers (AWS's fields)."""

    thingGroupArn: str
    """The group's ARN (AWS's `thingGroupArn`)."""
    thingGroupId: str
    """The group's id (AWS's `thingGroupId`)."""
    thingGroupMetadata: ThingGroupMetadata
    """When the group was made (AWS's `thingGroupMetadata`)."""
    thingGroupName: str
    """The group's name (AWS's `thingGroupName`)."""
    thingGroupProperties: ThingGroupProperties
    """The group's properties (AWS's `thingGroupProperties`)."""


class ThingGroupMetadata(TypedDict):
    """When a group was made (epoch seconds)."""

    creationDate: int
    """When it was made, in seconds since the epoch (AWS's `creationDate`)."""


class ThingGroupProperties(TypedDict, total=False):
    """A group's properties (AWS's; mqstore keeps the description)."""

    thingGroupDescription: str
    """What the group is for (AWS's `thingGroupDescription`)."""


class _ThingGroupsPageRequired(TypedDict):
    thingGroups: list[GroupListing]
    """This page's entries."""


class ThingGroupsPage(_ThingGroupsPageRequired, total=False):
    """A page of thing groups: what `listThingGroups` answers."""

    nextToken: str
    """The token of the next page; absent on the last (AWS's `nextToken`)."""


class _ThingsPageRequired(TypedDict):
    things: list[str]
    """This page's entries."""


class ThingsPage(_ThingsPageRequired, total=False):
    """A page of a group's things (their names): what `listThingsInThingGroup` answers."""

    nextToken: str
    """The token of the next page; absent on the last (AWS's `nextToken`)."""


class TimeoutConfig(TypedDict, total=False):
    """`timeoutConfig` of a job."""

    inProgressTimeoutInMinutes: int
    """An execution in progress longer than this times out (AWS's `inProgressTimeoutInMinutes`)."""


class UpdateAccepted(TypedDict, total=False):
    """What an accepted update answered."""

    executionState: ExecutionState
    """With `includeJobExecutionState`."""
    jobDocument: dict[str, Any]
    """With `includeJobDocument`."""
