/* Layer 2, bring your own MQTT: libmosquitto is the transport, driving mqstore_core against a
 * real mosquitto + `mqstore serve` (MQSTORE_TEST_PORT, from run.py). One thread: the test's
 * own loop runs libmosquitto, the state machine and its deadlines. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>
#include <unistd.h>

#include "mosquitto_glue.h"
#include "test.h"

typedef struct {
  mqstore_core *core;
  int subscribed;
  int connected;
} session;

static uint64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

static void on_connect(struct mosquitto *mosq, void *obj, int rc, int flags, const mosquitto_property *props) {
  (void)mosq, (void)flags, (void)props;
  session *s = obj;
  s->connected = rc == 0 ? 1 : -1;
}

static void on_subscribe(struct mosquitto *mosq, void *obj, int mid, int count, const int *granted,
                         const mosquitto_property *props) {
  (void)mosq, (void)mid, (void)props;
  session *s = obj;
  for (int i = 0; i < count; i++)
    if (granted[i] <= 2) s->subscribed++;
}

/* The device the command test sends to: the test answers its commands itself. */
#define DEVICE_TOPIC "c-byo/devices/d1/cmd"
/* testdata/numbers.json without its spaces (scripts/test-c defines it). */
#ifndef NUMBERS
#error "define NUMBERS: testdata/numbers.json without spaces, as a C string"
#endif

/* Answers a command as an MQTT 5 request/response device: "pong", to its response topic with
 * its correlation data. */
static void answer_command(struct mosquitto *mosq, const mosquitto_property *props) {
  char *response_topic = NULL;
  void *correlation = NULL;
  uint16_t correlation_len = 0;
  CHECK(mosquitto_property_read_string(props, MQTT_PROP_RESPONSE_TOPIC, &response_topic, false) != NULL);
  CHECK(mosquitto_property_read_binary(props, MQTT_PROP_CORRELATION_DATA, &correlation, &correlation_len, false) !=
        NULL);
  mosquitto_property *reply = NULL;
  CHECK(mosquitto_property_add_binary(&reply, MQTT_PROP_CORRELATION_DATA, correlation, correlation_len) ==
        MOSQ_ERR_SUCCESS);
  CHECK(mosquitto_publish_v5(mosq, NULL, response_topic, 4, "pong", 1, false, reply) == MOSQ_ERR_SUCCESS);
  mosquitto_property_free_all(&reply);
  free(response_topic);
  free(correlation);
}

static void on_message(struct mosquitto *mosq, void *obj, const struct mosquitto_message *m,
                       const mosquitto_property *props) {
  session *s = obj;
  if (strcmp(m->topic, DEVICE_TOPIC) == 0) {
    answer_command(mosq, props);
    return;
  }
  CHECK_OK(glue_handle(s->core, m, props, now_ms()));
}

/* One turn of the loop: the network, then the deadline, then whatever is to be sent. */
static void turn(struct mosquitto *mosq, session *s) {
  uint64_t deadline = 0;
  CHECK_OK(mqstore_core_next_deadline(s->core, &deadline));
  uint64_t now = now_ms();
  int wait = deadline == MQSTORE_NO_DEADLINE ? 100 : deadline <= now ? 0 : (int)(deadline - now > 100 ? 100 : deadline - now);
  CHECK(mosquitto_loop(mosq, wait, 1) == MOSQ_ERR_SUCCESS);
  CHECK_OK(mqstore_core_expire(s->core, now_ms()));
  CHECK_OK(glue_flush(mosq, s->core));
}

/* Runs the loop until the next event (20 s at most); the caller frees it. */
static mqstore_event *next_event(struct mosquitto *mosq, session *s) {
  uint64_t give_up = now_ms() + 20000;
  for (;;) {
    mqstore_event *event = NULL;
    CHECK_OK(mqstore_core_next_event(s->core, &event));
    if (event != NULL) return event;
    if (now_ms() > give_up) FAIL("no event within 20 s");
    turn(mosq, s);
  }
}

/* The next event must finish `call` without an error. */
static mqstore_event *completed(struct mosquitto *mosq, session *s, uint64_t call) {
  mqstore_event *event = next_event(mosq, s);
  CHECK(event->kind == MQSTORE_EVENT_COMPLETED);
  CHECK(event->call == call);
  if (event->status != 0) FAIL("call %llu failed: %d %s", (unsigned long long)call, event->status, event->error);
  return event;
}

static struct mosquitto *mosq;
static session s;

