// The jobs and commands wire types, generated from the Rust types in mqstore-core
// (core/src/wire_types.rs): do not edit. Change the Rust type and run
// `MQSTORE_UPDATE_WIRE_TYPES=1 cargo test -p mqstore-core --lib wire_types`.

/** What an abort does. */
export type AbortAction = "CANCEL";

/** `abortConfig`. */
export interface AbortConfig {
  /** The criteria, each checked on its own (AWS's `criteriaList`). */
  criteriaList: AbortCriteria[];
}

/**
 * When a job is aborted (canceled): once at least `minNumberOfExecutedThings` things ended
 * their execution and `thresholdPercentage` % of them or more ended with `failureType`.
 */
export interface AbortCriteria {
  /** CANCEL (AWS's only action). */
  action: AbortAction;
  /** Which ending counts (AWS's `failureType`). */
  failureType: FailureType;
  /** At least 1. */
  minNumberOfExecutedThings: number;
  /** 0–100, at most two decimals. */
  thresholdPercentage: number;
}

/** What a device answered, read by its profile. */
export interface CommandAnswer {
  /** An application error (Azure IoT Operations `AppErrCode`). */
  appErrorCode?: string;
  /** The application error's payload (`AppErrPayload`), when the device sent one. */
  appErrorPayload?: string;
  /** The device's own status code: `__stat`, a `{status}` topic segment, a JSON field. */
  code?: number;
  /** The answer's content type, when the device gave one. */
  contentType?: string;
  /** Why it failed or was rejected, in the device's words (`__stMsg`, `__propName=...`). */
  message?: string;
  /** The device's answer, as it sent it. */
  payload: string;
  /**
   * The device's reason code (AWS IoT commands' `statusReason.reasonCode`; its
   * `reasonDescription` is `Answer::message`), or the status word a topic profile read.
   */
  reasonCode?: string;
  /**
   * Typed results (AWS IoT commands' `result`: name → `{"s": …}`, `{"b": …}` or
   * `{"bin": base64}`), as the device sent them.
   */
  result?: unknown;
  /**
   * SUCCEEDED, FAILED or REJECTED; IN_PROGRESS for a progress report; TIMED_OUT when the
   * device itself says so (final, unlike the service's own timeout).
   */
  status: CommandStatus;
}

/** A stored command. */
export interface CommandDefinition {
  /** `[a-zA-Z0-9_-]{1,64}`. */
  commandId: string;
  /** When it was stored (ms since the epoch; set by the service). */
  createdMs?: number;
  /** What the command is for, for people. */
  description?: string;
  /** The template's parameters; one without a default must be given at start. */
  mandatoryParameters?: CommandParameter[];
  /** A fixed payload (exclusive with `payload_template`). */
  payload?: CommandPayload;
  /** A JSON text with `${aws:iot:commandexecution::parameter:NAME}` where parameters go. */
  payloadTemplate?: string;
}

/** The service's answer to a `DefinitionsRequest` (`__stat` 200). */
export type CommandDefinitionsAnswer =
  /** To `create` and `get`: the stored command. */
  | {
    /** The stored command (with its `createdMs`). */
    command: CommandDefinition;
  }
  /** To `list`: every stored command, by id. */
  | {
    /** The stored commands. */
    commands: CommandDefinition[];
  }
  /** To `delete`: whether there was one. */
  | {
    /** False when no command had the id. */
    deleted: boolean;
  };

/** A request on `DEFINITIONS_TOPIC`. */
export type CommandDefinitionsRequest =
  /** Store a command. */
  | {
    /** The command to store. */
    command: CommandDefinition;
    op: "create";
  }
  /** One stored command. */
  | {
    /** The stored command's id. */
    commandId: string;
    op: "get";
  }
  /** Every stored command. */
  | {
    op: "list";
  }
  /** Delete a stored command. */
  | {
    /** The stored command's id. */
    commandId: string;
    op: "delete";
  };

/** A template parameter and its default. */
export interface CommandParameter {
  /** Its value when a start gives none (`{"S": ...}`, `{"I": ...}`, ...). */
  defaultValue?: unknown;
  /** The parameter's name, as the template names it. */
  name: string;
}

/** A fixed payload: `content` as text, or base64 with `contentType` not JSON or text. */
export interface CommandPayload {
  /** The payload, as text (base64 for binary content types). */
  content: string;
  /** Its content type. */
  contentType?: string;
}

