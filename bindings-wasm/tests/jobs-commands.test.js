// Jobs (operator and device sides) and commands to devices through the connected client,
// against a real mosquitto + mqstore serve; the devices answering commands are MQTT.js clients
// speaking MQTT 5 request/response (the `mqtt5` profile).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, test } from "node:test";

import mqtt from "mqtt";

import { start } from "./harness.js";

const { Client, JobsError, CommandFailedError, CommandRejectedError, CommandTimeoutError, InvalidArgumentError, MqstoreError, StatusError } =
  await import(process.env.MQSTORE_PACKAGE ?? "../dist/index.js");
const text = (bytes) => new TextDecoder().decode(bytes);

let servers;
let client;
before(async () => {
  servers = await start();
  client = await Client.connect(servers.url);
});
after(async () => {
  await client?.close();
  await servers?.stop();
});

// Doubles serde_json's default parser reads one unit in the last place off (about one double in
// ten that JavaScript writes), and the extremes: the same file the Rust, Python and C tests send.
const NUMBERS = JSON.parse(readFileSync(new URL("../../testdata/numbers.json", import.meta.url), "utf8"));

test("numbers in job documents and shadows come back to the last bit", async () => {
  await client.createJob({ jobId: "js-numbers", targets: ["js-numbers"], document: { n: NUMBERS } });
  assert.deepEqual((await client.describeJob("js-numbers")).document.n, NUMBERS, "to the operator");
  const started = await (await client.jobs("js-numbers")).startNext();
  assert.deepEqual(started.jobDocument.n, NUMBERS, "to the device");
  const shadow = await client.shadow("js-numbers");
  assert.deepEqual((await shadow.update({ reported: { n: NUMBERS } })).state.reported.n, NUMBERS);
  assert.deepEqual((await shadow.get()).state.reported.n, NUMBERS);
});

