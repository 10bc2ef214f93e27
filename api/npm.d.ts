// index.d.ts
import * as wasm from "../pkg/mqstore_wasm.js";
import type { CommandDefinition, CommandRecord, ExecutionListing, ExecutionsPage, JobDescription, JobExecution, JobExecutionStatus, JobListing, JobSpec, JobStatus, JobSummary, JobTemplate, JobUpdate, JobsPage, PendingJobs, TemplatesPage, ThingGroupDescription, ThingGroupsPage, ThingsPage, UpdateAccepted } from "./wire.js";
export type * from "./wire.js";
export { ClientCore, Hlc, LeaseTerms } from "../pkg/mqstore_wasm.js";
export * from "./errors.js";
export declare function init(source?: URL | Response | BufferSource): Promise<void>;
export type Bytes = Uint8Array | string;
export type Request = {
    op: "SET";
    key: Bytes;
    value: Bytes;
    condition?: "NX" | "NEX";
    pxMs?: number;
} | {
    op: "GET" | "DEL";
    key: Bytes;
} | {
    op: "VDEL";
    key: Bytes;
    value: Bytes;
} | {
    op: "KEYNOTIFY";
    key: Bytes;
    stop?: boolean;
} | {
    op: "SCAN";
    pattern: Bytes;
    token?: Bytes;
};
export type Response = {
    kind: "ok" | "not_applied" | "absent";
} | {
    kind: "deleted";
    count: number;
} | {
    kind: "value";
    value: Uint8Array;
} | {
    kind: "keys";
    keys: Uint8Array[];
    token?: Uint8Array;
} | {
    kind: "error";
    text: string;
    code: number;
};
export type Notification = {
    op: "SET";
    value: Uint8Array;
} | {
    op: "DELETE";
};
declare function decodeResponse(bytes: Uint8Array): Response;
export declare const codec: {
    encodeRequest: (request: Request) => Uint8Array;
    decodeRequest: (bytes: Uint8Array) => Request;
    decodeResponse: typeof decodeResponse;
    decodeNotification: (bytes: Uint8Array) => Notification;
    notifyTopic: (clientId: string, key: Bytes) => string;
    invokeTopic: () => string;
};
export declare function errorKinds(): Array<{
    code: number;
    name: string;
}>;
export declare function parseHlc(text: string): wasm.Hlc;
export interface ConnectOptions {
    clientId?: string;
    username?: string;
    password?: string;
    timeoutMs?: number;
    reconnectMs?: number;
    tls?: TlsOptions;
}
export type Pem = string | Uint8Array;
export interface TlsOptions {
    ca?: Pem;
    cert?: Pem;
    key?: Pem;
    passphrase?: string;
}
export interface SetOptions {
    nx?: boolean;
    nex?: boolean;
    expiresMs?: number;
    persist?: boolean;
    fencingToken?: wasm.Hlc;
}
export interface SetResult {
    applied: boolean;
    version: wasm.Hlc | null;
}
export interface Versioned {
    value: Uint8Array;
    readonly text: string;
    version: wasm.Hlc | null;
}
export interface DeleteResult {
    outcome: "deleted" | "absent" | "value_mismatch";
    version: wasm.Hlc | null;
}
export interface Change {
    key: Uint8Array;
    value: Uint8Array | null;
    readonly text: string | null;
    version: wasm.Hlc | null;
    synthetic: boolean;
    gap: boolean;
}
type Completed = {
    kind: "completed";
    call: number;
    op: string;
    error?: Error & {
        code: number;
    };
    response?: Response;
    version?: wasm.Hlc | null;
    applied?: boolean;
    deleted?: DeleteResult["outcome"];
    result?: any;
};
export declare class Client {
    #private;
    readonly clientId: string;
    private constructor();
    static connect(url: string, options?: ConnectOptions): Promise<Client>;
    set(key: Bytes, value: Bytes, options?: SetOptions): Promise<SetResult>;
    get(key: Bytes): Promise<Versioned | null>;
    del(key: Bytes, options?: {
        fencingToken?: wasm.Hlc;
    }): Promise<DeleteResult>;
    vdel(key: Bytes, value: Bytes, options?: {
        fencingToken?: wasm.Hlc;
    }): Promise<DeleteResult>;
    scan(pattern: Bytes): Promise<Uint8Array[]>;
    onChange(key: Bytes, onChange: (change: Change) => void): Promise<() => Promise<void>>;
    observe(key: Bytes): Promise<AsyncIterableIterator<Change>>;
    lease(key: Bytes, ttlMs: number, options?: {
        waitMs?: number;
    }): Promise<Lease | null>;
    lead(key: Bytes, ttlMs: number): Promise<Lease>;
    createJob(spec: JobSpec & JobShorthands): Promise<void>;
    cancelJob(jobId: string, options?: {
        force?: boolean;
        reasonCode?: string;
        comment?: string;
    }): Promise<void>;
    updateJob(update: JobUpdate): Promise<void>;
    deleteJob(jobId: string, options?: {
        force?: boolean;
    }): Promise<void>;
    cancelJobExecution(jobId: string, thing: string, options?: {
        force?: boolean;
        expectedVersion?: number;
        statusDetails?: Record<string, string>;
    }): Promise<void>;
    deleteJobExecution(jobId: string, thing: string, options?: {
        force?: boolean;
    }): Promise<void>;
    describeJob(jobId: string): Promise<JobDescription>;
    describeJobExecution(jobId: string, thing: string): Promise<JobExecution>;
    listJobs(): Promise<JobListing[]>;
    listJobsPage(page?: {
        status?: JobStatus;
        maxResults?: number;
        nextToken?: string;
    }): Promise<JobsPage>;
    listJobExecutionsPage(page?: {
        thing?: string;
        jobId?: string;
        status?: JobExecutionStatus;
        maxResults?: number;
        nextToken?: string;
    }): Promise<ExecutionsPage>;
    jobsOperate(op: string, args?: object): Promise<any>;
    createThingGroup(name: string, options?: {
        description?: string;
    }): Promise<ThingGroupDescription>;
    deleteThingGroup(name: string): Promise<void>;
    describeThingGroup(name: string): Promise<ThingGroupDescription>;
    listThingGroups(page?: {
        maxResults?: number;
        nextToken?: string;
    }): Promise<ThingGroupsPage>;
    addThingToThingGroup(group: string, thing: string): Promise<void>;
    removeThingFromThingGroup(group: string, thing: string): Promise<void>;
    listThingsInThingGroup(group: string, page?: {
        maxResults?: number;
        nextToken?: string;
    }): Promise<ThingsPage>;
    createJobTemplate(template: JobTemplate): Promise<string>;
    describeJobTemplate(id: string): Promise<JobTemplate>;
    listJobTemplates(page?: {
        maxResults?: number;
        nextToken?: string;
    }): Promise<TemplatesPage>;
    deleteJobTemplate(id: string): Promise<void>;
    listJobExecutions(filter?: {
        thing?: string;
        jobId?: string;
        status?: JobExecutionStatus;
    }): Promise<ExecutionListing[]>;
    jobs(thing: string): Promise<Jobs>;
    shadow(thing: string, name?: string): Promise<Shadow>;
    command(topic: string, payload: Bytes, options?: CommandOptions): Promise<CommandReply>;
    startCommand(commandId: string, target: string, parameters?: Record<string, unknown>, options?: {
        timeoutMs?: number;
        mode?: "await" | "oneway" | "detached";
    }): Promise<CommandReply>;
    defineCommand(command: CommandDefinition): Promise<CommandDefinition>;
    commandDefinition(commandId: string): Promise<CommandDefinition>;
    commandDefinitions(): Promise<CommandDefinition[]>;
    deleteCommandDefinition(commandId: string): Promise<boolean>;
    commandStatus(id: string): Promise<CommandRecord>;
    watchCommands(onRecord: (record: CommandRecord) => void): Promise<() => void>;
    watchKeyspace(onEvent: (event: KeyspaceEvent) => void, onResumed?: () => void): Promise<() => void>;
    close(): Promise<void>;
}
export declare class Lease {
    #private;
    readonly fencingToken: wasm.Hlc;
    constructor(token: wasm.Hlc, release: () => Promise<Completed>);
    get held(): boolean;
    stopRenewing(): void;
    release(): Promise<boolean>;
}
export interface JobShorthands {
    inProgressTimeoutMinutes?: number;
    maxRetries?: number;
    maxPerMinute?: number;
}
export type JobLifecycle = JobStatus;
export type ThingGroup = ThingGroupDescription;
export interface KeyspaceEvent {
    key: Uint8Array;
    created: boolean;
}
export type JobNotification = {
    kind: "notify";
    thing: string;
    in_progress: JobSummary[];
    queued: JobSummary[];
} | {
    kind: "notify-next";
    thing: string;
    execution: JobExecution | null;
};
export interface ExecutionUpdate {
    jobId: string;
    status?: "IN_PROGRESS" | "SUCCEEDED" | "FAILED" | "REJECTED";
    statusDetails?: Record<string, string>;
    expectedVersion?: number;
    executionNumber?: number;
    stepTimeoutMinutes?: number;
    includeState?: boolean;
    includeDocument?: boolean;
}
export declare class Jobs {
    #private;
    readonly thing: string;
    constructor(thing: string, device: (api: string, args: object) => Promise<any>, listen: (listener: (n: JobNotification) => void) => () => void);
    pending(): Promise<PendingJobs>;
    startNext(options?: {
        statusDetails?: Record<string, string>;
        stepTimeoutMinutes?: number;
    }): Promise<JobExecution | null>;
    describe(jobId: string): Promise<JobExecution>;
    describeNext(): Promise<JobExecution | null>;
    update(update: ExecutionUpdate): Promise<UpdateAccepted>;
    onNotification(onNotification: (notification: JobNotification) => void): () => void;
}
export interface ShadowNotification {
    stream: "delta" | "documents";
    body: any;
}
export declare class Shadow {
    #private;
    readonly thing: string;
    readonly name: string | null;
    constructor(thing: string, name: string | null, request: (op: string, body?: object) => Promise<any>, listen: (listener: (n: ShadowNotification) => void) => () => void);
    get(): Promise<any>;
    update(state: object, options?: {
        version?: number;
    }): Promise<any>;
    delete(): Promise<any>;
    onNotification(onNotification: (notification: ShadowNotification) => void): () => void;
}
export interface CommandOptions {
    profile?: string;
    timeoutMs?: number;
    mode?: "await" | "oneway" | "detached";
    contentType?: string;
    headers?: Record<string, string>;
}
export interface CommandReply {
    id: string;
    status: "SUCCEEDED" | "DELIVERED" | "SENT";
    payload: Uint8Array;
    contentType?: string;
    deviceStatus?: number;
}
// errors.d.ts
export declare class MqstoreError extends Error {
    readonly code: number;
    constructor(message: string, code: number);
}
export declare class InvalidArgumentError extends MqstoreError {
    constructor(message: string);
}
export declare class InternalError extends MqstoreError {
    constructor(message: string);
}
export declare class ServiceError extends MqstoreError {
    readonly text: string;
    constructor(message: string, code?: number, text?: string);
}
export declare class TimestampSkewError extends ServiceError {
    constructor(message: string, text?: string);
}
export declare class FencingTokenRequiredError extends ServiceError {
    constructor(message: string, text?: string);
}
export declare class FencingTokenSkewError extends ServiceError {
    constructor(message: string, text?: string);
}
export declare class FencingTokenLowerVersionError extends ServiceError {
    constructor(message: string, text?: string);
}
export declare class QuotaExceededError extends ServiceError {
    constructor(message: string, text?: string);
}
export declare class RequestSyntaxError extends ServiceError {
    constructor(message: string, text?: string);
}
export declare class NotAuthorizedError extends ServiceError {
    constructor(message: string, text?: string);
}
export declare class UnknownCommandError extends ServiceError {
    constructor(message: string, text?: string);
}
export declare class WrongNumberOfArgumentsError extends ServiceError {
    constructor(message: string, text?: string);
}
export declare class MissingTimestampError extends ServiceError {
    constructor(message: string, text?: string);
}
export declare class MalformedTimestampError extends ServiceError {
    constructor(message: string, text?: string);
}
export declare class KeyLengthZeroError extends ServiceError {
    constructor(message: string, text?: string);
}
export declare class NotificationTopicTooLongError extends ServiceError {
    constructor(message: string, text?: string);
}
export declare class ResponseTooLargeError extends ServiceError {
    constructor(message: string, text?: string);
}
export declare class UnknownServiceError extends ServiceError {
    constructor(message: string, text?: string);
}
export declare class StatusError extends MqstoreError {
    readonly status: number | undefined;
    constructor(message: string, status?: number);
}
export declare class RequestTimeoutError extends MqstoreError {
    constructor(message: string);
}
export declare class ConnectionLostError extends MqstoreError {
    constructor(message: string, code?: number);
}
export declare class MalformedAnswerError extends MqstoreError {
    constructor(message: string);
}
export declare class UnexpectedAnswerError extends MqstoreError {
    constructor(message: string);
}
export declare class ClockError extends MqstoreError {
    constructor(message: string);
}
export declare class BrokerUnreachableError extends MqstoreError {
    constructor(message: string);
}
export declare class BrokerRefusedError extends MqstoreError {
    constructor(message: string);
}
export declare class BrokerProtocolError extends ConnectionLostError {
    constructor(message: string);
}
export declare class RequestTooLargeError extends MqstoreError {
    constructor(message: string);
}
export declare class BrokerDisconnectedError extends ConnectionLostError {
    constructor(message: string);
}
export declare class JobsError extends MqstoreError {
    readonly jobsCode: string;
    constructor(message: string, jobsCode?: string);
}
export declare class CommandError extends MqstoreError {
    readonly commandId: string;
    constructor(message: string, code: number, commandId?: string);
}
export declare class CommandFailedError extends CommandError {
    constructor(message: string, commandId?: string);
}
export declare class CommandRejectedError extends CommandError {
    constructor(message: string, commandId?: string);
}
export declare class PublishRefusedError extends MqstoreError {
    readonly reasonCode: number | undefined;
    constructor(message: string, reasonCode?: number);
}
export declare class CommandTimeoutError extends CommandError {
    constructor(message: string, commandId?: string);
}
export interface ErrorDetails {
    text?: string;
    jobsCode?: string;
    commandId?: string;
    reasonCode?: number;
    status?: number;
}
export declare function errorOf(message: string, code: number, details?: ErrorDetails): MqstoreError;
export declare function asMqstoreError(e: unknown): MqstoreError;
// wire.d.ts
export type AbortAction = "CANCEL";
export interface AbortConfig {
    criteriaList: AbortCriteria[];
}
export interface AbortCriteria {
    action: AbortAction;
    failureType: FailureType;
    minNumberOfExecutedThings: number;
    thresholdPercentage: number;
}
export interface CommandAnswer {
    appErrorCode?: string;
    appErrorPayload?: string;
    code?: number;
    contentType?: string;
    message?: string;
    payload: string;
    reasonCode?: string;
    result?: unknown;
    status: CommandStatus;
}
export interface CommandDefinition {
    commandId: string;
    createdMs?: number;
    description?: string;
    mandatoryParameters?: CommandParameter[];
    payload?: CommandPayload;
    payloadTemplate?: string;
}
export type CommandDefinitionsAnswer = {
    command: CommandDefinition;
} | {
    commands: CommandDefinition[];
} | {
    deleted: boolean;
};
export type CommandDefinitionsRequest = {
    command: CommandDefinition;
    op: "create";
} | {
    commandId: string;
    op: "get";
} | {
    op: "list";
} | {
    commandId: string;
    op: "delete";
};
export interface CommandParameter {
    defaultValue?: unknown;
    name: string;
}
export interface CommandPayload {
    content: string;
    contentType?: string;
}
export interface CommandRecord {
    answer?: CommandAnswer;
    answerFilter: string;
    command?: string;
    correlated: boolean;
    deadlineMs: number;
    duplicates?: number;
    id: string;
    late?: boolean;
    node: string;
    orphaned?: boolean;
    profile: string;
    sentMs: number;
    status: CommandStatus;
    topic: string;
    updatedMs: number;
}
export type CommandStatus = "SENT" | "DELIVERED" | "IN_PROGRESS" | "SUCCEEDED" | "FAILED" | "REJECTED" | "TIMED_OUT";
export type EndBehavior = "STOP_ROLLOUT" | "CANCEL" | "FORCE_CANCEL";
export interface ExecutionAccepted {
    execution?: JobExecution;
}
export interface ExecutionCancel {
    expectedVersion?: number;
    force?: boolean;
    jobId: string;
    statusDetails?: Record<string, string>;
    thingName: string;
}
export interface ExecutionListing {
    executionNumber: number;
    jobId: string;
    lastUpdatedAt: number;
    queuedAt: number;
    startedAt?: number;
    status: JobExecutionStatus;
    thingName: string;
    versionNumber: number;
}
export interface ExecutionState {
    status: JobExecutionStatus;
    statusDetails?: Record<string, string>;
    versionNumber: number;
}
export interface ExecutionsPage {
    executions: ExecutionListing[];
    nextToken?: string;
}
export interface ExponentialRate {
    baseRatePerMinute: number;
    incrementFactor: number;
    rateIncreaseCriteria: RateIncreaseCriteria;
}
export type FailureType = "FAILED" | "REJECTED" | "TIMED_OUT" | "ALL";
export interface GroupListing {
    groupArn: string;
    groupName: string;
}
export interface JobCreated {
    jobId: string;
    targets: number;
}
export interface JobDescription {
    abortConfig?: AbortConfig;
    comment?: string;
    completedAt?: number;
    createdAt: number;
    description?: string;
    document: object;
    documentParameters?: Record<string, string>;
    executions: Record<string, number>;
    forceCanceled?: boolean;
    jobArn: string;
    jobExecutionsRetryConfig?: RetryConfig;
    jobExecutionsRolloutConfig?: RolloutConfig;
    jobId: string;
    jobProcessDetails: JobProcessDetails;
    jobTemplateArn?: string;
    lastUpdatedAt: number;
    reasonCode?: string;
    rollout: RolloutProgress;
    schedulingConfig?: SchedulingConfig;
    status: JobStatus;
    targetSelection: TargetSelection;
    targets: string[];
    timeoutConfig?: TimeoutConfig;
}
export interface JobExecution {
    approximateSecondsBeforeTimedOut?: number;
    executionNumber: number;
    jobDocument?: object;
    jobId: string;
    lastUpdatedAt: number;
    queuedAt: number;
    startedAt?: number;
    status: JobExecutionStatus;
    statusDetails?: Record<string, string>;
    thingName?: string;
    versionNumber: number;
}
export type JobExecutionStatus = "QUEUED" | "IN_PROGRESS" | "SUCCEEDED" | "FAILED" | "REJECTED" | "TIMED_OUT" | "CANCELED" | "REMOVED";
export interface JobListing {
    completedAt?: number;
    createdAt: number;
    jobId: string;
    lastUpdatedAt: number;
    status: JobStatus;
    targets: number;
}
export interface JobProcessDetails {
    numberOfCanceledThings: number;
    numberOfFailedThings: number;
    numberOfInProgressThings: number;
    numberOfQueuedThings: number;
    numberOfRejectedThings: number;
    numberOfRemovedThings: number;
    numberOfSucceededThings: number;
    numberOfTimedOutThings: number;
}
export interface JobSpec {
    abortConfig?: AbortConfig;
    description?: string;
    document?: object;
    documentParameters?: Record<string, string>;
    jobExecutionsRetryConfig?: RetryConfig;
    jobExecutionsRolloutConfig?: RolloutConfig;
    jobId: string;
    jobTemplateArn?: string;
    schedulingConfig?: SchedulingConfig;
    targetSelection?: TargetSelection;
    targets: string[];
    timeoutConfig?: TimeoutConfig;
}
export type JobStatus = "SCHEDULED" | "IN_PROGRESS" | "CANCELED" | "COMPLETED" | "DELETION_IN_PROGRESS";
export interface JobSummary {
    executionNumber: number;
    jobId: string;
    lastUpdatedAt: number;
    queuedAt: number;
    startedAt?: number;
    versionNumber: number;
}
export interface JobTemplate {
    abortConfig?: AbortConfig;
    createdAt?: number;
    description?: string;
    document?: object;
    jobExecutionsRetryConfig?: RetryConfig;
    jobExecutionsRolloutConfig?: RolloutConfig;
    jobTemplateArn?: string;
    jobTemplateId: string;
    maintenanceWindows?: MaintenanceWindow[];
    timeoutConfig?: TimeoutConfig;
}
export interface JobUpdate {
    abortConfig?: AbortConfig;
    description?: string;
    jobExecutionsRetryConfig?: RetryConfig;
    jobExecutionsRolloutConfig?: RolloutConfig;
    jobId: string;
    timeoutConfig?: TimeoutConfig;
}
export interface JobsPage {
    jobs: JobListing[];
    nextToken?: string;
}
export interface MaintenanceWindow {
    durationInMinutes: number;
    startTime: string;
}
export interface Membership {
    thingArn?: string;
    thingGroupArn?: string;
    thingGroupName?: string;
    thingName?: string;
}
export interface NamedShadowsPage {
    nextToken?: string;
    results: string[];
    timestamp: number;
}
export interface Notify {
    jobs: NotifyJobs;
    timestamp: number;
}
export interface NotifyJobs {
    IN_PROGRESS?: JobSummary[];
    QUEUED?: JobSummary[];
}
export interface NotifyNext {
    execution?: JobExecution;
    timestamp: number;
}
export type OperatorRequest = JobSpec & {
    op: "createJob";
} | JobUpdate & {
    op: "updateJob";
} | {
    comment?: string;
    force?: boolean;
    jobId: string;
    op: "cancelJob";
    reasonCode?: string;
} | {
    force?: boolean;
    jobId: string;
    op: "deleteJob";
} | ExecutionCancel & {
    op: "cancelJobExecution";
} | {
    force?: boolean;
    jobId: string;
    op: "deleteJobExecution";
    thingName: string;
} | {
    jobId: string;
    op: "describeJob";
} | {
    jobId: string;
    op: "describeJobExecution";
    thingName: string;
} | {
    maxResults?: number;
    nextToken?: string;
    op: "listJobs";
    status?: JobStatus;
} | {
    jobId?: string;
    maxResults?: number;
    nextToken?: string;
    op: "listJobExecutions";
    status?: JobExecutionStatus;
    thingName?: string;
} | {
    op: "createThingGroup";
    thingGroupName: string;
    thingGroupProperties?: ThingGroupProperties;
} | {
    op: "deleteThingGroup";
    thingGroupName: string;
} | {
    op: "describeThingGroup";
    thingGroupName: string;
} | {
    maxResults?: number;
    nextToken?: string;
    op: "listThingGroups";
} | Membership & {
    op: "addThingToThingGroup";
} | Membership & {
    op: "removeThingFromThingGroup";
} | {
    maxResults?: number;
    nextToken?: string;
    op: "listThingsInThingGroup";
    thingGroupName: string;
} | {
    maxResults?: number;
    nextToken?: string;
    op: "listNamedShadowsForThing";
    thingName: string;
} | JobTemplate & {
    op: "createJobTemplate";
} | {
    jobTemplateId: string;
    op: "describeJobTemplate";
} | {
    maxResults?: number;
    nextToken?: string;
    op: "listJobTemplates";
} | {
    jobTemplateId: string;
    op: "deleteJobTemplate";
};
export interface PendingJobs {
    inProgressJobs: JobSummary[];
    queuedJobs: JobSummary[];
}
export interface RateIncreaseCriteria {
    numberOfNotifiedThings?: number;
    numberOfSucceededThings?: number;
}
export interface Rejected {
    code: string;
    executionState?: ExecutionState;
    message: string;
}
export interface RetryConfig {
    criteriaList: RetryCriteria[];
}
export interface RetryCriteria {
    failureType: FailureType;
    numberOfRetries: number;
}
export interface RolloutConfig {
    exponentialRate?: ExponentialRate;
    maximumPerMinute?: number;
}
export interface RolloutProgress {
    nextWindowAt?: number;
    notifiedThings: number;
    ratePerMinute?: number;
    totalThings: number;
    windowClosesAt?: number;
}
export interface SchedulingConfig {
    endBehavior?: EndBehavior;
    endTime?: string;
    maintenanceWindows?: MaintenanceWindow[];
    startTime?: string;
}
export type TargetSelection = "SNAPSHOT" | "CONTINUOUS";
export interface TemplateListing {
    createdAt: number;
    description?: string;
    jobTemplateArn: string;
    jobTemplateId: string;
}
export interface TemplatesPage {
    jobTemplates: TemplateListing[];
    nextToken?: string;
}
export interface ThingGroupDescription {
    thingGroupArn: string;
    thingGroupId: string;
    thingGroupMetadata: ThingGroupMetadata;
    thingGroupName: string;
    thingGroupProperties: ThingGroupProperties;
}
export interface ThingGroupMetadata {
    creationDate: number;
}
export interface ThingGroupProperties {
    thingGroupDescription?: string;
}
export interface ThingGroupsPage {
    nextToken?: string;
    thingGroups: GroupListing[];
}
export interface ThingsPage {
    nextToken?: string;
    things: string[];
}
export interface TimeoutConfig {
    inProgressTimeoutInMinutes?: number;
}
export interface UpdateAccepted {
    executionState?: ExecutionState;
    jobDocument?: object;
}