/**
 * A command's status record: the registry's entry while it waits, and what a status query
 * or a watch sees afterwards (until it is forgotten, three timeouts after it was sent).
 */
export interface CommandRecord {
  /** The device's last report (boxed: a record waiting for it stays small). */
  answer?: CommandAnswer;
  /** What the answer's topic must look like (an MQTT filter: `+` where a status goes). */
  answerFilter: string;
  /** The stored command it was started from (`definitions`), if any. */
  command?: string;
  /** Answers are matched by id (false: by topic only, the legacy mode). */
  correlated: boolean;
  /** When it times out, in ms since the epoch. */
  deadlineMs: number;
  /** Answers after the first (dropped, counted). */
  duplicates?: number;
  /** The command's id (a version 4 UUID). */
  id: string;
  /** The answer came after the timeout. */
  late?: boolean;
  /** The node whose caller waits for the answer. */
  node: string;
  /** The answer reached a node after the node waiting for it was gone. */
  orphaned?: boolean;
  /** The profile's name. */
  profile: string;
  /** When it was sent, in ms since the epoch. */
  sentMs: number;
  /** Where it is: SENT, DELIVERED, IN_PROGRESS, SUCCEEDED, FAILED, ... */
  status: CommandStatus;
  /** The device's command topic. */
  topic: string;
  /** When the record last changed, in ms since the epoch. */
  updatedMs: number;
}

/** Where an awaited command stands. */
export type CommandStatus =
  /** Published to the device; no answer yet. */
  | "SENT"
  /** The broker acknowledged the publish (PUBACK): the end of a one-way command. */
  | "DELIVERED"
  /**
   * The device reported that it is working on it (not final: the command stays open until
   * a final status or its timeout; each report is a progress event).
   */
  | "IN_PROGRESS"
  /** The device answered with success. */
  | "SUCCEEDED"
  /** The device answered with an error of its own (an application error, a failure code). */
  | "FAILED"
  /** The device (or its SDK) refused the request as malformed or unsupported: it did not run. */
  | "REJECTED"
  /**
   * No answer within the timeout. Not final: the command may have run, and an answer that
   * comes later replaces this status (marked `late`).
   */
  | "TIMED_OUT";

/** What happens at a job's `endTime`. */
export type EndBehavior =
  /** No new executions; those queued go on. */
  | "STOP_ROLLOUT"
  /** The job is canceled (QUEUED executions CANCELED). */
  | "CANCEL"
  /** The job is canceled with force (IN_PROGRESS executions CANCELED too). */
  | "FORCE_CANCEL";

/**
 * What an accepted start-next or describe answered: the execution, absent when the thing
 * has none pending.
 */
export interface ExecutionAccepted {
  /** The execution, or None when there is none. */
  execution?: JobExecution;
}

/** What `cancelJobExecution` takes. */
export interface ExecutionCancel {
  /** Refuse unless the execution still has this version (AWS's `expectedVersion`). */
  expectedVersion?: number;
  /** Also what is in progress (AWS's `force`). */
  force?: boolean;
  /** The job's id (AWS's `jobId`). */
  jobId: string;
  /** The device's own key/value details of its status (AWS's `statusDetails`). */
  statusDetails?: Record<string, string>;
  /** The thing whose execution to cancel. */
  thingName: string;
}

/** One entry of `listJobExecutions`: a thing's latest execution of a job. */
export interface ExecutionListing {
  /** Which execution of the job on this thing this is, from 1 (AWS's `executionNumber`). */
  executionNumber: number;
  /** The job's id (AWS's `jobId`). */
  jobId: string;
  /** When it last changed, in seconds since the epoch (AWS's `lastUpdatedAt`). */
  lastUpdatedAt: number;
  /** When the execution was queued, in seconds since the epoch (AWS's `queuedAt`). */
  queuedAt: number;
  /** When the execution started, in seconds since the epoch (AWS's `startedAt`). */
  startedAt?: number;
  /** The execution's status. */
  status: JobExecutionStatus;
  /** The thing's name (AWS's `thingName`). */
  thingName: string;
  /** The execution's version, raised by every update (AWS's `versionNumber`). */
  versionNumber: number;
}

/** An execution's `executionState` (update replies, and rejections). */
export interface ExecutionState {
  /** The execution's status. */
  status: JobExecutionStatus;
  /** The device's own key/value details of its status (AWS's `statusDetails`). */
  statusDetails?: Record<string, string>;
  /** The execution's version, raised by every update (AWS's `versionNumber`). */
  versionNumber: number;
}

