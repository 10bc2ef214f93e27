// A device using the AWS IoT Device SDK for Java v2 (IotCommandsV2Client, IotJobsV2Client and
// IotShadowV2Client, unchanged) against mqstore through a plain broker (no TLS), over MQTT 5 or
// 3.1.1.
//
//   java -cp 'lib/*' Device.java commands|jobs|shadow --host 127.0.0.1 --port 1883 --thing T --mqtt 5|311
//
// commands: opens the SDK's JSON command stream, prints "ready", then for the first command it
// receives reports IN_PROGRESS twice and SUCCEEDED, and sends a late update that must be
// rejected with TerminalStateReached; for the second it reports TIMED_OUT itself (a device's
// own, final TIMED_OUT). The caller (the Rust test) sends both commands once it reads "ready".
//
// jobs: the steps of ../jobs_device.py: get pending, a job created through mqstore's operator
// API, notify and notify-next, start-next, describe, update to SUCCEEDED, a second update
// rejected, an abort, a forced cancellation.
//
// shadow: the steps of ../shadow_device.py on the classic shadow and a named one (with an app
// on a second, MQTT 5 connection): get before any update (404), desired set and its delta and
// documents seen, a report and the delta left, a stale version (409), desired cleared with
// null, delete and the next version.
//
// Prints one line per step and "OK" at the end; exits 1 on the first failure.

import com.google.gson.Gson;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import software.amazon.awssdk.crt.iot.MqttRequestResponseClientOptions;
import software.amazon.awssdk.crt.iot.StreamingOperation;
import software.amazon.awssdk.crt.iot.SubscriptionStatusEvent;
import software.amazon.awssdk.crt.iot.SubscriptionStatusEventType;
import software.amazon.awssdk.crt.mqtt.MqttClient;
import software.amazon.awssdk.crt.mqtt.MqttClientConnection;
import software.amazon.awssdk.crt.mqtt.MqttClientConnectionEvents;
import software.amazon.awssdk.crt.mqtt.MqttConnectionConfig;
import software.amazon.awssdk.crt.mqtt5.Mqtt5Client;
import software.amazon.awssdk.crt.mqtt5.Mqtt5ClientOptions;
import software.amazon.awssdk.crt.mqtt5.OnAttemptingConnectReturn;
import software.amazon.awssdk.crt.mqtt5.OnConnectionFailureReturn;
import software.amazon.awssdk.crt.mqtt5.OnConnectionSuccessReturn;
import software.amazon.awssdk.crt.mqtt5.OnDisconnectionReturn;
import software.amazon.awssdk.crt.mqtt5.OnStoppedReturn;
import software.amazon.awssdk.crt.mqtt5.PublishReturn;
import software.amazon.awssdk.crt.mqtt5.QOS;
import software.amazon.awssdk.crt.mqtt5.packets.ConnectPacket;
import software.amazon.awssdk.crt.mqtt5.packets.PublishPacket;
import software.amazon.awssdk.crt.mqtt5.packets.SubscribePacket;
import software.amazon.awssdk.crt.mqtt5.packets.UserProperty;
import software.amazon.awssdk.iot.V2ClientStreamOptions;
import software.amazon.awssdk.iot.iotcommands.IotCommandsV2Client;
import software.amazon.awssdk.iot.iotcommands.model.CommandExecutionEvent;
import software.amazon.awssdk.iot.iotcommands.model.CommandExecutionStatus;
import software.amazon.awssdk.iot.iotcommands.model.CommandExecutionsSubscriptionRequest;
import software.amazon.awssdk.iot.iotcommands.model.DeviceType;
import software.amazon.awssdk.iot.iotcommands.model.StatusReason;
import software.amazon.awssdk.iot.iotcommands.model.UpdateCommandExecutionRequest;
import software.amazon.awssdk.iot.iotcommands.model.UpdateCommandExecutionResponse;
import software.amazon.awssdk.iot.iotjobs.IotJobsV2Client;
import software.amazon.awssdk.iot.iotjobs.model.DescribeJobExecutionRequest;
import software.amazon.awssdk.iot.iotjobs.model.GetPendingJobExecutionsRequest;
import software.amazon.awssdk.iot.iotjobs.model.GetPendingJobExecutionsResponse;
import software.amazon.awssdk.iot.iotjobs.model.JobExecutionData;
import software.amazon.awssdk.iot.iotjobs.model.JobExecutionsChangedEvent;
import software.amazon.awssdk.iot.iotjobs.model.JobExecutionsChangedSubscriptionRequest;
import software.amazon.awssdk.iot.iotjobs.model.JobStatus;
import software.amazon.awssdk.iot.iotjobs.model.NextJobExecutionChangedEvent;
import software.amazon.awssdk.iot.iotjobs.model.NextJobExecutionChangedSubscriptionRequest;
import software.amazon.awssdk.iot.iotjobs.model.RejectedErrorCode;
import software.amazon.awssdk.iot.iotjobs.model.StartNextJobExecutionResponse;
import software.amazon.awssdk.iot.iotjobs.model.StartNextPendingJobExecutionRequest;
import software.amazon.awssdk.iot.iotjobs.model.UpdateJobExecutionRequest;
import software.amazon.awssdk.iot.iotjobs.model.UpdateJobExecutionResponse;

