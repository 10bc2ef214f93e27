// A device using the AWS IoT Device SDK for JavaScript v2 (IotJobsClientv2, unchanged) against
// `mqstore serve` through a plain MQTT 5 broker (no TLS); the same steps as ../jobs_device.py.
//
//   node jobs_device.mjs --host 127.0.0.1 --port 1883 --thing my-thing
//
// Prints one line per step, "OK" at the end; exits 1 on the first failure.

import { randomBytes, randomUUID } from "node:crypto";

import { mqtt5 } from "aws-crt";
import { iotjobs } from "aws-iot-device-sdk-v2";

import { TIMEOUT_MS, assert, connect, deviceArgs, nextOf, queue, run } from "./common.mjs";

/** Creates a job on `thing` through mqstore's operator API. */
function createJob(host, port, thing, jobId, document) {
  return operate(host, port, thing, { op: "createJob", jobId, targets: [thing], document });
}

/** Any operator call through mqstore's operator API: MQTT 5 request/response, JSON. */
async function operate(host, port, thing, request) {
  const operator = await connect(host, port, `operator-${randomUUID().slice(0, 8)}`);
  const answers = queue();
  operator.on("messageReceived", (e) => answers.push(e.message));
  const responseTopic = `clients/${thing}-operator/jobs/response`;
  await operator.subscribe({
    subscriptions: [{ topicFilter: responseTopic, qos: mqtt5.QoS.AtLeastOnce }],
  });
  const correlation = randomBytes(16);
  await operator.publish({
    topicName: "mqstore/jobs/v1/command/invoke",
    payload: JSON.stringify(request),
    qos: mqtt5.QoS.AtLeastOnce,
    responseTopic,
    correlationData: correlation,
    userProperties: [{ name: "__protVer", value: "1.0" }],
  });
  const answer = await nextOf(answers, "operator answer");
  operator.stop();
  operator.close();
  assert(
    Buffer.from(answer.correlationData).equals(correlation),
    "the answer carries the request's correlation data",
  );
  return JSON.parse(Buffer.from(answer.payload).toString());
}