test("a rollout's settings, an abort, one execution canceled, pages and the job's deletion", async () => {
  const things = ["js-roll-0", "js-roll-1", "js-roll-2", "js-roll-3"];
  await client.createJob({
    jobId: "js-roll",
    targets: things,
    document: {},
    description: "canary",
    jobExecutionsRolloutConfig: { maximumPerMinute: 1000 },
    abortConfig: { criteriaList: [{ failureType: "FAILED", action: "CANCEL", thresholdPercentage: 50, minNumberOfExecutedThings: 2 }] },
  });
  let job = await client.describeJob("js-roll");
  assert.equal(job.description, "canary");
  assert.equal(job.jobArn, "arn:aws:iot:mqstore:000000000000:job/js-roll");
  assert.equal(job.jobExecutionsRolloutConfig.maximumPerMinute, 1000);
  await client.updateJob({ jobId: "js-roll", description: "wider" });
  assert.equal((await client.describeJob("js-roll")).description, "wider");
  await assert.rejects(
    client.cancelJobExecution("js-roll", things[0], { expectedVersion: 9 }),
    (e) => e instanceof JobsError && e.jobsCode === "VersionConflict",
  );
  await client.cancelJobExecution("js-roll", things[0]);
  assert.equal((await client.describeJobExecution("js-roll", things[0])).status, "CANCELED");
  for (let i = 0; i < 100 && (await client.describeJob("js-roll")).rollout.notifiedThings < 4; i++) {
    await new Promise((r) => setTimeout(r, 50));
  }
  for (const thing of things.slice(1, 3)) {
    const device = await client.jobs(thing);
    await device.update({ jobId: "js-roll", status: "FAILED" });
  }
  job = await client.describeJob("js-roll");
  assert.equal(job.status, "CANCELED");
  assert.equal(job.reasonCode, "ABORT_CRITERIA_MET");
  assert.equal(job.jobProcessDetails.numberOfFailedThings, 2);
  const page = await client.listJobExecutionsPage({ jobId: "js-roll", maxResults: 3 });
  assert.equal(page.executions.length, 3);
  const rest = await client.listJobExecutionsPage({ jobId: "js-roll", nextToken: page.nextToken });
  assert.deepEqual(rest.executions.map((e) => e.thingName), [things[3]]);
  const jobs = await client.listJobsPage({ status: "CANCELED" });
  assert.ok(jobs.jobs.some((j) => j.jobId === "js-roll"));
  await assert.rejects(
    client.createJob({ jobId: "js-bad", targets: ["t"], document: {}, jobExecutionsRolloutConfig: { maximumPerMinute: 5000 } }),
    (e) => e instanceof JobsError && e.jobsCode === "InvalidRequest" && /maximumPerMinute/.test(e.message),
  );
  await assert.rejects(
    client.jobsOperate("updateJob", { jobId: "js-roll", abortConfig: { criteriaList: [{ failureType: "SOMETIMES" }] } }),
    (e) => e instanceof JobsError && e.jobsCode === "InvalidRequest" && /SOMETIMES/.test(e.message),
  );
  // The shorthands every client shares, written out as AWS's fields by the core.
  await client.createJob({ jobId: "js-short", targets: [things[0]], document: {}, maxPerMinute: 7, inProgressTimeoutMinutes: 3, maxRetries: 2 });
  const short = await client.describeJob("js-short");
  assert.deepEqual(short.jobExecutionsRolloutConfig, { maximumPerMinute: 7 });
  assert.deepEqual(short.timeoutConfig, { inProgressTimeoutInMinutes: 3 });
  assert.deepEqual(short.jobExecutionsRetryConfig, { criteriaList: [{ failureType: "ALL", numberOfRetries: 2 }] });
  await assert.rejects(
    client.createJob({ jobId: "js-both", targets: ["t"], document: {}, maxPerMinute: 1, jobExecutionsRolloutConfig: { maximumPerMinute: 2 } }),
    (e) => e instanceof InvalidArgumentError && /give maxPerMinute or jobExecutionsRolloutConfig, not both/.test(e.message),
  );
  assert.equal((await client.jobsOperate("describeJobExecution", { jobId: "js-short", thingName: things[0] })).thingName, things[0]);
  // AWS's own fields reach the service as they are.
  await client.createJob({ jobId: "js-aws", targets: [things[0]], document: {}, timeoutConfig: { inProgressTimeoutInMinutes: 4 } });
  assert.deepEqual((await client.describeJob("js-aws")).timeoutConfig, { inProgressTimeoutInMinutes: 4 });
  await client.cancelJob("js-aws");
  await client.deleteJob("js-aws");
  await client.cancelJob("js-short");
  await client.deleteJob("js-short");
  await client.deleteJob("js-roll");
  await assert.rejects(client.describeJob("js-roll"), (e) => e instanceof JobsError && e.jobsCode === "ResourceNotFound");
});