import software.amazon.awssdk.iot.iotshadow.IotShadowV2Client;
import software.amazon.awssdk.iot.iotshadow.model.DeleteNamedShadowRequest;
import software.amazon.awssdk.iot.iotshadow.model.DeleteShadowRequest;
import software.amazon.awssdk.iot.iotshadow.model.DeleteShadowResponse;
import software.amazon.awssdk.iot.iotshadow.model.GetNamedShadowRequest;
import software.amazon.awssdk.iot.iotshadow.model.GetShadowRequest;
import software.amazon.awssdk.iot.iotshadow.model.GetShadowResponse;
import software.amazon.awssdk.iot.iotshadow.model.NamedShadowDeltaUpdatedSubscriptionRequest;
import software.amazon.awssdk.iot.iotshadow.model.NamedShadowUpdatedSubscriptionRequest;
import software.amazon.awssdk.iot.iotshadow.model.ShadowDeltaUpdatedEvent;
import software.amazon.awssdk.iot.iotshadow.model.ShadowDeltaUpdatedSubscriptionRequest;
import software.amazon.awssdk.iot.iotshadow.model.ShadowState;
import software.amazon.awssdk.iot.iotshadow.model.ShadowUpdatedEvent;
import software.amazon.awssdk.iot.iotshadow.model.ShadowUpdatedSubscriptionRequest;
import software.amazon.awssdk.iot.iotshadow.model.UpdateNamedShadowRequest;
import software.amazon.awssdk.iot.iotshadow.model.UpdateShadowRequest;
import software.amazon.awssdk.iot.iotshadow.model.UpdateShadowResponse;
import software.amazon.awssdk.iot.iotshadow.model.V2ErrorResponse;
import software.amazon.awssdk.iot.iotshadow.model.V2ErrorResponseException;

public class Device {
  static final int TIMEOUT = 10;

  public static void main(String[] argv) {
    int code;
    try {
      Map<String, String> args = new HashMap<>();
      for (int i = 1; i + 1 < argv.length; i += 2) args.put(argv[i], argv[i + 1]);
      Device device =
          new Device(
              args.getOrDefault("--host", "127.0.0.1"),
              Integer.parseInt(args.getOrDefault("--port", "1883")),
              args.getOrDefault("--thing", "aws-java-thing"),
              args.getOrDefault("--mqtt", "5"));
      String mode = argv.length > 0 ? argv[0] : "";
      switch (mode) {
        case "commands" -> device.commands();
        case "jobs" -> device.jobs();
        case "shadow" -> device.shadow();
        default ->
            throw new IllegalArgumentException("mode: commands, jobs or shadow, not " + mode);
      }
      System.out.println("OK");
      code = 0;
    } catch (Throwable e) {
      System.out.println("FAILED: " + e);
      e.printStackTrace(System.out);
      code = 1;
    }
    System.out.flush();
    // The CRT's native threads would keep the JVM alive after a failure: leave at once.
    Runtime.getRuntime().halt(code);
  }

  final String host;
  final int port;
  final String thing;
  final String mqtt;

  Device(String host, int port, String thing, String mqtt) {
    this.host = host;
    this.port = port;
    this.thing = thing;
    this.mqtt = mqtt;
  }

  static void check(boolean ok, Object what) {
    if (!ok) throw new AssertionError(String.valueOf(what));
  }