/** A page of executions (each thing's latest of each job): what `listJobExecutions` answers. */
export interface ExecutionsPage {
  /** This page's entries. */
  executions: ExecutionListing[];
  /** The token of the next page; absent on the last (AWS's `nextToken`). */
  nextToken?: string;
}

/**
 * A rate that starts at `baseRatePerMinute` and is multiplied by `incrementFactor` each time
 * the criteria's count of things is reached (never above `maximumPerMinute`).
 */
export interface ExponentialRate {
  /** 1–1000. */
  baseRatePerMinute: number;
  /** 1.1–5, at most one decimal. */
  incrementFactor: number;
  /** When the rate grows (AWS's `rateIncreaseCriteria`). */
  rateIncreaseCriteria: RateIncreaseCriteria;
}

/** The execution failures a retry or an abort criterion counts. */
export type FailureType =
  /** The device reported FAILED. */
  | "FAILED"
  /** The device reported REJECTED. */
  | "REJECTED"
  /** The execution timed out. */
  | "TIMED_OUT"
  /** Any of them. */
  | "ALL";

/** One entry of `listThingGroups` (AWS's `GroupNameAndArn`). */
export interface GroupListing {
  /** The group's ARN (AWS's `groupArn`). */
  groupArn: string;
  /** The group's name (AWS's `groupName`). */
  groupName: string;
}

/** What `createJob` answers. */
export interface JobCreated {
  /** The job's id (AWS's `jobId`). */
  jobId: string;
  /** How many things it targets. */
  targets: number;
}

/**
 * A job as `describeJob` answers: AWS's `Job` (its document inside), with the counts of its
 * latest executions by status (`executions`) and its rollout's progress (`rollout`).
 */
export interface JobDescription {
  /** When the job is canceled for too many failures (AWS's `abortConfig`). */
  abortConfig?: AbortConfig;
  /** Why, for people (AWS's `comment`). */
  comment?: string;
  /** When it completed, in seconds since the epoch (AWS's `completedAt`). */
  completedAt?: number;
  /** Epoch seconds. */
  createdAt: number;
  /** What it is for, for people (AWS's `description`). */
  description?: string;
  /** The job document the devices get (AWS's `document`). */
  document: object;
  /** The values filled into its template's placeholders (AWS's `documentParameters`). */
  documentParameters?: Record<string, string>;
  /** How many of its latest executions are in each status. */
  executions: Record<string, number>;
  /** Canceled with `force` (AWS's `forceCanceled`). */
  forceCanceled?: boolean;
  /** The job's ARN (AWS's `jobArn`): `arn:aws:iot:mqstore:000000000000:job/{jobId}`. */
  jobArn: string;
  /** How often failed executions are retried (AWS's `jobExecutionsRetryConfig`). */
  jobExecutionsRetryConfig?: RetryConfig;
  /** How fast things are notified (AWS's `jobExecutionsRolloutConfig`). */
  jobExecutionsRolloutConfig?: RolloutConfig;
  /** The job's id (AWS's `jobId`). */
  jobId: string;
  /** How many executions are in each status (AWS's `jobProcessDetails`). */
  jobProcessDetails: JobProcessDetails;
  /** The template's ARN (AWS's `jobTemplateArn`). */
  jobTemplateArn?: string;
  /** When it last changed, in seconds since the epoch (AWS's `lastUpdatedAt`). */
  lastUpdatedAt: number;
  /** A code saying why, for tooling (AWS's `reasonCode`). */
  reasonCode?: string;
  /** How far its rollout got. */
  rollout: RolloutProgress;
  /** When it starts, ends, and may roll out (AWS's `schedulingConfig`). */
  schedulingConfig?: SchedulingConfig;
  /** The job's status. */
  status: JobStatus;
  /** `SNAPSHOT`, or `CONTINUOUS` for things added to its groups later (AWS's `targetSelection`). */
  targetSelection: TargetSelection;
  /** The things and groups it targets (names or ARNs). */
  targets: string[];
  /** When executions in progress time out (AWS's `timeoutConfig`). */
  timeoutConfig?: TimeoutConfig;
}

