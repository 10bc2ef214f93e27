/**
 * mqstore's errors: one class per stable code (the numbers every binding shares:
 * `ClientError::code` in Rust, `MqstoreError.code` in Python, `mqstore_status` in C).
 * Catch `MqstoreError` for all of them, or a subclass for one kind.
 */

/** Base class of every mqstore error; `code` is the error's stable number. */
export class MqstoreError extends Error {
  /** The error's stable number, the same in every mqstore binding. */
  readonly code: number;
  constructor(message: string, code: number) {
    super(message);
    this.name = new.target.name;
    this.code = code;
  }
}

/** A bad argument (wrong type, empty key, a bad URL...): nothing was sent. Code 1. */
export class InvalidArgumentError extends MqstoreError {
  constructor(message: string) {
    super(message, 1);
  }
}

/**
 * A bug in mqstore: its WebAssembly module stopped (a Rust panic, which traps there). The
 * module may be left half-changed, so every mqstore client in the process (page) is closed and
 * fails its calls with this until the process restarts (the page reloads). Please report it,
 * with the message. Code 3, as C's `MQSTORE_ERR_INTERNAL`.
 */
export class InternalError extends MqstoreError {
  constructor(message: string) {
    super(message, 3);
  }
}

/**
 * The state store refused the request (it answered `-ERR text`); nothing changed. `text` is the
 * exact text it answered with. Codes 101–114 are the known texts (a subclass each), 199 any
 * other.
 */
export class ServiceError extends MqstoreError {
  /** The exact text the state store answered with (after `-ERR `). */
  readonly text: string;
  constructor(message: string, code = 199, text?: string) {
    super(message, code);
    this.text = text ?? message;
  }
}

/** The request's timestamp (`__ts`) is more than 60 s ahead of the server's clock: check the clocks. Code 101. */
export class TimestampSkewError extends ServiceError { constructor(message: string, text?: string) { super(message, 101, text); } }
/** The key is fenced (a lease holder wrote it with a fencing token) and the request carries none. Code 102. */
export class FencingTokenRequiredError extends ServiceError { constructor(message: string, text?: string) { super(message, 102, text); } }
/** The fencing token (`__ft`) is more than 60 s ahead of the server's clock. Code 103. */
export class FencingTokenSkewError extends ServiceError { constructor(message: string, text?: string) { super(message, 103, text); } }
/** The fencing token is older than the one protecting the key: a newer holder has the lease. Code 104. */
export class FencingTokenLowerVersionError extends ServiceError { constructor(message: string, text?: string) { super(message, 104, text); } }
/** The store's key-count, byte or registration quota is full; nothing changed. Code 105. */
export class QuotaExceededError extends ServiceError { constructor(message: string, text?: string) { super(message, 105, text); } }
/** The request is not well formed, or an option or number in it is bad. Code 106. */
export class RequestSyntaxError extends ServiceError { constructor(message: string, text?: string) { super(message, 106, text); } }
/** The server's access rules deny this client this key. Code 107. */
export class NotAuthorizedError extends ServiceError { constructor(message: string, text?: string) { super(message, 107, text); } }
/** The verb is not a state store command. Code 108. */
export class UnknownCommandError extends ServiceError { constructor(message: string, text?: string) { super(message, 108, text); } }
/** The request has the wrong number of items for its verb. Code 109. */
export class WrongNumberOfArgumentsError extends ServiceError { constructor(message: string, text?: string) { super(message, 109, text); } }
/** A SET without a timestamp (`__ts`). Code 110. */
export class MissingTimestampError extends ServiceError { constructor(message: string, text?: string) { super(message, 110, text); } }
/** The timestamp (`__ts`) or fencing token (`__ft`) is not a valid version (HLC). Code 111. */
export class MalformedTimestampError extends ServiceError { constructor(message: string, text?: string) { super(message, 111, text); } }
/** The key is empty. Code 112. */
export class KeyLengthZeroError extends ServiceError { constructor(message: string, text?: string) { super(message, 112, text); } }
/** Observing this key: the notification topic of this client and key would be longer than MQTT allows. Code 113. */
export class NotificationTopicTooLongError extends ServiceError { constructor(message: string, text?: string) { super(message, 113, text); } }
/** The answer would be larger than the broker's maximum packet size. Code 114. */
export class ResponseTooLargeError extends ServiceError { constructor(message: string, text?: string) { super(message, 114, text); } }
/** A refusal whose text this version does not know (a newer server); `text` has it. Code 199. */
export class UnknownServiceError extends ServiceError { constructor(message: string, text?: string) { super(message, 199, text); } }

/**
 * The service answered with a status other than 200 (`__stat`; a shadow refusal: AWS's code,
 * 404 no shadow, 409 version conflict, 400 or 413 a refused update). Code 201.
 */