static void connect_and_subscribe(void) {
  mosquitto_lib_init();
  CHECK_OK(mqstore_core_new("c-byo", (uint64_t)now_ms() * 2654435761u, 2000, &s.core));
  mosq = mosquitto_new("c-byo", true, &s);
  CHECK(mosq != NULL);
  CHECK(mosquitto_int_option(mosq, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V5) == MOSQ_ERR_SUCCESS);
  const char *presence = mqstore_core_presence_topic(s.core);
  CHECK(presence != NULL);
  CHECK(mosquitto_will_set_v5(mosq, presence, 4, "gone", 1, false, NULL) == MOSQ_ERR_SUCCESS);
  mosquitto_connect_v5_callback_set(mosq, on_connect);
  mosquitto_subscribe_v5_callback_set(mosq, on_subscribe);
  mosquitto_message_v5_callback_set(mosq, on_message);
  const char *port = getenv("MQSTORE_TEST_PORT");
  if (port == NULL) FAIL("MQSTORE_TEST_PORT is not set: run the C tests with bindings-c/tests/run.py");
  CHECK(mosquitto_connect_bind_v5(mosq, "127.0.0.1", atoi(port), 30, NULL, NULL) == MOSQ_ERR_SUCCESS);
  while (s.connected == 0) CHECK(mosquitto_loop(mosq, 100, 1) == MOSQ_ERR_SUCCESS);
  CHECK(s.connected == 1);
  int filters = 0;
  for (const char *filter; (filter = mqstore_core_subscription(s.core, (size_t)filters)) != NULL; filters++)
    CHECK(mosquitto_subscribe_v5(mosq, NULL, filter, 1, 0, NULL) == MOSQ_ERR_SUCCESS);
  CHECK(filters == 5);
  CHECK(mqstore_core_subscription_count(s.core) == 5);
  while (s.subscribed < filters) CHECK(mosquitto_loop(mosq, 100, 1) == MOSQ_ERR_SUCCESS);
}

/* Subscribes to the filters from `from` on (what act_as or watch_commands added) and waits. */
static void subscribe_from(size_t from) {
  size_t count = mqstore_core_subscription_count(s.core);
  int wanted = s.subscribed + (int)(count - from);
  for (size_t i = from; i < count; i++)
    CHECK(mosquitto_subscribe_v5(mosq, NULL, mqstore_core_subscription(s.core, i), 1, 0, NULL) == MOSQ_ERR_SUCCESS);
  while (s.subscribed < wanted) CHECK(mosquitto_loop(mosq, 100, 1) == MOSQ_ERR_SUCCESS);
}

/* Runs the loop until `call` completes, keeping the other events (notifications) it meets in
 * `seen` (at most 8; the caller frees them). */
static mqstore_event *finish(uint64_t call, mqstore_event **seen, int *seen_count) {
  for (;;) {
    mqstore_event *event = next_event(mosq, &s);
    if (event->kind == MQSTORE_EVENT_COMPLETED && event->call == call) return event;
    CHECK(*seen_count < 8);
    seen[(*seen_count)++] = event;
  }
}

static void free_all(mqstore_event **events, int count) {
  for (int i = 0; i < count; i++) mqstore_event_free(events[i]);
}

/* A jobs call that must succeed: its event, whose `json` contains `expected`. */
static mqstore_event *jobs_ok(uint64_t call, const char *expected) {
  mqstore_event *seen[8];
  int n = 0;
  mqstore_event *event = finish(call, seen, &n);
  free_all(seen, n);
  if (event->status != 0) FAIL("jobs call failed: %d %s", event->status, event->error);
  CHECK(event->op == MQSTORE_OP_JOBS);
  CHECK(event->json != NULL);
  if (strstr(event->json, expected) == NULL) FAIL("%s does not contain %s", event->json, expected);
  return event;
}