/** A `JobExecution` (start-next, describe, notify-next). */
export interface JobExecution {
  /** While IN_PROGRESS with a timer running. */
  approximateSecondsBeforeTimedOut?: number;
  /** Which execution of the job on this thing this is, from 1 (AWS's `executionNumber`). */
  executionNumber: number;
  /** The job document, unless the request asked to leave it out. */
  jobDocument?: object;
  /** The job's id (AWS's `jobId`). */
  jobId: string;
  /** When it last changed, in seconds since the epoch (AWS's `lastUpdatedAt`). */
  lastUpdatedAt: number;
  /** When the execution was queued, in seconds since the epoch (AWS's `queuedAt`). */
  queuedAt: number;
  /** When the execution started, in seconds since the epoch (AWS's `startedAt`). */
  startedAt?: number;
  /** The execution's status. */
  status: JobExecutionStatus;
  /** The device's own key/value details of its status (AWS's `statusDetails`). */
  statusDetails?: Record<string, string>;
  /** Absent from notify-next. */
  thingName?: string;
  /** The execution's version, raised by every update (AWS's `versionNumber`). */
  versionNumber: number;
}

/** A job execution's status. */
export type JobExecutionStatus =
  /** Waiting for the device to start it. */
  | "QUEUED"
  /** The device started it. */
  | "IN_PROGRESS"
  /** The device reported success. */
  | "SUCCEEDED"
  /** The device reported failure. */
  | "FAILED"
  /** The device refused it. */
  | "REJECTED"
  /** In progress longer than its timeout. */
  | "TIMED_OUT"
  /** Canceled by an operator (or an abort). */
  | "CANCELED"
  /** Its thing left the targeted group. */
  | "REMOVED";

/** One entry of `listJobs` (AWS's `JobSummary`, with the number of things). */
export interface JobListing {
  /** When it completed, in seconds since the epoch (AWS's `completedAt`). */
  completedAt?: number;
  /** When it was made, in seconds since the epoch (AWS's `createdAt`). */
  createdAt: number;
  /** The job's id (AWS's `jobId`). */
  jobId: string;
  /** When it last changed, in seconds since the epoch (AWS's `lastUpdatedAt`). */
  lastUpdatedAt: number;
  /** The job's status. */
  status: JobStatus;
  /** How many things it targets. */
  targets: number;
}

/** AWS's `jobProcessDetails`: things per status of their latest execution. */
export interface JobProcessDetails {
  /** Executions canceled. */
  numberOfCanceledThings: number;
  /** Executions that failed. */
  numberOfFailedThings: number;
  /** Executions in progress. */
  numberOfInProgressThings: number;
  /** Executions queued. */
  numberOfQueuedThings: number;
  /** Executions the device rejected. */
  numberOfRejectedThings: number;
  /** Executions removed (their thing left the group, or was deleted). */
  numberOfRemovedThings: number;
  /** After this many more things succeeded (AWS's `numberOfSucceededThings`). */
  numberOfSucceededThings: number;
  /** Executions that timed out. */
  numberOfTimedOutThings: number;
}

/** What an operator asks for when creating a job: AWS's `CreateJob` fields. */
export interface JobSpec {
  /** When the job is canceled for too many failures (AWS's `abortConfig`). */
  abortConfig?: AbortConfig;
  /** What it is for, for people (AWS's `description`). */
  description?: string;
  /** A JSON object (absent when it comes from the template). */
  document?: object;
  /** Values for the document's `${aws:iot:parameter:NAME}` placeholders. */
  documentParameters?: Record<string, string>;
  /** How often failed executions are retried (AWS's `jobExecutionsRetryConfig`). */
  jobExecutionsRetryConfig?: RetryConfig;
  /** How fast things are notified (AWS's `jobExecutionsRolloutConfig`). */
  jobExecutionsRolloutConfig?: RolloutConfig;
  /** The job's id (AWS's `jobId`). */
  jobId: string;
  /** The template it starts from (its id, `jobtemplate/ID` or AWS's ARN). */
  jobTemplateArn?: string;
  /** When it starts, ends, and may roll out (AWS's `schedulingConfig`). */
  schedulingConfig?: SchedulingConfig;
  /** SNAPSHOT (the default) or CONTINUOUS: whether things added to its groups later get it. */
  targetSelection?: TargetSelection;
  /**
   * The things and thing groups it runs on: names (a thing), `thing/NAME`,
   * `thinggroup/NAME`, or AWS's ARNs of either.
   */
  targets: string[];
  /** When executions in progress time out (AWS's `timeoutConfig`). */
  timeoutConfig?: TimeoutConfig;
}