  static <T> T await(CompletableFuture<T> future) throws Exception {
    return future.get(TIMEOUT, TimeUnit.SECONDS);
  }

  static <T> T next(BlockingQueue<T> queue, String what) throws InterruptedException {
    T item = queue.poll(TIMEOUT, TimeUnit.SECONDS);
    if (item == null) throw new AssertionError("no " + what + " within " + TIMEOUT + " s");
    return item;
  }

  // --- connecting -------------------------------------------------------------------------

  /** The device's MQTT connection, of the SDK's own MQTT 5 or MQTT 3.1.1 client. */
  Object connectDevice() throws Exception {
    if (mqtt.equals("311")) {
      MqttConnectionConfig config = new MqttConnectionConfig();
      config.setMqttClient(new MqttClient());
      config.setEndpoint(host);
      config.setPort(port);
      config.setClientId(thing);
      config.setCleanSession(true);
      config.setConnectionCallbacks(
          new MqttClientConnectionEvents() {
            public void onConnectionInterrupted(int error) {}

            public void onConnectionResumed(boolean sessionPresent) {}
          });
      MqttClientConnection connection = new MqttClientConnection(config);
      await(connection.connect());
      return connection;
    }
    return connect5(thing, null);
  }

  /** An MQTT 5 client of the SDK's runtime, started and connected. */
  Mqtt5Client connect5(String clientId, Consumer<PublishPacket> onPublish) throws Exception {
    CompletableFuture<Void> connected = new CompletableFuture<>();
    Mqtt5ClientOptions options =
        new Mqtt5ClientOptions.Mqtt5ClientOptionsBuilder(host, (long) port)
            .withConnectOptions(new ConnectPacket.ConnectPacketBuilder().withClientId(clientId).build())
            .withLifecycleEvents(
                new Mqtt5ClientOptions.LifecycleEvents() {
                  public void onAttemptingConnect(Mqtt5Client c, OnAttemptingConnectReturn r) {}

                  public void onConnectionSuccess(Mqtt5Client c, OnConnectionSuccessReturn r) {
                    connected.complete(null);
                  }

                  public void onConnectionFailure(Mqtt5Client c, OnConnectionFailureReturn r) {
                    connected.completeExceptionally(
                        new RuntimeException("cannot connect: error " + r.getErrorCode()));
                  }

                  public void onDisconnection(Mqtt5Client c, OnDisconnectionReturn r) {}

                  public void onStopped(Mqtt5Client c, OnStoppedReturn r) {}
                })
            .withPublishEvents(
                (Mqtt5Client c, PublishReturn r) -> {
                  if (onPublish != null) onPublish.accept(r.getPublishPacket());
                })
            .build();
    Mqtt5Client client = new Mqtt5Client(options);
    client.start();
    await(connected);
    return client;
  }

  static MqttRequestResponseClientOptions requestResponseOptions() {
    return MqttRequestResponseClientOptions.builder()
        .withMaxRequestResponseSubscriptions(4)
        .withMaxStreamingSubscriptions(2)
        .withOperationTimeoutSeconds(TIMEOUT)
        .build();
  }

  static <T> V2ClientStreamOptions<T> stream(
      BlockingQueue<T> events, BlockingQueue<Boolean> established) {
    return V2ClientStreamOptions.<T>builder()
        .withStreamEventHandler(events::add)
        .withSubscriptionEventHandler(
            (SubscriptionStatusEvent e) -> {
              if (e.getType() == SubscriptionStatusEventType.SUBSCRIPTION_ESTABLISHED) {
                established.add(true);
              }
            })
        .build();
  }

  void close(Object connection) throws Exception {
    if (connection instanceof Mqtt5Client client) {
      client.stop();
    } else {
      await(((MqttClientConnection) connection).disconnect());
    }
  }

  // --- commands ---------------------------------------------------------------------------