async function main() {
  const { host, port, thing } = deviceArgs();

  const device = await connect(host, port, thing);
  const jobs = iotjobs.IotJobsClientv2.newFromMqtt5(device, {
    maxRequestResponseSubscriptions: 4,
    maxStreamingSubscriptions: 2,
    operationTimeoutInSeconds: TIMEOUT_MS / 1000,
  });

  const changed = queue();
  const nextChanged = queue();
  const established = queue();
  const streams = [
    jobs.createJobExecutionsChangedStream({ thingName: thing }),
    jobs.createNextJobExecutionChangedStream({ thingName: thing }),
  ];
  streams[0].on("incomingPublish", (e) => changed.push(e.message));
  streams[1].on("incomingPublish", (e) => nextChanged.push(e.message));
  for (const stream of streams) {
    stream.on("subscriptionStatus", (e) => e.type === 0 && established.push(e));
    stream.open();
  }
  for (const _ of streams) await nextOf(established, "subscription");
  console.log("streams open");

  const pending = await jobs.getPendingJobExecutions({ thingName: thing });
  assert(
    pending.inProgressJobs.length === 0 && pending.queuedJobs.length === 0,
    JSON.stringify(pending),
  );
  console.log("get pending: nothing pending");

  const document = { action: "blink", times: 3 };
  const created = await createJob(host, port, thing, "js-sdk-job-1", document);
  assert(created.ok?.jobId === "js-sdk-job-1", JSON.stringify(created));
  console.log("created js-sdk-job-1 through the operator API");

  let event = await nextOf(changed, "notify");
  assert(event.jobs.QUEUED.map((s) => s.jobId).join() === "js-sdk-job-1", JSON.stringify(event));
  event = await nextOf(nextChanged, "notify-next");
  assert(event.execution.jobId === "js-sdk-job-1", JSON.stringify(event));
  assert(JSON.stringify(event.execution.jobDocument) === JSON.stringify(document), "document");
  console.log("notify and notify-next: js-sdk-job-1 queued");

  const started = await jobs.startNextPendingJobExecution({
    thingName: thing,
    statusDetails: { step: "downloading" },
  });
  assert(started.execution.status === "IN_PROGRESS", JSON.stringify(started));
  assert(started.execution.statusDetails.step === "downloading", "status details");
  console.log(`start-next: IN_PROGRESS, version ${started.execution.versionNumber}`);

  const described = await jobs.describeJobExecution({
    thingName: thing,
    jobId: "js-sdk-job-1",
    includeJobDocument: true,
  });
  assert(described.execution.status === "IN_PROGRESS", JSON.stringify(described));
  console.log("describe: IN_PROGRESS");

  const updated = await jobs.updateJobExecution({
    thingName: thing,
    jobId: "js-sdk-job-1",
    status: "SUCCEEDED",
    expectedVersion: started.execution.versionNumber,
    includeJobExecutionState: true,
  });
  assert(updated.executionState.status === "SUCCEEDED", JSON.stringify(updated));
  console.log("update: SUCCEEDED");

  event = await nextOf(changed, "notify");
  assert(Object.keys(event.jobs ?? {}).length === 0, JSON.stringify(event));
  event = await nextOf(nextChanged, "notify-next");
  assert(event.execution === undefined, JSON.stringify(event));
  console.log("notify and notify-next: nothing pending");

  try {
    await jobs.updateJobExecution({ thingName: thing, jobId: "js-sdk-job-1", status: "FAILED" });
    throw new Error("a second update was accepted");
  } catch (e) {
    assert(e.modeledError?.code === "InvalidStateTransition", `${e}: ${JSON.stringify(e.modeledError)}`);
  }
  console.log("a second update: rejected with InvalidStateTransition");

  // An abort: a job on another thing and this one, canceled once 50 % of at least one executed
  // thing failed. The other thing (plain MQTT) fails first: this device's QUEUED execution is
  // CANCELED by the abort.
  const other = `${thing}-other`;
  const abortConfig = {
    criteriaList: [{ failureType: "FAILED", action: "CANCEL", thresholdPercentage: 50, minNumberOfExecutedThings: 1 }],
  };
  let answer = await operate(host, port, thing, {
    op: "createJob",
    jobId: "js-sdk-job-2",
    targets: [other, thing],
    document: { action: "flash" },
    abortConfig,
  });
  assert(answer.ok?.targets === 2, JSON.stringify(answer));
  event = await nextOf(changed, "notify");
  assert(event.jobs.QUEUED.map((s) => s.jobId).join() === "js-sdk-job-2", JSON.stringify(event));
  await nextOf(nextChanged, "notify-next");
  console.log("notify and notify-next: js-sdk-job-2 queued");
  const failer = await connect(host, port, other);
  await failer.publish({
    topicName: `$aws/things/${other}/jobs/js-sdk-job-2/update`,
    payload: JSON.stringify({ status: "FAILED" }),
    qos: mqtt5.QoS.AtLeastOnce,
  });
  failer.stop();
  failer.close();
  event = await nextOf(changed, "notify");
  assert(Object.keys(event.jobs ?? {}).length === 0, JSON.stringify(event));
  event = await nextOf(nextChanged, "notify-next");
  assert(event.execution === undefined, JSON.stringify(event));
  const aborted = await jobs.describeJobExecution({ thingName: thing, jobId: "js-sdk-job-2" });
  assert(aborted.execution.status === "CANCELED", JSON.stringify(aborted));
  answer = await operate(host, port, thing, { op: "describeJob", jobId: "js-sdk-job-2" });
  assert(answer.ok.job.status === "CANCELED" && answer.ok.job.reasonCode === "ABORT_CRITERIA_MET", JSON.stringify(answer));
  console.log("abort: the job CANCELED (ABORT_CRITERIA_MET), this device's execution CANCELED");

  // A forced cancellation of an execution the device has started: its next update is
  // rejected, and its list is empty.
  await createJob(host, port, thing, "js-sdk-job-3", { action: "calibrate" });
  await nextOf(changed, "notify");
  await nextOf(nextChanged, "notify-next");
  const running = await jobs.startNextPendingJobExecution({ thingName: thing });
  assert(running.execution.jobId === "js-sdk-job-3", JSON.stringify(running));
  answer = await operate(host, port, thing, { op: "cancelJob", jobId: "js-sdk-job-3", force: true, reasonCode: "RECALLED" });
  assert(JSON.stringify(answer) === '{"ok":{}}', JSON.stringify(answer));
  event = await nextOf(changed, "notify");
  assert(Object.keys(event.jobs ?? {}).length === 0, JSON.stringify(event));
  event = await nextOf(nextChanged, "notify-next");
  assert(event.execution === undefined, JSON.stringify(event));
  try {
    await jobs.updateJobExecution({ thingName: thing, jobId: "js-sdk-job-3", status: "SUCCEEDED" });
    throw new Error("an update of a canceled execution was accepted");
  } catch (e) {
    assert(e.modeledError?.code === "InvalidStateTransition", `${e}: ${JSON.stringify(e.modeledError)}`);
    assert(e.modeledError.executionState?.status === "CANCELED", JSON.stringify(e.modeledError));
  }
  console.log("forced cancel: the device's update rejected, its execution CANCELED");

  for (const stream of streams) stream.close();
  jobs.close();
  device.stop();
  device.close();
  console.log("OK");
}

run(main);