/** A job's status. */
export type JobStatus =
  /** Waiting for `schedulingConfig.startTime`. */
  | "SCHEDULED"
  /** Rolling out, or executions still open. */
  | "IN_PROGRESS"
  /** Canceled. */
  | "CANCELED"
  /** Every execution ended and its rollout is done. */
  | "COMPLETED"
  /** Being deleted. */
  | "DELETION_IN_PROGRESS";

/** A `JobExecutionSummary`: an entry of a pending list. */
export interface JobSummary {
  /** Which execution of the job on this thing this is, from 1 (AWS's `executionNumber`). */
  executionNumber: number;
  /** The job's id (AWS's `jobId`). */
  jobId: string;
  /** When it last changed, in seconds since the epoch (AWS's `lastUpdatedAt`). */
  lastUpdatedAt: number;
  /** Epoch seconds. */
  queuedAt: number;
  /** When the execution started, in seconds since the epoch (AWS's `startedAt`). */
  startedAt?: number;
  /** The execution's version, raised by every update (AWS's `versionNumber`). */
  versionNumber: number;
}

/** A job template: what `createJobTemplate` takes and `describeJobTemplate` answers. */
export interface JobTemplate {
  /** When the job is canceled for too many failures (AWS's `abortConfig`). */
  abortConfig?: AbortConfig;
  /** Answered by `describeJobTemplate` (epoch seconds). */
  createdAt?: number;
  /** What it is for, for people (AWS's `description`). */
  description?: string;
  /**
   * A JSON object; may hold `${aws:iot:parameter:NAME}` placeholders that a job's
   * `documentParameters` fill.
   */
  document?: object;
  /** How often failed executions are retried (AWS's `jobExecutionsRetryConfig`). */
  jobExecutionsRetryConfig?: RetryConfig;
  /** How fast things are notified (AWS's `jobExecutionsRolloutConfig`). */
  jobExecutionsRolloutConfig?: RolloutConfig;
  /** Answered by `describeJobTemplate`: `arn:aws:iot:…:jobtemplate/{id}`. */
  jobTemplateArn?: string;
  /** The template's id (AWS's `jobTemplateId`). */
  jobTemplateId: string;
  /** When the rollout may notify things (AWS's `maintenanceWindows`). */
  maintenanceWindows?: MaintenanceWindow[];
  /** When executions in progress time out (AWS's `timeoutConfig`). */
  timeoutConfig?: TimeoutConfig;
}

/** What `updateJob` changes: the settings given (absent: unchanged). */
export interface JobUpdate {
  /** When the job is canceled for too many failures (AWS's `abortConfig`). */
  abortConfig?: AbortConfig;
  /** What it is for, for people (AWS's `description`). */
  description?: string;
  /** How often failed executions are retried (AWS's `jobExecutionsRetryConfig`). */
  jobExecutionsRetryConfig?: RetryConfig;
  /** How fast things are notified (AWS's `jobExecutionsRolloutConfig`). */
  jobExecutionsRolloutConfig?: RolloutConfig;
  /** The job to change. */
  jobId: string;
  /** When executions in progress time out (AWS's `timeoutConfig`). */
  timeoutConfig?: TimeoutConfig;
}

/** A page of jobs: what `listJobs` answers. */
export interface JobsPage {
  /** This page's entries. */
  jobs: JobListing[];
  /** The token of the next page; absent on the last (AWS's `nextToken`). */
  nextToken?: string;
}

/**
 * A recurring window the rollout runs in: from each time its cron fires
 * (`cron(min hour day-of-month month day-of-week year)`, AWS's form) for its duration.
 */
export interface MaintenanceWindow {
  /** How long the window stays open (AWS's `durationInMinutes`). */
  durationInMinutes: number;
  /** When the window opens: AWS's cron expression, UTC. */
  startTime: string;
}

/**
 * Which group and which thing an `addThingToThingGroup` or `removeThingFromThingGroup`
 * names: each by name or by ARN, as AWS takes them.
 */
export interface Membership {
  /** The thing's ARN (AWS's `thingArn`). */
  thingArn?: string;
  /** The group's ARN (AWS's `thingGroupArn`). */
  thingGroupArn?: string;
  /** The group's name (AWS's `thingGroupName`). */
  thingGroupName?: string;
  /** The thing's name (AWS's `thingName`). */
  thingName?: string;
}