  void commands() throws Exception {
    Object connection = connectDevice();
    IotCommandsV2Client commands =
        connection instanceof Mqtt5Client client
            ? IotCommandsV2Client.newFromMqtt5(client, requestResponseOptions())
            : IotCommandsV2Client.newFromMqtt311(
                (MqttClientConnection) connection, requestResponseOptions());

    BlockingQueue<CommandExecutionEvent> received = new LinkedBlockingQueue<>();
    BlockingQueue<Boolean> established = new LinkedBlockingQueue<>();
    CommandExecutionsSubscriptionRequest subscription = new CommandExecutionsSubscriptionRequest();
    subscription.deviceType = DeviceType.THING;
    subscription.deviceId = thing;
    StreamingOperation stream =
        commands.createCommandExecutionsJsonPayloadStream(
            subscription, stream(received, established));
    stream.open();
    next(established, "subscription to the command stream");
    System.out.println("ready");

    CommandExecutionEvent first = next(received, "command");
    String payload = new String(first.payload, StandardCharsets.UTF_8);
    check(JsonParser.parseString(payload).getAsJsonObject().has("calibrate"), payload);
    System.out.println("command received: " + payload);
    for (String[] step : new String[][] {{"HEATING", "to 80 C"}, {"MEASURING", null}}) {
      UpdateCommandExecutionResponse accepted =
          await(commands.updateCommandExecution(update(first, "IN_PROGRESS", step[0], step[1])));
      check(first.executionId.equals(accepted.executionId), accepted.executionId);
    }
    System.out.println("progress: IN_PROGRESS twice, accepted");
    UpdateCommandExecutionResponse done =
        await(commands.updateCommandExecution(update(first, "SUCCEEDED", "OK", null)));
    check(first.executionId.equals(done.executionId), done.executionId);
    System.out.println("result: SUCCEEDED, accepted");
    try {
      await(commands.updateCommandExecution(update(first, "FAILED", null, null)));
      throw new AssertionError("an update after the final status was accepted");
    } catch (ExecutionException e) {
      var error =
          ((software.amazon.awssdk.iot.iotcommands.model.V2ErrorResponseException) e.getCause())
              .getModeledError();
      check(error != null && error.error
              == software.amazon.awssdk.iot.iotcommands.model.RejectedErrorCode.TERMINAL_STATE_REACHED, e.getCause());
      check(first.executionId.equals(error.executionId), error.executionId);
    }
    System.out.println("late update: rejected with TerminalStateReached");

    CommandExecutionEvent second = next(received, "second command");
    await(commands.updateCommandExecution(update(second, "TIMED_OUT", "TOO_SLOW", "gave up")));
    System.out.println("second command: the device's own TIMED_OUT, accepted");

    stream.close();
    commands.close();
    close(connection);
  }

  UpdateCommandExecutionRequest update(
      CommandExecutionEvent command, String status, String reasonCode, String description) {
    UpdateCommandExecutionRequest request = new UpdateCommandExecutionRequest();
    request.deviceType = DeviceType.THING;
    request.deviceId = thing;
    request.executionId = command.executionId;
    request.status = CommandExecutionStatus.valueOf(status);
    if (reasonCode != null) {
      request.statusReason = new StatusReason();
      request.statusReason.reasonCode = reasonCode;
      request.statusReason.reasonDescription = description;
    }
    return request;
  }

  // --- jobs -------------------------------------------------------------------------------