test("thing groups, a continuous job from a template, and a scheduled job", async () => {
  const group = await client.createThingGroup("js-fleet", { description: "the lab" });
  assert.match(group.thingGroupArn, /:thinggroup\/js-fleet$/);
  await assert.rejects(client.createThingGroup("js-fleet"), (e) => e instanceof JobsError && e.jobsCode === "ResourceAlreadyExists");
  for (const thing of ["js-g1", "js-g2", "js-g3"]) await client.addThingToThingGroup("js-fleet", thing);
  const first = await client.listThingsInThingGroup("js-fleet", { maxResults: 2 });
  assert.deepEqual(first.things, ["js-g1", "js-g2"]);
  const rest = await client.listThingsInThingGroup("js-fleet", { nextToken: first.nextToken });
  assert.deepEqual(rest.things, ["js-g3"]);
  assert.equal((await client.describeThingGroup("js-fleet")).thingGroupProperties.thingGroupDescription, "the lab");
  assert.ok((await client.listThingGroups()).thingGroups.some((g) => g.groupName === "js-fleet"));

  const arn = await client.createJobTemplate({
    jobTemplateId: "js-fw",
    document: { url: "https://fw.example/${aws:iot:parameter:version}.bin" },
    timeoutConfig: { inProgressTimeoutInMinutes: 30 },
  });
  assert.match(arn, /:jobtemplate\/js-fw$/);
  assert.ok((await client.listJobTemplates()).jobTemplates.some((t) => t.jobTemplateId === "js-fw"));
  await client.createJob({
    jobId: "js-cont",
    targets: ["thinggroup/js-fleet"],
    targetSelection: "CONTINUOUS",
    jobTemplateArn: "js-fw",
    documentParameters: { version: "4.0" },
  });
  const job = await client.describeJob("js-cont");
  assert.deepEqual(job.document, { url: "https://fw.example/4.0.bin" });
  assert.equal(job.targetSelection, "CONTINUOUS");
  assert.equal(job.timeoutConfig.inProgressTimeoutInMinutes, 30);
  await client.addThingToThingGroup("js-fleet", "js-g4");
  assert.equal((await client.describeJobExecution("js-cont", "js-g4")).status, "QUEUED");
  await client.removeThingFromThingGroup("js-fleet", "js-g1");
  assert.equal((await client.describeJobExecution("js-cont", "js-g1")).status, "REMOVED");
  await assert.rejects(
    client.createJob({ jobId: "js-unfilled", targets: ["t"], jobTemplateArn: "js-fw" }),
    (e) => e instanceof JobsError && e.jobsCode === "InvalidRequest" && /"version"/.test(e.message),
  );

  await client.createJob({
    jobId: "js-later",
    targets: ["js-g2"],
    document: {},
    schedulingConfig: {
      startTime: "2099-01-01T00:00",
      maintenanceWindows: [{ startTime: "cron(0 2 ? * SAT *)", durationInMinutes: 60 }],
    },
  });
  assert.equal((await client.describeJob("js-later")).status, "SCHEDULED");
  await assert.rejects(
    client.createJob({
      jobId: "js-never",
      targets: ["t"],
      document: {},
      schedulingConfig: { maintenanceWindows: [{ startTime: "cron(0 0 30 2 ? *)", durationInMinutes: 30 }] },
    }),
    (e) => e instanceof JobsError && /never fires/.test(e.message),
  );
  await client.cancelJob("js-cont");
  await client.cancelJob("js-later");
  await client.deleteJobTemplate("js-fw");
  await client.deleteThingGroup("js-fleet");
  await assert.rejects(client.describeThingGroup("js-fleet"), (e) => e instanceof JobsError && e.jobsCode === "ResourceNotFound");
});

test("a job from creation to success, with the thing's notifications", async () => {
  const thing = "js-thing-1";
  const device = await client.jobs(thing);
  const notifications = [];
  const stop = device.onNotification((n) => notifications.push(n));
  await client.createJob({ jobId: "js-job-1", targets: [thing], document: { operation: "reboot" }, maxRetries: 1 });
  const described = await client.describeJob("js-job-1");
  assert.equal(described.jobId, "js-job-1");
  assert.deepEqual(described.targets, [thing]);
  assert.ok((await client.listJobs()).some((j) => j.jobId === "js-job-1"));

  const pending = await device.pending();
  assert.deepEqual(pending.queuedJobs.map((j) => j.jobId), ["js-job-1"]);
  const next = await device.describeNext();
  assert.deepEqual(next.jobDocument, { operation: "reboot" });
  const started = await device.startNext({ statusDetails: { step: "download" } });
  assert.equal(started.status, "IN_PROGRESS");
  assert.equal(started.jobId, "js-job-1");
  const updated = await device.update({ jobId: "js-job-1", status: "SUCCEEDED", expectedVersion: started.versionNumber, includeState: true });
  assert.equal(updated.executionState.status, "SUCCEEDED");
  assert.equal((await device.describe("js-job-1")).status, "SUCCEEDED");
  assert.equal((await client.describeJobExecution("js-job-1", thing)).status, "SUCCEEDED");
  const listed = await client.listJobExecutions({ thing, status: "SUCCEEDED" });
  assert.deepEqual(listed.map((e) => e.jobId), ["js-job-1"]);
  assert.equal(await device.startNext(), null);

  // notify-next announced the job when it was queued, and the empty list after it succeeded.
  const nextOnes = notifications.filter((n) => n.kind === "notify-next");
  assert.equal(nextOnes[0].execution.jobId, "js-job-1");
  assert.equal(nextOnes.at(-1).execution, null);
  assert.ok(notifications.every((n) => n.thing === thing));
  stop();

  await client.deleteJobExecution("js-job-1", thing);
  await assert.rejects(client.describeJobExecution("js-job-1", thing), (e) => e instanceof JobsError && e.jobsCode === "ResourceNotFound");
});