/**
 * A page of a thing's named shadows: what `listNamedShadowsForThing` answers (AWS's
 * `ListNamedShadowsForThing` response).
 */
export interface NamedShadowsPage {
  /** The token of the next page; absent on the last (AWS's `nextToken`). */
  nextToken?: string;
  /** The shadows' names (deleted ones left out). */
  results: string[];
  /** When the list was read, in epoch seconds. */
  timestamp: number;
}

/** `notify`: the thing's pending list changed membership; the first ten of it. */
export interface Notify {
  /** The thing's pending executions, by status. */
  jobs: NotifyJobs;
  /** When it was published, in seconds since the epoch. */
  timestamp: number;
}

/** The executions of a `notify`, by status (a status without executions is absent). */
export interface NotifyJobs {
  /** Executions in progress (AWS's `IN_PROGRESS`). */
  IN_PROGRESS?: JobSummary[];
  /** Executions queued (AWS's `QUEUED`). */
  QUEUED?: JobSummary[];
}

/** `notify-next`: the first entry of the pending list changed; absent when it became empty. */
export interface NotifyNext {
  /** The next execution to run, or None when nothing is pending. */
  execution?: JobExecution;
  /** When it was published, in seconds since the epoch. */
  timestamp: number;
}

/** One call of the operator API: `{"op": "createJob", ...}` with AWS's field names. */
export type OperatorRequest =
  /** Create a job (`createJob`). */
  | JobSpec & {
    op: "createJob";
  }
  /**
   * Changes what AWS's `UpdateJob` changes: the description and the timeout, retry,
   * rollout and abort configurations (absent fields stay as they are).
   */
  | JobUpdate & {
    op: "updateJob";
  }
  /**
   * The job becomes CANCELED: QUEUED executions become CANCELED; IN_PROGRESS ones too with
   * `force`.
   */
  | {
    /** Why, for people (AWS's `comment`). */
    comment?: string;
    /** Also what is in progress (AWS's `force`). */
    force?: boolean;
    /** The job's id. */
    jobId: string;
    op: "cancelJob";
    /** A code saying why, for tooling (AWS's `reasonCode`). */
    reasonCode?: string;
  }
  /** Deletes a job and its executions (`force` when some are IN_PROGRESS). */
  | {
    /** Also what is in progress (AWS's `force`). */
    force?: boolean;
    /** The job's id. */
    jobId: string;
    op: "deleteJob";
  }
  /**
   * One thing's execution becomes CANCELED (`force` for an IN_PROGRESS one;
   * `expectedVersion` as in the device API).
   */
  | ExecutionCancel & {
    op: "cancelJobExecution";
  }
  /** Removes one execution (`force` for an IN_PROGRESS one). */
  | {
    /** Also what is in progress (AWS's `force`). */
    force?: boolean;
    /** The job's id. */
    jobId: string;
    op: "deleteJobExecution";
    /** The thing's name. */
    thingName: string;
  }
  /** A job (`describeJob`). */
  | {
    /** The job's id. */
    jobId: string;
    op: "describeJob";
  }
  /** A thing's execution of a job (`describeJobExecution`). */
  | {
    /** The job's id. */
    jobId: string;
    op: "describeJobExecution";
    /** The thing's name. */
    thingName: string;
  }
  /** Jobs in id order, narrowed by status, a page at a time. */
  | {
    /** 1–250 (AWS's range); every entry when absent. */
    maxResults?: number;
    /** The token of the next page; None on the last (AWS's `nextToken`). */
    nextToken?: string;
    op: "listJobs";
    /** Only those in this status. */
    status?: JobStatus;
  }
  /**
   * Every latest execution, narrowed by thing, job and status, in (thing, job) order, a page
   * at a time.
   */
  | {
    /** The job's id. */
    jobId?: string;
    /** 1–250 (AWS's range); every entry when absent. */
    maxResults?: number;
    /** The token of the next page; None on the last (AWS's `nextToken`). */
    nextToken?: string;
    op: "listJobExecutions";
    /** Only those in this status. */
    status?: JobExecutionStatus;
    /** The thing's name. */
    thingName?: string;
  }
  /** A static thing group (AWS's `CreateThingGroup`). */
  | {
    op: "createThingGroup";
    /** The group's name (AWS's `thingGroupName`). */
    thingGroupName: string;
    /** The group's properties (AWS's `thingGroupProperties`). */
    thingGroupProperties?: ThingGroupProperties;
  }
  /** Removes a group and its membership (jobs that targeted it keep their things). */
  | {
    op: "deleteThingGroup";
    /** The group's name (AWS's `thingGroupName`). */
    thingGroupName: string;
  }
  /** A thing group (`describeThingGroup`). */
  | {
    op: "describeThingGroup";
    /** The group's name (AWS's `thingGroupName`). */
    thingGroupName: string;
  }
  /** Groups in name order, a page at a time. */
  | {
    /** 1–250 (AWS's range); every entry when absent. */
    maxResults?: number;
    /** The token of the next page; None on the last (AWS's `nextToken`). */
    nextToken?: string;
    op: "listThingGroups";
  }
  /**
   * Adds a thing to a group (the group and the thing by name or ARN); continuous jobs
   * on the group get an execution on it.
   */
  | Membership & {
    op: "addThingToThingGroup";
  }
  /**
   * Removes a thing from a group; its QUEUED executions of continuous jobs on the group
   * become REMOVED.
   */
  | Membership & {
    op: "removeThingFromThingGroup";
  }
  /** A group's things in name order, a page at a time. */
  | {
    /** 1–250 (AWS's range); every entry when absent. */
    maxResults?: number;
    /** The token of the next page; None on the last (AWS's `nextToken`). */
    nextToken?: string;
    op: "listThingsInThingGroup";
    /** The group's name (AWS's `thingGroupName`). */
    thingGroupName: string;
  }
  /**
   * The names of a thing's named shadows in name order, a page at a time (AWS's
   * `ListNamedShadowsForThing`, a REST call there: an operator call here).
   */
  | {
    /** 1–250 (AWS's range); every entry when absent. */
    maxResults?: number;
    /** The token of the next page; None on the last (AWS's `nextToken`). */
    nextToken?: string;
    op: "listNamedShadowsForThing";
    /** The thing (AWS's `thingName`). */
    thingName: string;
  }
  /**
   * A job template (AWS's `CreateJobTemplate`): a document and configurations that
   * `createJob` with `jobTemplateArn` starts from.
   */
  | JobTemplate & {
    op: "createJobTemplate";
  }
  /** A job template (`describeJobTemplate`). */
  | {
    /** The template's id (AWS's `jobTemplateId`). */
    jobTemplateId: string;
    op: "describeJobTemplate";
  }
  /** Templates in id order, a page at a time. */
  | {
    /** 1–250 (AWS's range); every entry when absent. */
    maxResults?: number;
    /** The token of the next page; None on the last (AWS's `nextToken`). */
    nextToken?: string;
    op: "listJobTemplates";
  }
  /** Delete a job template (`deleteJobTemplate`). */
  | {
    /** The template's id (AWS's `jobTemplateId`). */
    jobTemplateId: string;
    op: "deleteJobTemplate";
  };