  void jobs() throws Exception {
    Object connection = connectDevice();
    IotJobsV2Client jobs =
        connection instanceof Mqtt5Client client
            ? IotJobsV2Client.newFromMqtt5(client, requestResponseOptions())
            : IotJobsV2Client.newFromMqtt311(
                (MqttClientConnection) connection, requestResponseOptions());

    BlockingQueue<JobExecutionsChangedEvent> changed = new LinkedBlockingQueue<>();
    BlockingQueue<NextJobExecutionChangedEvent> nextChanged = new LinkedBlockingQueue<>();
    BlockingQueue<Boolean> established = new LinkedBlockingQueue<>();
    JobExecutionsChangedSubscriptionRequest changedRequest =
        new JobExecutionsChangedSubscriptionRequest();
    changedRequest.thingName = thing;
    NextJobExecutionChangedSubscriptionRequest nextRequest =
        new NextJobExecutionChangedSubscriptionRequest();
    nextRequest.thingName = thing;
    List<StreamingOperation> streams =
        List.of(
            jobs.createJobExecutionsChangedStream(changedRequest, stream(changed, established)),
            jobs.createNextJobExecutionChangedStream(nextRequest, stream(nextChanged, established)));
    for (StreamingOperation s : streams) s.open();
    for (int i = 0; i < streams.size(); i++) next(established, "stream subscription");
    System.out.println("streams open");

    GetPendingJobExecutionsRequest pendingRequest = new GetPendingJobExecutionsRequest();
    pendingRequest.thingName = thing;
    GetPendingJobExecutionsResponse pending = await(jobs.getPendingJobExecutions(pendingRequest));
    check(
        pending.inProgressJobs.isEmpty() && pending.queuedJobs.isEmpty(), "pending not empty");
    System.out.println("get pending: nothing pending");

    JsonObject created = createJob("sdk-job-1", List.of(thing), "{\"action\": \"blink\", \"times\": 3}", null);
    check(created.toString().equals("{\"ok\":{\"jobId\":\"sdk-job-1\",\"targets\":1}}"), created);
    System.out.println("created sdk-job-1 through the operator API");

    JobExecutionsChangedEvent event = next(changed, "notify");
    check(event.jobs.get(JobStatus.QUEUED).get(0).jobId.equals("sdk-job-1"), event.jobs);
    check(event.timestamp != null, "notify has a timestamp");
    JobExecutionData queued = next(nextChanged, "notify-next").execution;
    check(queued.jobId.equals("sdk-job-1") && queued.status == JobStatus.QUEUED, queued.status);
    check(((Number) queued.jobDocument.get("times")).intValue() == 3, queued.jobDocument);
    System.out.println("notify and notify-next: sdk-job-1 queued");

    StartNextPendingJobExecutionRequest start = new StartNextPendingJobExecutionRequest();
    start.thingName = thing;
    start.statusDetails = new HashMap<>(Map.of("step", "downloading"));
    StartNextJobExecutionResponse started = await(jobs.startNextPendingJobExecution(start));
    JobExecutionData execution = started.execution;
    check(
        execution.jobId.equals("sdk-job-1") && execution.status == JobStatus.IN_PROGRESS,
        execution.status);
    check("downloading".equals(execution.statusDetails.get("step")), execution.statusDetails);
    System.out.println("start-next: IN_PROGRESS, version " + execution.versionNumber);

    JobExecutionData described = describe("sdk-job-1", jobs);
    check(described.status == JobStatus.IN_PROGRESS && thing.equals(described.thingName), described.status);
    System.out.println("describe: IN_PROGRESS");

    UpdateJobExecutionRequest update = updateRequest("sdk-job-1", JobStatus.SUCCEEDED);
    update.expectedVersion = execution.versionNumber;
    update.includeJobExecutionState = true;
    UpdateJobExecutionResponse updated = await(jobs.updateJobExecution(update));
    check(updated.executionState.status == JobStatus.SUCCEEDED, updated.executionState.status);
    System.out.println("update: SUCCEEDED");

    event = next(changed, "notify");
    check(event.jobs == null || event.jobs.isEmpty(), event.jobs);
    check(next(nextChanged, "notify-next").execution == null, "notify-next names no job");
    System.out.println("notify and notify-next: nothing pending");

    rejected(jobs, updateRequest("sdk-job-1", JobStatus.FAILED), JobStatus.SUCCEEDED);
    System.out.println("a second update: rejected with InvalidStateTransition");

    // An abort: another thing's failure crosses the job's threshold, and this device's QUEUED
    // execution is CANCELED (the other thing speaks the device API with plain MQTT).
    String other = thing + "-other";
    String abort =
        "{\"criteriaList\": [{\"failureType\": \"FAILED\", \"action\": \"CANCEL\","
            + " \"thresholdPercentage\": 50, \"minNumberOfExecutedThings\": 1}]}";
    created = createJob("sdk-job-2", List.of(other, thing), "{\"action\": \"flash\"}", abort);
    check(created.toString().equals("{\"ok\":{\"jobId\":\"sdk-job-2\",\"targets\":2}}"), created);
    event = next(changed, "notify");
    check(event.jobs.get(JobStatus.QUEUED).get(0).jobId.equals("sdk-job-2"), event.jobs);
    check(next(nextChanged, "notify-next").execution.jobId.equals("sdk-job-2"), "notify-next");
    System.out.println("notify and notify-next: sdk-job-2 queued");
    Mqtt5Client failer = connect5(other, null);
    await(
        failer.publish(
            new PublishPacket.PublishPacketBuilder(
                    "$aws/things/" + other + "/jobs/sdk-job-2/update",
                    QOS.AT_LEAST_ONCE,
                    "{\"status\": \"FAILED\"}".getBytes(StandardCharsets.UTF_8))
                .build()));
    failer.stop();
    event = next(changed, "notify");
    check(event.jobs == null || event.jobs.isEmpty(), event.jobs);
    check(next(nextChanged, "notify-next").execution == null, "notify-next names no job");
    check(describe("sdk-job-2", jobs).status == JobStatus.CANCELED, "sdk-job-2 CANCELED");
    JsonObject job =
        operate("{\"op\": \"describeJob\", \"jobId\": \"sdk-job-2\"}")
            .getAsJsonObject("ok")
            .getAsJsonObject("job");
    check(
        job.get("status").getAsString().equals("CANCELED")
            && job.get("reasonCode").getAsString().equals("ABORT_CRITERIA_MET"),
        job);
    System.out.println("abort: the job CANCELED (ABORT_CRITERIA_MET), this device's execution CANCELED");

    // A forced cancellation of an execution the device has started.
    createJob("sdk-job-3", List.of(thing), "{\"action\": \"calibrate\"}", null);
    next(changed, "notify");
    next(nextChanged, "notify-next");
    start = new StartNextPendingJobExecutionRequest();
    start.thingName = thing;
    started = await(jobs.startNextPendingJobExecution(start));
    check(started.execution.jobId.equals("sdk-job-3"), started.execution.jobId);
    JsonObject canceled =
        operate(
            "{\"op\": \"cancelJob\", \"jobId\": \"sdk-job-3\", \"force\": true,"
                + " \"reasonCode\": \"RECALLED\"}");
    check(canceled.toString().equals("{\"ok\":{}}"), canceled);
    event = next(changed, "notify");
    check(event.jobs == null || event.jobs.isEmpty(), event.jobs);
    check(next(nextChanged, "notify-next").execution == null, "notify-next names no job");
    rejected(jobs, updateRequest("sdk-job-3", JobStatus.SUCCEEDED), JobStatus.CANCELED);
    System.out.println("forced cancel: the device's update rejected, its execution CANCELED");

    for (StreamingOperation s : streams) s.close();
    jobs.close();
    close(connection);
  }

