// The language-neutral session traces (testdata/session/*.json; the format is in its
// README) through the package's ClientCore: the same inputs must give the same publishes and
// events as the core gives in Rust (core/tests/conformance.rs runs the same files).
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { before, test } from "node:test";

const { init, ClientCore, Hlc, errorKinds, parseHlc } = await import(
  process.env.MQSTORE_PACKAGE ?? "../dist/index.js"
);

const T0 = 1_700_000_000_000;
const traces = new URL("../../testdata/session/", import.meta.url);
const utf8 = new TextDecoder("utf-8", { fatal: true });
const encode = (text) => new TextEncoder().encode(text);

before(() => init());

/** Bytes as a trace writes them: text when they are UTF-8, else {hex}. */
function text(bytes) {
  try {
    return utf8.decode(bytes);
  } catch {
    return { hex: Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("") };
  }
}

const sameBytes = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

/** Whether `actual` has every field `expected` states (objects field by field, lists item by
 * item, anything else exactly): the Rust runner's rule. */
function matches(expected, actual) {
  if (Array.isArray(expected)) {
    return (
      Array.isArray(actual) &&
      expected.length === actual.length &&
      expected.every((e, i) => matches(e, actual[i]))
    );
  }
  if (expected !== null && typeof expected === "object") {
    return (
      actual !== null &&
      typeof actual === "object" &&
      !Array.isArray(actual) &&
      Object.entries(expected).every(([k, v]) => k in actual && matches(v, actual[k]))
    );
  }
  return expected === actual;
}

class Run {
  constructor(trace) {
    this.core = new ClientCore(trace.clientId, 7, trace.timeoutMs ?? 0);
    this.now = T0;
    this.calls = new Map(); // name → call id
    this.correlations = new Map(); // name → bytes
    this.tokens = new Map(); // name → clientToken
    this.kinds = new Map(errorKinds().map(({ code, name }) => [code, name]));
  }

  callName(id) {
    for (const [name, call] of this.calls) {
      if (call === id) return name;
    }
    return id;
  }

  /** An error as the trace states it: its kind and code, and the detail it carries. */
  error(e) {
    const out = { kind: this.kinds.get(e.code) ?? `(no kind for ${e.code}: ${e.message})`, code: e.code };
    for (const field of ["text", "jobsCode", "commandId", "reasonCode"]) {
      if (e[field] !== undefined) out[field] = e[field];
    }
    return out;
  }

  /** A value from the package as plain JSON: bytes as text, versions as their text. */
  plain(value) {
    if (value instanceof Uint8Array) return text(value);
    if (value instanceof Hlc) return value.toString();
    if (value instanceof Error) return this.error(value);
    if (Array.isArray(value)) return value.map((v) => this.plain(v));
    if (value !== null && typeof value === "object") {
      return Object.fromEntries(
        Object.entries(value)
          .filter(([, v]) => v !== undefined)
          .map(([k, v]) => [k, this.plain(v)]),
      );
    }
    return value === undefined ? null : value;
  }

  event(event) {
    const out = this.plain(event);
    if (event.call !== undefined) out.call = this.callName(event.call);
    if (event.lease !== undefined) out.lease = this.callName(event.lease);
    return out;
  }

  /** A publish the session made, as the trace states it (names bound on first use). */
  outgoing(publish, expected) {
    const out = {
      topic: publish.topic,
      payload: text(publish.payload),
      userProperties: publish.userProperties,
    };
    if (publish.call !== undefined) out.call = this.callName(publish.call);
    for (const field of ["responseTopic", "contentType", "messageExpiryInterval"]) {
      if (publish[field] !== undefined) out[field] = publish[field];
    }
    let json;
    try {
      json = JSON.parse(utf8.decode(publish.payload));
    } catch {
      json = undefined;
    }
    if (json !== null && typeof json === "object" && !Array.isArray(json)) {
      if (typeof json.clientToken === "string") {
        const name = expected?.clientToken;
        if (name === undefined) {
          out.clientToken = "(unnamed)";
        } else {
          if (!this.tokens.has(name)) this.tokens.set(name, json.clientToken);
          out.clientToken = this.tokens.get(name) === json.clientToken ? name : "(another)";
        }
        delete json.clientToken;
      }
      out.json = json;
    }
    if (publish.correlationData !== undefined) {
      const name = expected?.correlation;
      if (name === undefined) {
        out.correlation = "(unnamed)";
      } else {
        if (!this.correlations.has(name)) this.correlations.set(name, publish.correlationData);
        out.correlation = sameBytes(this.correlations.get(name), publish.correlationData)
          ? name
          : "(another)";
      }
    }
    return out;
  }

  /** A publish the trace delivers. */
  incoming(value) {
    let payload = value.payload === undefined ? new Uint8Array() : encode(value.payload);
    if (value.json !== undefined) {
      const json = { ...value.json };
      if (value.clientToken !== undefined) json.clientToken = this.tokens.get(value.clientToken);
      payload = encode(JSON.stringify(json));
    }
    const message = { topic: value.topic, payload, qos: 1, userProperties: value.userProperties ?? [] };
    if (value.correlation !== undefined) {
      assert.ok(this.correlations.has(value.correlation), `no correlation named ${value.correlation} yet`);
      message.correlationData = this.correlations.get(value.correlation);
    }
    for (const field of ["responseTopic", "contentType", "messageExpiryInterval"]) {
      if (value[field] !== undefined) message[field] = value[field];
    }
    return message;
  }