/** A thing's pending list (`get`): IN_PROGRESS and QUEUED executions, in order. */
export interface PendingJobs {
  /** Executions in progress (AWS's `inProgressJobs`). */
  inProgressJobs: JobSummary[];
  /** Executions queued (AWS's `queuedJobs`). */
  queuedJobs: JobSummary[];
}

/**
 * When an exponential rate goes up: each time this many more things were notified, or
 * succeeded (one of the two).
 */
export interface RateIncreaseCriteria {
  /** After this many more things were notified (AWS's `numberOfNotifiedThings`). */
  numberOfNotifiedThings?: number;
  /** After this many more things succeeded (AWS's `numberOfSucceededThings`). */
  numberOfSucceededThings?: number;
}

/** A `/rejected` reply's body. */
export interface Rejected {
  /** AWS's error code (`InvalidRequest`, `VersionMismatch`, ...). */
  code: string;
  /** The execution's state, for state errors. */
  executionState?: ExecutionState;
  /** What went wrong, for people. */
  message: string;
}

/** `jobExecutionsRetryConfig`. */
export interface RetryConfig {
  /** The criteria, each checked on its own (AWS's `criteriaList`). */
  criteriaList: RetryCriteria[];
}

/** How often executions that end with one type of failure are queued again. */
export interface RetryCriteria {
  /** FAILED, TIMED_OUT or ALL (either). */
  failureType: FailureType;
  /** 0–10; the criteria's sum at most 10. */
  numberOfRetries: number;
}