  UpdateJobExecutionRequest updateRequest(String jobId, JobStatus status) {
    UpdateJobExecutionRequest request = new UpdateJobExecutionRequest();
    request.thingName = thing;
    request.jobId = jobId;
    request.status = status;
    return request;
  }

  JobExecutionData describe(String jobId, IotJobsV2Client jobs) throws Exception {
    DescribeJobExecutionRequest request = new DescribeJobExecutionRequest();
    request.thingName = thing;
    request.jobId = jobId;
    request.includeJobDocument = true;
    return await(jobs.describeJobExecution(request)).execution;
  }

  /** `request` must be rejected with InvalidStateTransition, the execution left in `status`. */
  static void rejected(IotJobsV2Client jobs, UpdateJobExecutionRequest request, JobStatus status)
      throws Exception {
    try {
      await(jobs.updateJobExecution(request));
      throw new AssertionError("the update of " + request.jobId + " was accepted");
    } catch (ExecutionException e) {
      var error =
          ((software.amazon.awssdk.iot.iotjobs.model.V2ErrorResponseException) e.getCause())
              .getModeledError();
      check(error != null && error.code == RejectedErrorCode.INVALID_STATE_TRANSITION, e.getCause());
      check(error.executionState.status == status, error.executionState.status);
    }
  }

  // --- shadows ----------------------------------------------------------------------------

  void shadow() throws Exception {
    Object deviceConnection = connectDevice();
    Mqtt5Client appConnection = connect5(thing + "-app", null);
    IotShadowV2Client device =
        deviceConnection instanceof Mqtt5Client client
            ? IotShadowV2Client.newFromMqtt5(client, requestResponseOptions())
            : IotShadowV2Client.newFromMqtt311(
                (MqttClientConnection) deviceConnection, requestResponseOptions());
    IotShadowV2Client app = IotShadowV2Client.newFromMqtt5(appConnection, requestResponseOptions());
    shadowFlow(device, app, null, "classic");
    shadowFlow(device, app, "config", "named");
    device.close();
    app.close();
    close(deviceConnection);
    close(appConnection);
  }