test("jobs refusals and bad arguments are typed", async () => {
  await assert.rejects(client.cancelJob("js-no-such-job"), (e) => e instanceof JobsError && e.code === 212 && e.jobsCode === "ResourceNotFound");
  await assert.rejects(
    client.createJob({ jobId: "bad id with spaces", targets: ["t"], document: {} }),
    (e) => e instanceof JobsError && e.jobsCode === "InvalidRequest",
  );
  await assert.rejects(client.createJob({ jobId: "j", targets: ["t"], document: ["not an object"] }), (e) => e instanceof InvalidArgumentError);
  await assert.rejects(client.createJob({ jobId: "j", targets: "t", document: {} }), (e) => e instanceof InvalidArgumentError && /targets/.test(e.message));
  await assert.rejects(client.jobs("no spaces allowed"), (e) => e instanceof JobsError && /thing name/.test(e.message));
  const device = await client.jobs("js-thing-2");
  await assert.rejects(device.update({ jobId: "js-nothing-here", status: "SUCCEEDED" }), (e) => e instanceof JobsError);
  await assert.rejects(device.update({ jobId: "x", status: "DONE" }), (e) => e instanceof InvalidArgumentError && /status/.test(e.message));
});

/** A device on `devices/{name}/commands`: `fail` answers with an application error, `bad` with
 * status 400, `ignore` not at all, anything else with `done: {payload}`. */
async function device(name) {
  const topic = `devices/${name}/commands`;
  const connection = await mqtt.connectAsync(servers.url, { protocolVersion: 5, clientId: `device-${name}` });
  const received = [];
  connection.on("message", (_topic, payload, packet) => {
    received.push(payload.toString());
    const request = packet.properties ?? {};
    if (payload.toString() === "ignore" || !request.responseTopic) return;
    const properties = { correlationData: request.correlationData };
    if (payload.toString() === "fail") properties.userProperties = { AppErrCode: "overheated" };
    if (payload.toString() === "bad") properties.userProperties = { __stat: "400", __stMsg: "no such command" };
    connection.publish(request.responseTopic, `done: ${payload}`, { qos: 1, properties });
  });
  await connection.subscribeAsync(topic, { qos: 1 });
  return { topic, received, stop: () => connection.endAsync() };
}

test("an awaited command returns the device's answer, and its status record", async () => {
  const d = await device("js-dev-1");
  try {
    const reply = await client.command(d.topic, "reboot", { timeoutMs: 10_000 });
    assert.equal(reply.status, "SUCCEEDED");
    assert.equal(text(reply.payload), "done: reboot");
    assert.equal(reply.deviceStatus, 200);
    assert.deepEqual(d.received, ["reboot"]);
    const record = await client.commandStatus(reply.id);
    assert.equal(record.status, "SUCCEEDED");
    assert.equal(record.topic, d.topic);
  } finally {
    await d.stop();
  }
});

test("device errors and timeouts are typed", async () => {
  const d = await device("js-dev-2");
  try {
    await assert.rejects(client.command(d.topic, "fail"), (e) => e instanceof CommandFailedError && /overheated/.test(e.message) && e.commandId.length > 0);
    await assert.rejects(client.command(d.topic, "bad"), (e) => e instanceof CommandRejectedError && /no such command/.test(e.message));
    await assert.rejects(client.command(d.topic, "ignore", { timeoutMs: 500 }), (e) => e instanceof CommandTimeoutError && e.code === 215);
    await assert.rejects(client.command("", "x"), (e) => e instanceof InvalidArgumentError);
    await assert.rejects(client.command(d.topic, "x", { mode: "later" }), (e) => e instanceof InvalidArgumentError && /mode/.test(e.message));
    await assert.rejects(client.command(d.topic, 7), (e) => e instanceof MqstoreError && e.code === 1);
  } finally {
    await d.stop();
  }
});

test("one-way and detached commands; the watch sees the detached one succeed", async () => {
  const d = await device("js-dev-3");
  const records = [];
  let changed;
  const stop = await client.watchCommands((record) => {
    records.push(record);
    changed?.();
  });
  const succeeded = async (id) => {
    while (!records.some((r) => r.id === id && r.status === "SUCCEEDED")) await new Promise((r) => (changed = r));
  };
  try {
    const oneWay = await client.command(d.topic, "blink", { mode: "oneway" });
    assert.equal(oneWay.status, "DELIVERED");
    assert.equal(oneWay.payload.length, 0);
    const detached = await client.command(d.topic, "update", { mode: "detached" });
    assert.equal(detached.status, "SENT");
    await succeeded(detached.id);
    assert.equal((await client.commandStatus(detached.id)).status, "SUCCEEDED");
  } finally {
    stop();
    await d.stop();
  }
});