/** `jobExecutionsRolloutConfig`: how fast executions are queued. */
export interface RolloutConfig {
  /** A rate that grows as things succeed (AWS's `exponentialRate`). */
  exponentialRate?: ExponentialRate;
  /** Things notified per minute at most (1–1000). */
  maximumPerMinute?: number;
}

/**
 * How far a job's rollout got (mqstore's, beside AWS's fields): things notified of the
 * total, and the rate it is rolled out at now (absent: as fast as the broker takes it).
 */
export interface RolloutProgress {
  /** …or, outside them, when the next one opens. */
  nextWindowAt?: number;
  /** Things notified so far. */
  notifiedThings: number;
  /** Things notified per minute now; None when not limited. */
  ratePerMinute?: number;
  /** Things the job targets in all. */
  totalThings: number;
  /** With maintenance windows: when the open one closes (epoch seconds)… */
  windowClosesAt?: number;
}

/**
 * `schedulingConfig`: when a job starts and ends, and the windows it rolls out in. Times
 * are UTC, `YYYY-MM-DDTHH:MM` (seconds and a `Z` allowed).
 */
export interface SchedulingConfig {
  /** What happens at `end_time` (AWS's `endBehavior`). */
  endBehavior?: EndBehavior;
  /** When it ends (AWS's `endTime`, ISO 8601). */
  endTime?: string;
  /** When the rollout may notify things (AWS's `maintenanceWindows`). */
  maintenanceWindows?: MaintenanceWindow[];
  /** When the rollout starts (ISO 8601, UTC), or now. */
  startTime?: string;
}

/**
 * `targetSelection`: the things of a job's groups when it is created, or also those added
 * later.
 */
export type TargetSelection =
  /** The things targeted when the job was made. */
  | "SNAPSHOT"
  /** Also things added to its groups later. */
  | "CONTINUOUS";

/** One entry of `listJobTemplates` (AWS's `JobTemplateSummary`). */
export interface TemplateListing {
  /** When it was made, in seconds since the epoch (AWS's `createdAt`). */
  createdAt: number;
  /** What it is for, for people (AWS's `description`). */
  description?: string;
  /** The template's ARN (AWS's `jobTemplateArn`). */
  jobTemplateArn: string;
  /** The template's id (AWS's `jobTemplateId`). */
  jobTemplateId: string;
}

/** A page of job templates: what `listJobTemplates` answers. */
export interface TemplatesPage {
  /** This page's entries. */
  jobTemplates: TemplateListing[];
  /** The token of the next page; absent on the last (AWS's `nextToken`). */
  nextToken?: string;
}

/** A thing group as `describeThingGroup` answers (AWS's fields). */
export interface ThingGroupDescription {
  /** The group's ARN (AWS's `thingGroupArn`). */
  thingGroupArn: string;
  /** The group's id (AWS's `thingGroupId`). */
  thingGroupId: string;
  /** When the group was made (AWS's `thingGroupMetadata`). */
  thingGroupMetadata: ThingGroupMetadata;
  /** The group's name (AWS's `thingGroupName`). */
  thingGroupName: string;
  /** The group's properties (AWS's `thingGroupProperties`). */
  thingGroupProperties: ThingGroupProperties;
}

/** When a group was made (epoch seconds). */
export interface ThingGroupMetadata {
  /** When it was made, in seconds since the epoch (AWS's `creationDate`). */
  creationDate: number;
}

/** A group's properties (AWS's; mqstore keeps the description). */
export interface ThingGroupProperties {
  /** What the group is for (AWS's `thingGroupDescription`). */
  thingGroupDescription?: string;
}

/** A page of thing groups: what `listThingGroups` answers. */
export interface ThingGroupsPage {
  /** The token of the next page; absent on the last (AWS's `nextToken`). */
  nextToken?: string;
  /** This page's entries. */
  thingGroups: GroupListing[];
}

/** A page of a group's things (their names): what `listThingsInThingGroup` answers. */
export interface ThingsPage {
  /** The token of the next page; absent on the last (AWS's `nextToken`). */
  nextToken?: string;
  /** This page's entries. */
  things: string[];
}

/** `timeoutConfig` of a job. */
export interface TimeoutConfig {
  /** An execution in progress longer than this times out (AWS's `inProgressTimeoutInMinutes`). */
  inProgressTimeoutInMinutes?: number;
}

/** What an accepted update answered. */
export interface UpdateAccepted {
  /** With `includeJobExecutionState`. */
  executionState?: ExecutionState;
  /** With `includeJobDocument`. */
  jobDocument?: object;
}