static void jobs_both_sides_over_libmosquitto(void) {
  const char *thing = "c-byo-pump";
  size_t before = mqstore_core_subscription_count(s.core);
  /* Not acting as the thing yet: refused, nothing sent (its reply would never arrive). */
  uint64_t refused = 0;
  CHECK_STATUS(mqstore_core_jobs_device(s.core, thing, "get", NULL, now_ms(), &refused), MQSTORE_ERR_JOBS);
  mqstore_publish *nothing = NULL;
  CHECK_OK(mqstore_core_next_publish(s.core, &nothing));
  CHECK(nothing == NULL);
  CHECK_OK(mqstore_core_act_as(s.core, thing));
  CHECK(mqstore_core_subscription_count(s.core) > before);
  size_t after = mqstore_core_subscription_count(s.core);
  CHECK_OK(mqstore_core_act_as(s.core, thing));
  CHECK(mqstore_core_subscription_count(s.core) == after); /* once */
  subscribe_from(before);

  uint64_t call = 0;
  CHECK_OK(mqstore_core_jobs_operate(
      s.core,
      "{\"op\": \"createJob\", \"jobId\": \"c-byo-fw\", \"targets\": [\"c-byo-pump\"], "
      "\"document\": {\"url\": \"https://example.com/fw.bin\"}}",
      now_ms(), &call));
  mqstore_event *seen[8];
  int n = 0;
  mqstore_event *event = finish(call, seen, &n);
  if (event->status != 0) FAIL("createJob failed: %s", event->error);
  CHECK(strstr(event->json, "\"jobId\":\"c-byo-fw\"") != NULL);
  mqstore_event_free(event);
  /* The job's notify-next reaches the thing (before or after the answer). */
  int notified = 0;
  for (;;) {
    for (int i = 0; i < n; i++)
      if (seen[i]->kind == MQSTORE_EVENT_JOBS && strcmp(seen[i]->thing, thing) == 0 &&
          strstr(seen[i]->json, "\"notify-next\"") != NULL && strstr(seen[i]->json, "c-byo-fw") != NULL)
        notified = 1;
    free_all(seen, n);
    n = 0;
    if (notified) break;
    seen[n++] = next_event(mosq, &s);
  }

  CHECK_OK(mqstore_core_jobs_device(s.core, thing, "start-next", "{\"statusDetails\": {\"step\": \"download\"}}",
                                    now_ms(), &call));
  event = jobs_ok(call, "\"status\":\"IN_PROGRESS\"");
  CHECK(strstr(event->json, "https://example.com/fw.bin") != NULL); /* the document */
  mqstore_event_free(event);
  CHECK_OK(mqstore_core_jobs_device(s.core, thing, "c-byo-fw/update",
                                    "{\"status\": \"IN_PROGRESS\", \"statusDetails\": {\"step\": \"flash\"}, "
                                    "\"includeJobExecutionState\": true}",
                                    now_ms(), &call));
  mqstore_event_free(jobs_ok(call, "\"step\":\"flash\""));
  CHECK_OK(mqstore_core_jobs_device(s.core, thing, "c-byo-fw/update", "{\"status\": \"SUCCEEDED\"}", now_ms(), &call));
  mqstore_event_free(jobs_ok(call, "timestamp"));
  /* Ended: another update is refused with AWS's code. */
  CHECK_OK(mqstore_core_jobs_device(s.core, thing, "c-byo-fw/update", "{\"status\": \"FAILED\"}", now_ms(), &call));
  event = finish(call, seen, &n);
  free_all(seen, n);
  n = 0;
  CHECK(event->status == MQSTORE_ERR_JOBS);
  CHECK(strstr(event->error, "InvalidStateTransition") != NULL);
  mqstore_event_free(event);
  CHECK_OK(mqstore_core_jobs_operate(
      s.core, "{\"op\": \"describeJobExecution\", \"jobId\": \"c-byo-fw\", \"thingName\": \"c-byo-pump\"}",
      now_ms(), &call));
  mqstore_event_free(jobs_ok(call, "\"status\":\"SUCCEEDED\""));
  CHECK_OK(mqstore_core_jobs_device(s.core, thing, "start-next", NULL, now_ms(), &call));
  mqstore_event_free(jobs_ok(call, "null")); /* nothing pending */

  /* Bad requests are refused before anything is queued. */
  CHECK_STATUS(mqstore_core_jobs_operate(s.core, "{\"op\": \"dropTables\"}", now_ms(), &call),
               MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_ERROR_SAYS("fits no operator call");
  CHECK_STATUS(mqstore_core_jobs_operate(s.core, "not json", now_ms(), &call), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_core_jobs_device(s.core, thing, "c-byo-fw/cancel", NULL, now_ms(), &call),
               MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_ERROR_SAYS("is not a jobs device API");
  CHECK_STATUS(mqstore_core_jobs_device(s.core, thing, "start-next", "{\"stepTimeoutInMinutes\": 0}", now_ms(), &call),
               MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_core_jobs_device(s.core, thing, "start-next", "[1]", now_ms(), &call),
               MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_core_act_as(s.core, "no spaces allowed"), MQSTORE_ERR_JOBS);
  CHECK_STATUS(mqstore_core_jobs_device(s.core, "no spaces allowed", "get", NULL, now_ms(), &call), MQSTORE_ERR_JOBS);
  mqstore_publish *p = (mqstore_publish *)1;
  CHECK_OK(mqstore_core_next_publish(s.core, &p));
  CHECK(p == NULL);

  /* Leaving the thing gives back its filters (unsubscribe from them); they are off the list,
   * and device calls are refused again. Too little room: refused, nothing changes. */
  size_t count = 0, listed = mqstore_core_subscription_count(s.core);
  const char *filters[6] = {0};
  CHECK_STATUS(mqstore_core_leave(s.core, thing, filters, 2, &count), MQSTORE_ERR_BUFFER_TOO_SMALL);
  CHECK(count == 6);
  CHECK(mqstore_core_subscription_count(s.core) == listed);
  CHECK_OK(mqstore_core_leave(s.core, thing, filters, 6, &count));
  CHECK(count == 6);
  CHECK(mqstore_core_subscription_count(s.core) == listed - 6);
  for (size_t i = 0; i < count; i++) {
    CHECK(strstr(filters[i], "$aws/things/c-byo-pump/jobs/") == filters[i]);
    CHECK(mosquitto_unsubscribe(mosq, NULL, filters[i]) == MOSQ_ERR_SUCCESS);
  }
  CHECK_STATUS(mqstore_core_jobs_device(s.core, thing, "get", NULL, now_ms(), &call), MQSTORE_ERR_JOBS);
  CHECK_OK(mqstore_core_leave(s.core, thing, NULL, 0, &count));
  CHECK(count == 0);
}

static void a_shadow_over_libmosquitto(void) {
  char thing[32]; /* one per run: a deleted shadow keeps its version */
  snprintf(thing, sizeof thing, "c-byo-lamp-%d", (int)getpid());
  uint64_t call = 0;
  /* Not in use yet: refused, nothing sent. */
  CHECK_STATUS(mqstore_core_shadow(s.core, thing, NULL, "get", NULL, -1, now_ms(), &call), MQSTORE_ERR_STATUS);
  size_t before = mqstore_core_subscription_count(s.core);
  CHECK_OK(mqstore_core_use_shadow(s.core, thing, "config"));
  subscribe_from(before);

  CHECK_OK(mqstore_core_shadow(s.core, thing, "config", "get", NULL, -1, now_ms(), &call));
  mqstore_event *seen[8];
  int n = 0;
  mqstore_event *event = finish(call, seen, &n);
  CHECK(event->op == MQSTORE_OP_SHADOW);
  CHECK(event->status == MQSTORE_ERR_STATUS);
  CHECK(strstr(event->error, "404: No shadow exists with name: 'config'") != NULL);
  mqstore_event_free(event);

  CHECK_OK(mqstore_core_shadow(s.core, thing, "config", "update", "{\"desired\": {\"fw\": \"2.0\"}}", -1, now_ms(),
                               &call));
  event = finish(call, seen, &n);
  if (event->status != 0) FAIL("shadow update failed: %s", event->error);
  CHECK(strstr(event->json, "\"version\":1") != NULL);
  mqstore_event_free(event);
  /* Its delta and documents, before or after the answer. */
  int delta = 0, documents = 0;
  while (delta == 0 || documents == 0) {
    for (int i = 0; i < n; i++) {
      if (seen[i]->kind != MQSTORE_EVENT_SHADOW) continue;
      CHECK(strcmp(seen[i]->thing, thing) == 0 && strcmp(seen[i]->shadow_name, "config") == 0);
      delta += strstr(seen[i]->json, "\"stream\":\"delta\"") != NULL;
      documents += strstr(seen[i]->json, "\"stream\":\"documents\"") != NULL;
    }
    free_all(seen, n);
    n = 0;
    if (delta == 0 || documents == 0) seen[n++] = next_event(mosq, &s);
  }
  CHECK(delta == 1 && documents == 1);

  CHECK_OK(mqstore_core_shadow(s.core, thing, "config", "update", "{\"reported\": {\"fw\": \"1.0\"}}", 0, now_ms(),
                               &call));
  event = finish(call, seen, &n);
  CHECK(event->status == MQSTORE_ERR_STATUS && strstr(event->error, "409: Version conflict") != NULL);
  mqstore_event_free(event);
  CHECK_OK(mqstore_core_shadow(s.core, thing, "config", "delete", NULL, -1, now_ms(), &call));
  event = finish(call, seen, &n);
  CHECK(event->status == 0 && strstr(event->json, "\"version\":1") != NULL);
  mqstore_event_free(event);
  free_all(seen, n);
  n = 0;

  /* Numbers come back to the last bit: testdata/numbers.json's doubles, which serde_json's
     default parsing reads one unit in the last place off, and the extremes. */
  CHECK_OK(mqstore_core_shadow(s.core, thing, "config", "update", "{\"reported\": {\"n\": " NUMBERS "}}", -1,
                               now_ms(), &call));
  event = finish(call, seen, &n);
  free_all(seen, n);
  n = 0;
  if (event->status != 0) FAIL("shadow update failed: %s", event->error);
  if (strstr(event->json, NUMBERS) == NULL) FAIL("%s does not contain %s", event->json, NUMBERS);
  mqstore_event_free(event);

  /* Bad requests are refused before anything is queued. */
  CHECK_STATUS(mqstore_core_shadow(s.core, thing, "config", "patch", NULL, -1, now_ms(), &call),
               MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_core_shadow(s.core, thing, "config", "update", "{not json", -1, now_ms(), &call),
               MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_core_shadow(s.core, thing, "config", "update", NULL, -1, now_ms(), &call),
               MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_core_use_shadow(s.core, "c/lamp", NULL), MQSTORE_ERR_STATUS);
  mqstore_publish *p = (mqstore_publish *)1;
  CHECK_OK(mqstore_core_next_publish(s.core, &p));
  CHECK(p == NULL);
}

/* Runs the loop until an event of `kind` for `call` (completion or lease event). */
static mqstore_event *event_for(mqstore_event_kind kind, uint64_t call) {
  for (;;) {
    mqstore_event *event = next_event(mosq, &s);
    if (event->kind == kind && event->call == call) return event;
    mqstore_event_free(event);
  }
}

static void leases_wait_renew_release_and_get_lost(void) {
  uint64_t call = 0, lease = 0;
  /* Someone else holds the lock: one try is refused. */
  CHECK_OK(mqstore_core_set(s.core, S("c-byo/lock"), S("someone-else"), NULL, now_ms(), &call));
  mqstore_event_free(completed(mosq, &s, call));
  CHECK_OK(mqstore_core_lease(s.core, S("c-byo/lock"), 3000, 0, now_ms(), &lease));
  mqstore_event *event = event_for(MQSTORE_EVENT_COMPLETED, lease);
  CHECK(event->status == 0 && event->op == MQSTORE_OP_LEASE && !event->applied);
  mqstore_event_free(event);

  /* Waiting: taken as soon as the holder's key is deleted. */
  CHECK_OK(mqstore_core_lease(s.core, S("c-byo/lock"), 1500, 20000, now_ms(), &lease));
  CHECK_OK(mqstore_core_del(s.core, S("c-byo/lock"), NULL, now_ms(), &call));
  event = event_for(MQSTORE_EVENT_COMPLETED, lease);
  CHECK(event->status == 0 && event->op == MQSTORE_OP_LEASE && event->applied && event->has_version);
  mqstore_hlc token = event->version;
  mqstore_event_free(event);

  /* Renewed a third of the ttl after each claim. */
  event = event_for(MQSTORE_EVENT_LEASE_RENEWED, lease);
  int order = 0;
  CHECK(event->has_version);
  CHECK_OK(mqstore_hlc_compare(&event->version, &token, &order));
  CHECK(order > 0);
  mqstore_event_free(event);
  uint64_t release = 0;
  CHECK_OK(mqstore_core_lease_release(s.core, lease, now_ms(), &release));
  event = event_for(MQSTORE_EVENT_COMPLETED, release);
  CHECK(event->status == 0 && event->op == MQSTORE_OP_LEASE_RELEASE && event->applied);
  mqstore_event_free(event);
  CHECK_OK(mqstore_core_lease_release(s.core, lease, now_ms(), &release));
  event = event_for(MQSTORE_EVENT_COMPLETED, release);
  CHECK(!event->applied); /* no longer held */
  mqstore_event_free(event);

  /* Taken by someone else while held: lost at the next renewal. */
  CHECK_OK(mqstore_core_lease(s.core, S("c-byo/lock"), 1500, 0, now_ms(), &lease));
  event = event_for(MQSTORE_EVENT_COMPLETED, lease);
  CHECK(event->applied);
  mqstore_event_free(event);
  CHECK_OK(mqstore_core_del(s.core, S("c-byo/lock"), NULL, now_ms(), &call));
  CHECK_OK(mqstore_core_set(s.core, S("c-byo/lock"), S("someone-else"), NULL, now_ms(), &call));
  event = event_for(MQSTORE_EVENT_LEASE_LOST, lease);
  CHECK_BYTES(event->key, event->key_len, "c-byo/lock", 10);
  mqstore_event_free(event);

  CHECK_STATUS(mqstore_core_lease(s.core, S("c-byo/lock"), 0, 0, now_ms(), &lease), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_core_lease(s.core, NULL, 0, 1000, 0, now_ms(), &lease), MQSTORE_ERR_INVALID_ARGUMENT);
}

static void a_command_is_answered_by_the_device(void) {
  CHECK(mosquitto_subscribe_v5(mosq, NULL, DEVICE_TOPIC, 1, 0, NULL) == MOSQ_ERR_SUCCESS);
  int wanted = s.subscribed + 1;
  while (s.subscribed < wanted) CHECK(mosquitto_loop(mosq, 100, 1) == MOSQ_ERR_SUCCESS);
  size_t before = mqstore_core_subscription_count(s.core);
  CHECK_OK(mqstore_core_watch_commands(s.core));
  CHECK(mqstore_core_subscription_count(s.core) == before + 1);
  subscribe_from(before);

  uint64_t call = 0;
  mqstore_command_options options = {0};
  options.timeout_ms = 5000;
  CHECK_OK(mqstore_core_command(s.core, DEVICE_TOPIC, (const uint8_t *)"ping", 4, &options, now_ms(), &call));
  mqstore_event *seen[8];
  int n = 0;
  mqstore_event *event = finish(call, seen, &n);
  if (event->status != 0) FAIL("command failed: %d %s", event->status, event->error);
  CHECK(event->op == MQSTORE_OP_COMMAND);
  CHECK_BYTES(event->value, event->value_len, "pong", 4);
  CHECK(strstr(event->json, "\"status\":\"SUCCEEDED\"") != NULL);
  const char *id = strstr(event->json, "\"id\":\"");
  CHECK(id != NULL);
  char command_id[64] = {0};
  id += strlen("\"id\":\"");
  size_t id_len = (size_t)(strchr(id, '"') - id);
  CHECK(id_len > 0 && id_len < sizeof command_id);
  memcpy(command_id, id, id_len);
  mqstore_event_free(event);

  /* The record's changes come as events (SENT, then the answer), some perhaps already. */
  int succeeded = 0;
  for (;;) {
    for (int i = 0; i < n; i++)
      if (seen[i]->kind == MQSTORE_EVENT_COMMAND_RECORD && strstr(seen[i]->json, command_id) != NULL &&
          strstr(seen[i]->json, "\"status\":\"SUCCEEDED\"") != NULL)
        succeeded = 1;
    free_all(seen, n);
    n = 0;
    if (succeeded) break;
    seen[n++] = next_event(mosq, &s);
  }

  CHECK_OK(mqstore_core_command_status(s.core, command_id, now_ms(), &call));
  event = finish(call, seen, &n);
  free_all(seen, n);
  CHECK(event->status == 0 && event->op == MQSTORE_OP_COMMAND_STATUS);
  CHECK(strstr(event->json, command_id) != NULL && strstr(event->json, "SUCCEEDED") != NULL);
  mqstore_event_free(event);

  CHECK_STATUS(mqstore_core_command(s.core, "", (const uint8_t *)"x", 1, NULL, now_ms(), &call),
               MQSTORE_ERR_INVALID_ARGUMENT);
  options.mode = 7;
  CHECK_STATUS(mqstore_core_command(s.core, DEVICE_TOPIC, (const uint8_t *)"x", 1, &options, now_ms(), &call),
               MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_core_command_status(s.core, "", now_ms(), &call), MQSTORE_ERR_INVALID_ARGUMENT);

  /* Stored commands: one defined, then listed; a start of an unknown one is refused (404). */
  n = 0;
  CHECK_OK(mqstore_core_command_definitions(
      s.core, "{\"op\": \"create\", \"command\": {\"commandId\": \"byo-ping\", \"payload\": {\"content\": \"{}\"}}}",
      now_ms(), &call));
  event = finish(call, seen, &n);
  free_all(seen, n);
  n = 0;
  if (event->status != 0) FAIL("define failed: %d %s", event->status, event->error);
  CHECK(event->op == MQSTORE_OP_COMMAND_DEFINITIONS && strstr(event->json, "\"byo-ping\"") != NULL);
  mqstore_event_free(event);
  CHECK_OK(mqstore_core_command_definitions(s.core, "{\"op\": \"list\"}", now_ms(), &call));
  event = finish(call, seen, &n);
  free_all(seen, n);
  n = 0;
  CHECK(event->status == 0 && strstr(event->json, "\"commands\"") != NULL && strstr(event->json, "byo-ping") != NULL);
  mqstore_event_free(event);
  CHECK_OK(mqstore_core_command_start(s.core, "byo-none", "c-byo-thing", NULL, NULL, now_ms(), &call));
  event = finish(call, seen, &n);
  free_all(seen, n);
  n = 0;
  CHECK(event->status == MQSTORE_ERR_STATUS && strstr(event->error, "byo-none") != NULL);
  mqstore_event_free(event);
  CHECK_STATUS(mqstore_core_command_start(s.core, "", "x", NULL, NULL, now_ms(), &call), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_core_command_start(s.core, "byo-ping", "x", "[1]", NULL, now_ms(), &call),
               MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_core_command_definitions(s.core, "not json", now_ms(), &call), MQSTORE_ERR_INVALID_ARGUMENT);

  /* Stop watching: the filter comes back (unsubscribe from it) and is off the list; again:
   * nothing. */
  const char *filter = NULL;
  CHECK_OK(mqstore_core_unwatch_commands(s.core, &filter));
  CHECK(filter != NULL && strcmp(filter, "mqstore/commands/v1/events/+") == 0);
  CHECK(mqstore_core_subscription_count(s.core) == before);
  CHECK(mosquitto_unsubscribe(mosq, NULL, filter) == MOSQ_ERR_SUCCESS);
  CHECK_OK(mqstore_core_unwatch_commands(s.core, &filter));
  CHECK(filter == NULL);
}

static void a_call_becomes_a_publish_with_every_property(void) {
  uint64_t call = 0;
  CHECK_OK(mqstore_core_get(s.core, S("byo/props"), now_ms(), &call));
  mqstore_publish *p = NULL;
  CHECK_OK(mqstore_core_next_publish(s.core, &p));
  CHECK(p != NULL);
  CHECK(strstr(p->topic, "/command/invoke") != NULL);
  CHECK(p->qos == 1);
  CHECK(p->response_topic != NULL);
  CHECK(p->correlation_data_len == 16);
  CHECK(strcmp(p->content_type, "application/octet-stream") == 0);
  CHECK(p->message_expiry_interval == 2);
  int have_ts = 0, have_src = 0;
  for (size_t i = 0; i < p->user_property_count; i++) {
    if (strcmp(p->user_properties[i].name, "__ts") == 0) have_ts = 1;
    if (strcmp(p->user_properties[i].name, "__srcId") == 0 && strcmp(p->user_properties[i].value, "c-byo") == 0)
      have_src = 1;
  }
  CHECK(have_ts && have_src);
  mqstore_request *request = NULL;
  CHECK_OK(mqstore_decode_request(p->payload, p->payload_len, &request));
  CHECK(request->op == MQSTORE_OP_GET);
  CHECK_BYTES(request->key, request->key_len, "byo/props", 9);
  mqstore_request_free(request);
  CHECK(glue_publish(mosq, p) == MOSQ_ERR_SUCCESS);
  mqstore_publish_free(p);
  mqstore_event *event = completed(mosq, &s, call);
  CHECK(event->op == MQSTORE_OP_GET);
  CHECK(!event->found);
  mqstore_event_free(event);
}

static void set_get_del_scan_over_libmosquitto(void) {
  uint64_t call = 0;
  mqstore_set_options nx = {0};
  nx.condition = MQSTORE_SET_NX;
  CHECK_OK(mqstore_core_set(s.core, S("byo/k"), S("v1"), &nx, now_ms(), &call));
  mqstore_event *event = completed(mosq, &s, call);
  CHECK(event->op == MQSTORE_OP_SET);
  CHECK(event->applied);
  CHECK(event->has_version);
  mqstore_hlc version = event->version;
  mqstore_event_free(event);

  CHECK_OK(mqstore_core_set(s.core, S("byo/k"), S("v2"), &nx, now_ms(), &call));
  event = completed(mosq, &s, call);
  CHECK(!event->applied);
  mqstore_event_free(event);

  CHECK_OK(mqstore_core_get(s.core, S("byo/k"), now_ms(), &call));
  event = completed(mosq, &s, call);
  CHECK(event->found);
  CHECK_BYTES(event->value, event->value_len, "v1", 2);
  int order = 1;
  CHECK_OK(mqstore_hlc_compare(&event->version, &version, &order));
  CHECK(order == 0);
  mqstore_event_free(event);

  CHECK_OK(mqstore_core_set(s.core, S("byo/other"), S("x"), NULL, now_ms(), &call));
  mqstore_event_free(completed(mosq, &s, call));
  CHECK_OK(mqstore_core_scan(s.core, S("byo/*"), NULL, 0, now_ms(), &call));
  event = completed(mosq, &s, call);
  CHECK(event->op == MQSTORE_OP_SCAN);
  CHECK(event->key_count == 2);
  CHECK(event->scan_token == NULL);
  mqstore_event_free(event);

  CHECK_OK(mqstore_core_vdel(s.core, S("byo/other"), S("y"), NULL, now_ms(), &call));
  event = completed(mosq, &s, call);
  CHECK(event->deleted == MQSTORE_DELETE_VALUE_MISMATCH);
  mqstore_event_free(event);
  CHECK_OK(mqstore_core_del(s.core, S("byo/other"), NULL, now_ms(), &call));
  event = completed(mosq, &s, call);
  CHECK(event->deleted == MQSTORE_DELETED);
  mqstore_event_free(event);
}

static void observe_brings_notifications(void) {
  uint64_t call = 0;
  CHECK_OK(mqstore_core_observe(s.core, S("byo/k"), now_ms(), &call));
  mqstore_event *event = completed(mosq, &s, call);
  CHECK(event->op == MQSTORE_OP_KEYNOTIFY);
  mqstore_event_free(event);

  uint64_t set_call = 0;
  CHECK_OK(mqstore_core_set(s.core, S("byo/k"), S("v3"), NULL, now_ms(), &set_call));
  /* The SET's answer and the notification may come in either order. */
  int changed = 0, answered = 0;
  while (!(changed && answered)) {
    event = next_event(mosq, &s);
    if (event->kind == MQSTORE_EVENT_CHANGED) {
      CHECK_BYTES(event->key, event->key_len, "byo/k", 5);
      CHECK_BYTES(event->value, event->value_len, "v3", 2);
      CHECK(!event->synthetic);
      changed++;
    } else {
      CHECK(event->call == set_call);
      CHECK(event->status == 0);
      answered++;
    }
    mqstore_event_free(event);
  }
  CHECK_OK(mqstore_core_del(s.core, S("byo/k"), NULL, now_ms(), &call));
  changed = answered = 0;
  while (!(changed && answered)) {
    event = next_event(mosq, &s);
    if (event->kind == MQSTORE_EVENT_CHANGED) {
      CHECK(event->value == NULL);
      changed++;
    } else {
      answered++;
    }
    mqstore_event_free(event);
  }
  CHECK_OK(mqstore_core_unobserve(s.core, S("byo/k"), now_ms(), &call));
  mqstore_event_free(completed(mosq, &s, call));
}

static void a_lost_answer_times_out_through_expire(void) {
  uint64_t call = 0;
  uint64_t started = now_ms();
  CHECK_OK(mqstore_core_get(s.core, S("byo/lost"), started, &call));
  /* The publish is dropped, as a broker that lost it would. */
  mqstore_publish *p = NULL;
  CHECK_OK(mqstore_core_next_publish(s.core, &p));
  mqstore_publish_free(p);
  uint64_t deadline = 0;
  CHECK_OK(mqstore_core_next_deadline(s.core, &deadline));
  CHECK(deadline == started + 2000);
  /* Before the deadline nothing fails; at it the call does. */
  CHECK_OK(mqstore_core_expire(s.core, deadline - 1));
  mqstore_event *event = NULL;
  CHECK_OK(mqstore_core_next_event(s.core, &event));
  CHECK(event == NULL);
  event = next_event(mosq, &s);
  CHECK(event->call == call);
  CHECK(event->status == MQSTORE_ERR_REQUEST_TIMEOUT);
  CHECK(strstr(event->error, "no answer") != NULL);
  CHECK(now_ms() >= deadline);
  mqstore_event_free(event);
  CHECK_OK(mqstore_core_next_deadline(s.core, &deadline));
  CHECK(deadline == MQSTORE_NO_DEADLINE);
}

static void a_lost_connection_fails_calls_in_flight(void) {
  uint64_t call = 0;
  CHECK_OK(mqstore_core_get(s.core, S("byo/k"), now_ms(), &call));
  mqstore_publish *p = NULL;
  CHECK_OK(mqstore_core_next_publish(s.core, &p));
  mqstore_publish_free(p);
  CHECK_OK(mqstore_core_connection_lost(s.core));
  mqstore_event *event = NULL;
  CHECK_OK(mqstore_core_next_event(s.core, &event));
  CHECK(event != NULL);
  CHECK(event->call == call);
  CHECK(event->status == MQSTORE_ERR_CONNECTION_LOST);
  mqstore_event_free(event);
}

/* The caller's MQTT client hears the PUBACK: a refusal (0x80 or more) of a call's publish
 * (mqstore_publish.call) fails that call, and only that one. */
static void a_publish_the_broker_refuses_fails_its_call(void) {
  uint64_t refused = 0, other = 0;
  CHECK_OK(mqstore_core_set(s.core, S("byo/refused"), S("v"), NULL, now_ms(), &refused));
  CHECK_OK(mqstore_core_get(s.core, S("byo/other"), now_ms(), &other));
  mqstore_publish *p = NULL;
  CHECK_OK(mqstore_core_next_publish(s.core, &p));
  CHECK(p->call == refused);
  mqstore_publish_free(p);
  CHECK_OK(mqstore_core_next_publish(s.core, &p));
  CHECK(p->call == other);
  mqstore_publish_free(p);
  CHECK_OK(mqstore_core_publish_refused(s.core, refused, 0x10)); /* not a refusal */
  CHECK_OK(mqstore_core_publish_refused(s.core, refused, 0x87));
  mqstore_event *event = NULL;
  CHECK_OK(mqstore_core_next_event(s.core, &event));
  CHECK(event != NULL);
  CHECK(event->call == refused);
  CHECK(event->status == MQSTORE_ERR_PUBLISH_REFUSED);
  CHECK(strcmp(event->error,
               "the MQTT broker refused the request: Not authorized (reason code 0x87); it was not applied") == 0);
  mqstore_event_free(event);
  CHECK_OK(mqstore_core_next_event(s.core, &event));
  CHECK(event == NULL);
  CHECK_OK(mqstore_core_connection_lost(s.core));
  CHECK_OK(mqstore_core_next_event(s.core, &event));
  CHECK(event != NULL && event->call == other && event->status == MQSTORE_ERR_CONNECTION_LOST);
  mqstore_event_free(event);
}

static void too_large_and_bad_arguments_queue_nothing(void) {
  CHECK_OK(mqstore_core_set_max_packet_size(s.core, 200));
  static uint8_t big[300];
  uint64_t call = 0;
  CHECK_STATUS(mqstore_core_set(s.core, S("byo/big"), big, sizeof big, NULL, now_ms(), &call), MQSTORE_ERR_REQUEST_TOO_LARGE);
  CHECK_OK(mqstore_core_set_max_packet_size(s.core, 0));
  CHECK_STATUS(mqstore_core_get(s.core, NULL, 2, now_ms(), &call), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_core_get(NULL, S("k"), now_ms(), &call), MQSTORE_ERR_INVALID_ARGUMENT);
  mqstore_publish bad = {0};
  CHECK_STATUS(mqstore_core_handle(s.core, &bad, now_ms()), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_ERROR_SAYS("message.topic is NULL");
  bad.topic = "t";
  bad.user_property_count = 2;
  CHECK_STATUS(mqstore_core_handle(s.core, &bad, now_ms()), MQSTORE_ERR_INVALID_ARGUMENT);
  /* A message for nobody (a malformed answer to no call) is dropped, not an error. */
  bad.user_property_count = 0;
  bad.topic = mqstore_core_subscription(s.core, 0);
  bad.payload = (const uint8_t *)"garbage";
  bad.payload_len = 7;
  CHECK_OK(mqstore_core_handle(s.core, &bad, now_ms()));
  mqstore_publish *p = (mqstore_publish *)1;
  CHECK_OK(mqstore_core_next_publish(s.core, &p));
  CHECK(p == NULL);
  mqstore_event *event = (mqstore_event *)1;
  CHECK_OK(mqstore_core_next_event(s.core, &event));
  CHECK(event == NULL);
  mqstore_core *other = NULL;
  CHECK_STATUS(mqstore_core_new("a:b", 1, 0, &other), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_core_new("", 1, 0, &other), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK(other == NULL);
  CHECK(mqstore_core_subscription(s.core, mqstore_core_subscription_count(s.core)) == NULL);
  CHECK(mqstore_core_subscription_count(NULL) == 0);
  CHECK(mqstore_core_subscription(NULL, 0) == NULL);
}

static void a_freed_core_is_refused(void) {
  mqstore_core *core = NULL;
  CHECK_OK(mqstore_core_new("c-byo-freed", 7, 0, &core));
  mqstore_core_free(core);
  uint64_t call = 0;
  CHECK_STATUS(mqstore_core_get(core, S("k"), now_ms(), &call), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_ERROR_SAYS("not a live mqstore object");
  mqstore_core_free(core);
  mqstore_core_free(NULL);
}

int main(void) {
  connect_and_subscribe();
  RUN(a_call_becomes_a_publish_with_every_property);
  RUN(set_get_del_scan_over_libmosquitto);
  RUN(observe_brings_notifications);
  RUN(a_lost_answer_times_out_through_expire);
  RUN(a_lost_connection_fails_calls_in_flight);
  RUN(a_publish_the_broker_refuses_fails_its_call);
  RUN(leases_wait_renew_release_and_get_lost);
  RUN(jobs_both_sides_over_libmosquitto);
  RUN(a_shadow_over_libmosquitto);
  RUN(a_command_is_answered_by_the_device);
  RUN(too_large_and_bad_arguments_queue_nothing);
  RUN(a_freed_core_is_refused);
  mosquitto_disconnect_v5(mosq, 0, NULL);
  mosquitto_destroy(mosq);
  mosquitto_lib_cleanup();
  mqstore_core_free(s.core);
  SUMMARY();
  return 0;
}