  /** The steps of ../shadow_device.py on the classic shadow (`name` null) or a named one. */
  void shadowFlow(IotShadowV2Client device, IotShadowV2Client app, String name, String label)
      throws Exception {
    BlockingQueue<ShadowDeltaUpdatedEvent> deltas = new LinkedBlockingQueue<>();
    BlockingQueue<ShadowUpdatedEvent> documents = new LinkedBlockingQueue<>();
    BlockingQueue<Boolean> established = new LinkedBlockingQueue<>();
    List<StreamingOperation> streams;
    if (name == null) {
      ShadowDeltaUpdatedSubscriptionRequest delta = new ShadowDeltaUpdatedSubscriptionRequest();
      delta.thingName = thing;
      ShadowUpdatedSubscriptionRequest updated = new ShadowUpdatedSubscriptionRequest();
      updated.thingName = thing;
      streams =
          List.of(
              device.createShadowDeltaUpdatedStream(delta, stream(deltas, established)),
              device.createShadowUpdatedStream(updated, stream(documents, established)));
    } else {
      NamedShadowDeltaUpdatedSubscriptionRequest delta =
          new NamedShadowDeltaUpdatedSubscriptionRequest();
      delta.thingName = thing;
      delta.shadowName = name;
      NamedShadowUpdatedSubscriptionRequest updated = new NamedShadowUpdatedSubscriptionRequest();
      updated.thingName = thing;
      updated.shadowName = name;
      streams =
          List.of(
              device.createNamedShadowDeltaUpdatedStream(delta, stream(deltas, established)),
              device.createNamedShadowUpdatedStream(updated, stream(documents, established)));
    }
    for (StreamingOperation s : streams) s.open();
    for (int i = 0; i < streams.size(); i++) next(established, "stream subscription");
    System.out.println(label + ": delta and documents streams open");

    V2ErrorResponse error = shadowRejected(getShadow(device, name));
    check(error.code == 404 && error.message.startsWith("No shadow exists with name"), error.message);
    System.out.println(label + ": get before any update rejected, 404");

    HashMap<String, Object> desired = new HashMap<>(Map.of("color", "red", "power", "on"));
    ShadowState state = new ShadowState();
    state.desired = desired;
    UpdateShadowResponse accepted = await(updateShadow(app, name, state, null));
    check(accepted.version == 1 && desired.equals(accepted.state.desired), accepted.state.desired);
    ShadowDeltaUpdatedEvent delta = next(deltas, "delta");
    check(delta.version == 1 && desired.equals(delta.state), delta.state);
    ShadowUpdatedEvent document = next(documents, "documents");
    check(document.previous == null && document.current.version == 1, "documents of version 1");
    System.out.println(label + ": the app set desired; the device saw its delta and documents");

    HashMap<String, Object> reported = new HashMap<>(Map.of("color", "red", "power", "off"));
    state = new ShadowState();
    state.reported = reported;
    accepted = await(updateShadow(device, name, state, null));
    check(accepted.version == 2, accepted.version);
    document = next(documents, "documents");
    check(document.previous.version == 1 && document.current.version == 2, "documents of 2");
    GetShadowResponse got = await(getShadow(device, name));
    check(got.version == 2 && Map.of("power", "on").equals(got.state.delta), got.state.delta);
    check(reported.equals(got.state.reported) && desired.equals(got.state.desired), "state");
    System.out.println(label + ": the device reported; get shows the delta " + got.state.delta);

    state = new ShadowState();
    state.desired = new HashMap<>(Map.of("power", "off"));
    error = shadowRejected(updateShadow(app, name, state, 1));
    check(error.code == 409 && error.message.equals("Version conflict"), error.message);
    state = new ShadowState();
    state.desiredIsNullable = true;
    accepted = await(updateShadow(app, name, state, 2));
    check(accepted.version == 3, accepted.version);
    got = await(getShadow(device, name));
    check(got.state.desired == null && got.state.delta == null, "desired cleared: " + got.state.desired);
    System.out.println(label + ": a stale version rejected, 409; desired cleared with null; no delta left");

    DeleteShadowResponse deleted = await(deleteShadow(app, name));
    check(deleted.version == 3, deleted.version);
    check(shadowRejected(getShadow(device, name)).code == 404, "get after delete");
    state = new ShadowState();
    state.reported = new HashMap<>(Map.of("power", "off"));
    accepted = await(updateShadow(device, name, state, null));
    check(accepted.version == 4, accepted.version);
    System.out.println(label + ": deleted at version 3; the next shadow is version 4");
    for (StreamingOperation s : streams) s.close();
  }