  /** Runs one action: a call id, a list of filters, or nothing. */
  act(action) {
    const [[verb, arg]] = Object.entries(action);
    const core = this.core;
    const now = this.now;
    switch (verb) {
      case "call": {
        const { timeoutMs, persist, fencingToken, ...request } = arg;
        const options = { timeoutMs, persist };
        if (fencingToken !== undefined) options.fencingToken = parseHlc(fencingToken);
        return { call: core.call(request, options, now) };
      }
      case "observe":
        return { call: core.observe(arg, now) };
      case "unobserve":
        return { call: core.unobserve(arg, now) };
      case "lease":
        return { call: core.lease(arg.key, arg.ttlMs, arg.waitMs ?? null, now) };
      case "releaseLease":
        return { call: core.releaseLease(this.calls.get(arg), now) };
      case "jobsOperate": {
        const { op, ...args } = arg;
        return { call: core.jobsOperate(op, args, now) };
      }
      case "jobsDevice": {
        const [api, args] = deviceCall(arg);
        return { call: core.jobsDevice(arg.thing, api, args, now) };
      }
      case "command": {
        const { topic, payload, ...options } = arg;
        return { call: core.command(topic, payload, options, now) };
      }
      case "commandStatus":
        return { call: core.commandStatus(arg, now) };
      case "shadow":
        return { call: core.shadow(arg.thing, arg.name ?? null, arg.op, arg.body, now) };
      case "useShadow":
        return { filters: core.useShadow(arg.thing, arg.name ?? null) };
      case "leaveShadow":
        return { filters: core.leaveShadow(arg.thing, arg.name ?? null) };
      case "actAs":
        return { filters: core.actAs(arg) };
      case "leave":
        return { filters: core.leave(arg) };
      case "watchCommands":
        return { filters: core.watchCommands() ?? null };
      case "unwatchCommands":
        return { filters: core.unwatchCommands() ?? null };
      case "subscriptions":
        return { filters: core.subscriptions() };
      case "receive":
        core.handle(this.incoming(arg), now);
        return {};
      case "clock":
        this.now = T0 + arg;
        core.expire(this.now);
        return {};
      case "connectionLost":
        core.connectionLost();
        return {};
      case "resume":
        core.resume(now);
        return {};
      case "publishRefused":
        core.publishRefused(this.calls.get(arg.call), arg.code);
        return {};
      case "setMaxPacketSize":
        core.setMaxPacketSize(arg);
        return {};
      default:
        throw new Error(`unknown action ${verb}`);
    }
  }
}

/**
 * A trace's device call, as AWS's wire has it (the topic's end after `$aws/things/{thing}/jobs/`
 * and its payload), as the package's `jobsDevice(thing, api, args)` takes it: the package's
 * own method-shaped form, which these traces check against the wire.
 */
function deviceCall({ api, payload = {} }) {
  const { statusDetails, executionNumber, status, expectedVersion } = payload;
  const args = { statusDetails, executionNumber, stepTimeoutMinutes: payload.stepTimeoutInMinutes };
  if (api === "get") return ["getPending", {}];
  if (api === "start-next") return ["startNext", args];
  const [jobId, verb] = api.split("/");
  const includeDocument = payload.includeJobDocument;
  if (verb === "get") return ["describe", { ...args, includeDocument, ...(jobId === "$next" ? {} : { jobId }) }];
  const includeState = payload.includeJobExecutionState;
  return ["update", { ...args, jobId, status, expectedVersion, includeState, includeDocument }];
}

function runTrace(file, trace) {
  const run = new Run(trace);
  trace.steps.forEach((step, index) => {
    const where = `${file}, step ${index + 1}`;
    let outcome;
    try {
      outcome = run.act(step.do);
    } catch (e) {
      assert.ok(step.error !== undefined, `${where}: ${e.message} (code ${e.code})`);
      const actual = run.error(e);
      assert.ok(matches(step.error, actual), `${where}: error ${JSON.stringify(actual)}`);
      outcome = undefined;
    }
    if (outcome !== undefined) {
      assert.equal(step.error, undefined, `${where}: no error, expected ${JSON.stringify(step.error)}`);
      if (outcome.call !== undefined && step.name !== undefined) run.calls.set(step.name, outcome.call);
      if (step.filters !== undefined) assert.deepEqual(outcome.filters, step.filters, `${where}: filters`);
    }
    const expectedPublishes = step.publishes ?? [];
    const publishes = run.core.takePublishes().map((p, i) => run.outgoing(p, expectedPublishes[i]));
    const events = run.core.takeEvents().map((e) => run.event(e));
    for (const [what, expected, actual] of [
      ["publishes", expectedPublishes, publishes],
      ["events", step.events ?? [], events],
    ]) {
      assert.ok(
        expected.length === actual.length && expected.every((e, i) => matches(e, actual[i])),
        `${where}: ${what}\n  expected ${JSON.stringify(expected, null, 1)}\n  actual   ${JSON.stringify(actual, null, 1)}`,
      );
    }
    if (step.deadline !== undefined) {
      const deadline = run.core.nextDeadline();
      assert.equal(deadline === undefined || deadline === null ? null : deadline - T0, step.deadline, `${where}: next deadline`);
    }
  });
}

const files = readdirSync(traces).filter((f) => f.endsWith(".json")).sort();

test("the session traces are there", () => {
  assert.ok(files.length >= 8, `traces in ${traces.pathname}: ${files.join(", ")}`);
});

for (const file of files) {
  const trace = JSON.parse(readFileSync(new URL(file, traces), "utf8"));
  test(`session trace ${file}: ${trace.description ?? ""}`.slice(0, 120), () => runTrace(file, trace));
}

test("a trace that expects other publishes fails", () => {
  const wrong = {
    clientId: "wrong",
    steps: [{ do: { call: { op: "GET", key: "k" } }, publishes: [{ topic: "not/the/topic" }] }],
  };
  assert.throws(() => runTrace("wrong.json", wrong), /publishes/);
});