/** A device written for AWS IoT commands: thing `name` reports IN_PROGRESS, then SUCCEEDED with
 * the request's `to` as its result, and records the acknowledgements. */
async function awsDevice(name) {
  const base = `$aws/commands/things/${name}/executions`;
  const connection = await mqtt.connectAsync(servers.url, { protocolVersion: 5, clientId: `aws-${name}` });
  const acks = [];
  connection.on("message", (topic, payload) => {
    const body = JSON.parse(payload.toString());
    if (topic.endsWith("/accepted/json") || topic.endsWith("/rejected/json")) {
      acks.push(topic.split("/").at(-2));
      return;
    }
    const update = `${base}/${topic.split("/")[5]}/response/json`;
    connection.publish(update, JSON.stringify({ status: "IN_PROGRESS" }), { qos: 1 });
    const done = { status: "SUCCEEDED", result: { to: { s: String(body.to) } } };
    connection.publish(update, JSON.stringify(done), { qos: 1 });
  });
  for (const suffix of ["request/json", "response/accepted/json", "response/rejected/json"]) {
    await connection.subscribeAsync(`${base}/+/${suffix}`, { qos: 1 });
  }
  return { acks, stop: () => connection.endAsync() };
}

test("stored commands: defined, started by id on an AWS IoT commands device, deleted", async () => {
  const d = await awsDevice("js-robot");
  try {
    const heat = {
      commandId: "js-heat",
      payloadTemplate: '{"to": ${aws:iot:commandexecution::parameter:temp}}',
      mandatoryParameters: [{ name: "temp", defaultValue: { I: 20 } }],
    };
    const stored = await client.defineCommand(heat);
    assert.equal(stored.commandId, "js-heat");
    assert.ok(stored.createdMs > 0);
    assert.ok((await client.commandDefinitions()).some((c) => c.commandId === "js-heat"));
    assert.equal((await client.commandDefinition("js-heat")).payloadTemplate, heat.payloadTemplate);
    await assert.rejects(client.defineCommand(heat), (e) => e instanceof StatusError && /exists/.test(e.message));
    await assert.rejects(client.defineCommand({ ...heat, commandId: "bad id" }), (e) => e instanceof StatusError && /commandId/.test(e.message));
    const records = [];
    const stop = await client.watchCommands((record) => records.push(record));
    const reply = await client.startCommand("js-heat", "js-robot", { temp: 80 });
    assert.equal(reply.status, "SUCCEEDED");
    assert.deepEqual(JSON.parse(text(reply.payload)).result, { to: { s: "80" } });
    const started = await client.startCommand("js-heat", "thing/js-robot");
    assert.deepEqual(JSON.parse(text(started.payload)).result, { to: { s: "20" } });
    assert.equal((await client.commandStatus(reply.id)).command, "js-heat");
    while (!records.some((r) => r.id === reply.id && r.status === "SUCCEEDED")) await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(records.filter((r) => r.id === reply.id).map((r) => r.status), ["SENT", "IN_PROGRESS", "SUCCEEDED"]);
    stop();
    await assert.rejects(client.startCommand("js-cool", "js-robot"), (e) => e instanceof StatusError && /js-cool/.test(e.message));
    await assert.rejects(client.startCommand("js-heat", "js-robot", { fan: 1 }), (e) => e instanceof StatusError && /fan/.test(e.message));
    await assert.rejects(client.startCommand("js-heat", "js-robot", [1]), (e) => e instanceof InvalidArgumentError);
    assert.equal(await client.deleteCommandDefinition("js-heat"), true);
    assert.equal(await client.deleteCommandDefinition("js-heat"), false);
    await assert.rejects(client.commandDefinition("js-heat"), (e) => e instanceof StatusError);
    assert.deepEqual(d.acks, ["accepted", "accepted", "accepted", "accepted"]);
  } finally {
    await d.stop();
  }
});