export class StatusError extends MqstoreError {
  /** The status, when known. */
  readonly status: number | undefined;
  constructor(message: string, status?: number) {
    super(message, 201);
    this.status = status;
  }
}
/** No answer within the call's timeout; the request may still have been applied. Code 202. */
export class RequestTimeoutError extends MqstoreError { constructor(message: string) { super(message, 202); } }
/** The connection dropped (or the client closed) while the call was in flight. Code 203. */
export class ConnectionLostError extends MqstoreError { constructor(message: string, code = 203) { super(message, code); } }
/** An answer that could not be decoded. Code 204. */
export class MalformedAnswerError extends MqstoreError { constructor(message: string) { super(message, 204); } }
/** An answer of the wrong kind for the request. Code 205. */
export class UnexpectedAnswerError extends MqstoreError { constructor(message: string) { super(message, 205); } }
/** A version (HLC) that could not be made or read. Code 206. */
export class ClockError extends MqstoreError { constructor(message: string) { super(message, 206); } }
/** The broker could not be reached (wrong URL, no WebSocket listener, down). Code 207. */
export class BrokerUnreachableError extends MqstoreError { constructor(message: string) { super(message, 207); } }
/** The broker refused the connection (bad credentials, not authorized). Code 208. */
export class BrokerRefusedError extends MqstoreError { constructor(message: string) { super(message, 208); } }
/** The broker broke the MQTT protocol. Code 209. */
export class BrokerProtocolError extends ConnectionLostError { constructor(message: string) { super(message, 209); } }
/** The request is larger than the broker accepts. Code 210. */
export class RequestTooLargeError extends MqstoreError { constructor(message: string) { super(message, 210); } }
/** The broker disconnected the client (a DISCONNECT with a reason). Code 211. */
export class BrokerDisconnectedError extends ConnectionLostError { constructor(message: string) { super(message, 211); } }

/**
 * The jobs service refused the call; `jobsCode` is its code (`ResourceNotFound`,
 * `VersionMismatch`, `InvalidStateTransition`...). Code 212.
 */
export class JobsError extends MqstoreError {
  /** The jobs service's code (AWS's: `ResourceNotFound`, `VersionMismatch`, ...). */
  readonly jobsCode: string;
  constructor(message: string, jobsCode = "") {
    super(message, 212);
    this.jobsCode = jobsCode;
  }
}

/** A command that did not succeed; `commandId` names it (for `commandStatus`). */
export class CommandError extends MqstoreError {
  /** The command's id (a UUID), for `commandStatus`. */
  readonly commandId: string;
  constructor(message: string, code: number, commandId = "") {
    super(message, code);
    this.commandId = commandId;
  }
}
/** The device answered the command with an error of its own. Code 213. */
export class CommandFailedError extends CommandError {
  constructor(message: string, commandId?: string) {
    super(message, 213, commandId);
  }
}
/** The device refused the command as malformed or unsupported: it did not run. Code 214. */
export class CommandRejectedError extends CommandError {
  constructor(message: string, commandId?: string) {
    super(message, 214, commandId);
  }
}
/**
 * The broker refused the request's publish (a PUBACK reason code of 0x80 or more: packet too
 * large, not authorized, quota exceeded); `reasonCode` is that code. It was not applied. Code 216.
 */
export class PublishRefusedError extends MqstoreError {
  /** The PUBACK's reason code (0x87 not authorized, 0x97 quota exceeded, ...), when known. */
  readonly reasonCode: number | undefined;
  constructor(message: string, reasonCode?: number) {
    super(message, 216);
    this.reasonCode = reasonCode;
  }
}

/** No answer to the command within its timeout; it may still have run. Code 215. */
export class CommandTimeoutError extends CommandError {
  constructor(message: string, commandId?: string) {
    super(message, 215, commandId);
  }
}

const services = [
  TimestampSkewError, FencingTokenRequiredError, FencingTokenSkewError, FencingTokenLowerVersionError,
  QuotaExceededError, RequestSyntaxError, NotAuthorizedError, UnknownCommandError,
  WrongNumberOfArgumentsError, MissingTimestampError, MalformedTimestampError, KeyLengthZeroError,
  NotificationTopicTooLongError, ResponseTooLargeError,
];
const clients = [
  RequestTimeoutError, ConnectionLostError, MalformedAnswerError, UnexpectedAnswerError,
  ClockError, BrokerUnreachableError, BrokerRefusedError, BrokerProtocolError, RequestTooLargeError,
  BrokerDisconnectedError,
];

/** The fields the WebAssembly module puts on its errors beside `message` and `code`. */
export interface ErrorDetails {
  /** A state store refusal's exact text. */
  text?: string;
  /** The jobs service's code. */
  jobsCode?: string;
  /** The command's id. */
  commandId?: string;
  /** The broker's PUBACK reason code. */
  reasonCode?: number;
  /** The service's status (a shadow refusal's AWS code). */
  status?: number;
}

/** The typed error for `code` (an unknown code keeps the base class). */
export function errorOf(message: string, code: number, details: ErrorDetails = {}): MqstoreError {
  if (code === 1) return new InvalidArgumentError(message);
  if (code === 3) return new InternalError(message);
  if (code >= 101 && code <= 114) return new services[code - 101](message, details.text);
  if (code === 199) return new UnknownServiceError(message, details.text);
  if (code >= 101 && code <= 199) return new ServiceError(message, code, details.text);
  if (code === 201) return new StatusError(message, details.status);
  if (code >= 202 && code <= 211) return new clients[code - 202](message);
  if (code === 212) return new JobsError(message, details.jobsCode);
  if (code === 213) return new CommandFailedError(message, details.commandId);
  if (code === 214) return new CommandRejectedError(message, details.commandId);
  if (code === 215) return new CommandTimeoutError(message, details.commandId);
  if (code === 216) return new PublishRefusedError(message, details.reasonCode);
  return new MqstoreError(message, code);
}

/** Any thrown value as an MqstoreError (an Error from the module carries a numeric `code`). */
export function asMqstoreError(e: unknown): MqstoreError {
  if (e instanceof MqstoreError) return e;
  if (e instanceof Error && typeof (e as { code?: unknown }).code === "number") {
    const { message, code } = e as Error & { code: number };
    return errorOf(message, code, e as ErrorDetails);
  }
  return new MqstoreError(e instanceof Error ? e.message : String(e), 0);
}