  CompletableFuture<GetShadowResponse> getShadow(IotShadowV2Client client, String name) {
    if (name == null) {
      GetShadowRequest request = new GetShadowRequest();
      request.thingName = thing;
      return client.getShadow(request);
    }
    GetNamedShadowRequest request = new GetNamedShadowRequest();
    request.thingName = thing;
    request.shadowName = name;
    return client.getNamedShadow(request);
  }

  CompletableFuture<UpdateShadowResponse> updateShadow(
      IotShadowV2Client client, String name, ShadowState state, Integer version) {
    if (name == null) {
      UpdateShadowRequest request = new UpdateShadowRequest();
      request.thingName = thing;
      request.state = state;
      request.version = version;
      return client.updateShadow(request);
    }
    UpdateNamedShadowRequest request = new UpdateNamedShadowRequest();
    request.thingName = thing;
    request.shadowName = name;
    request.state = state;
    request.version = version;
    return client.updateNamedShadow(request);
  }

  CompletableFuture<DeleteShadowResponse> deleteShadow(IotShadowV2Client client, String name) {
    if (name == null) {
      DeleteShadowRequest request = new DeleteShadowRequest();
      request.thingName = thing;
      return client.deleteShadow(request);
    }
    DeleteNamedShadowRequest request = new DeleteNamedShadowRequest();
    request.thingName = thing;
    request.shadowName = name;
    return client.deleteNamedShadow(request);
  }

  /** The error a shadow request must be rejected with. */
  static V2ErrorResponse shadowRejected(CompletableFuture<?> request) throws Exception {
    try {
      Object answer = await(request);
      throw new AssertionError("accepted, not rejected: " + answer);
    } catch (ExecutionException e) {
      if (e.getCause() instanceof V2ErrorResponseException rejected) return rejected.getModeledError();
      throw e;
    }
  }

  // --- mqstore's operator API (any MQTT 5 client can call it: here the SDK's runtime's own) ---

  JsonObject createJob(String jobId, List<String> targets, String document, String abort)
      throws Exception {
    JsonObject request = new JsonObject();
    request.addProperty("op", "createJob");
    request.addProperty("jobId", jobId);
    request.add("targets", new Gson().toJsonTree(targets));
    request.add("document", JsonParser.parseString(document));
    if (abort != null) request.add("abortConfig", JsonParser.parseString(abort));
    return operate(request.toString());
  }

  /** One operator call: MQTT 5 request/response with JSON, on mqstore/jobs/v1/command/invoke. */
  JsonObject operate(String request) throws Exception {
    BlockingQueue<PublishPacket> answers = new LinkedBlockingQueue<>();
    String id = "operator-" + UUID.randomUUID().toString().substring(0, 8);
    Mqtt5Client operator = connect5(id, answers::add);
    String responseTopic = "clients/" + id + "/jobs/response";
    await(operator.subscribe(new SubscribePacket.SubscribePacketBuilder(responseTopic, QOS.AT_LEAST_ONCE).build()));
    byte[] correlation = UUID.randomUUID().toString().getBytes(StandardCharsets.UTF_8);
    await(
        operator.publish(
            new PublishPacket.PublishPacketBuilder(
                    "mqstore/jobs/v1/command/invoke",
                    QOS.AT_LEAST_ONCE,
                    request.getBytes(StandardCharsets.UTF_8))
                .withResponseTopic(responseTopic)
                .withCorrelationData(correlation)
                .withUserProperties(List.of(new UserProperty("__protVer", "1.0")))
                .build()));
    PublishPacket answer = next(answers, "operator answer");
    operator.stop();
    check(
        java.util.Arrays.equals(answer.getCorrelationData(), correlation),
        "the answer carries the request's correlation data");
    return JsonParser.parseString(new String(answer.getPayload(), StandardCharsets.UTF_8))
        .getAsJsonObject();
  }
}
