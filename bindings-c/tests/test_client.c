/* Layer 1, the connected client, against a real mosquitto and `mqstore serve` (started by
 * run.py on free ports, which passes them in the environment):
 *   MQSTORE_TEST_PORT          broker + server
 *   MQSTORE_TEST_LIMITED_PORT  broker + server with --max-keys 3 and access rules
 *   MQSTORE_TEST_BARE_PORT     a broker with max_packet_size 2000 and no server
 *   MQSTORE_TEST_SECURE_PORT   a broker wanting user fleet, password s3cret (no server); also
 *   MQSTORE_TEST_TLS_PORT      on TLS, signed by MQSTORE_TEST_CA_FILE (not _WRONG_CA_FILE)
 *   MQSTORE_TEST_CLIENT_CERT_PORT  on TLS, wanting a certificate the CA signed: the
 *                              _CLIENT_CERT_FILE and its key _CLIENT_KEY_FILE (encrypted
 *                              with the password fleet-key-1)
 *   MQSTORE_TEST_CLOSED_PORT   nothing listens
 * `test_client --contend PORT KEY MODE` is the second process of the lease test. The device
 * that answers commands is libmosquitto's (on its own thread). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <mosquitto.h>
#include <mqtt_protocol.h>

#include "test.h"

static const char *self_path;

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static uint16_t port_from(const char *name) {
  const char *value = getenv(name);
  if (value == NULL) FAIL("%s is not set: run the C tests with bindings-c/tests/run.py", name);
  return (uint16_t)atoi(value);
}

static mqstore_client *connect_to(uint16_t port, const char *client_id) {
  mqstore_options options = mqstore_options_default();
  options.port = port;
  options.client_id = client_id;
  mqstore_client *client = NULL;
  CHECK_OK(mqstore_connect(&options, &client));
  CHECK(client != NULL);
  return client;
}

static mqstore_client *connect_main(void) { return connect_to(port_from("MQSTORE_TEST_PORT"), NULL); }

/* GET into a stack buffer; returns whether found, the value NUL-terminated in `out`. */
static bool get_text(mqstore_client *c, const char *key, char *out, size_t capacity) {
  size_t len = 0;
  bool found = false;
  CHECK_OK(mqstore_get(c, S(key), (uint8_t *)out, capacity - 1, &len, &found, NULL));
  out[found ? len : 0] = '\0';
  return found;
}

static void set_get_del_vdel_with_versions(void) {
  mqstore_client *c = connect_main();
  mqstore_set_result set;
  CHECK_OK(mqstore_set(c, S("c/one"), S("hello"), NULL, &set));
  CHECK(set.applied);
  CHECK(set.has_version);
  CHECK(set.version.wall_ms > 0);

  uint8_t value[64];
  size_t len = 0;
  bool found = false;
  mqstore_hlc version;
  CHECK_OK(mqstore_get(c, S("c/one"), value, sizeof value, &len, &found, &version));
  CHECK(found);
  CHECK_BYTES(value, len, "hello", 5);
  int order = 1;
  CHECK_OK(mqstore_hlc_compare(&version, &set.version, &order));
  CHECK(order == 0);

  /* NX does not overwrite; NEX with the same value applies (a lock renewed). */
  mqstore_set_options nx = {0};
  nx.condition = MQSTORE_SET_NX;
  CHECK_OK(mqstore_set(c, S("c/one"), S("other"), &nx, &set));
  CHECK(!set.applied);
  char text[64];
  CHECK(get_text(c, "c/one", text, sizeof text));
  CHECK(strcmp(text, "hello") == 0);
  mqstore_set_options nex = {0};
  nex.condition = MQSTORE_SET_NEX;
  CHECK_OK(mqstore_set(c, S("c/one"), S("hello"), &nex, &set));
  CHECK(set.applied);
  CHECK_OK(mqstore_set(c, S("c/one"), S("other"), &nex, &set));
  CHECK(!set.applied);

  /* Binary-safe: NULs and CRLF inside keys and values. */
  const uint8_t key[] = {'c', '/', 0, 1, '\r', '\n'};
  const uint8_t binary[] = {0, 255, '\r', '\n', 0, 7};
  CHECK_OK(mqstore_set(c, key, sizeof key, binary, sizeof binary, NULL, NULL));
  CHECK_OK(mqstore_get(c, key, sizeof key, value, sizeof value, &len, &found, NULL));
  CHECK(found);
  CHECK_BYTES(value, len, binary, sizeof binary);

  /* A buffer too small: the length needed, then the value with a buffer that fits. */
  CHECK_STATUS(mqstore_get(c, S("c/one"), value, 2, &len, &found, NULL), MQSTORE_ERR_BUFFER_TOO_SMALL);
  CHECK(found);
  CHECK(len == 5);
  /* An empty value is a value. */
  CHECK_OK(mqstore_set(c, S("c/empty"), NULL, 0, NULL, NULL));
  CHECK_OK(mqstore_get(c, S("c/empty"), NULL, 0, &len, &found, NULL));
  CHECK(found);
  CHECK(len == 0);

  mqstore_delete_result deleted;
  CHECK_OK(mqstore_vdel(c, S("c/one"), S("not it"), NULL, &deleted));
  CHECK(deleted.outcome == MQSTORE_DELETE_VALUE_MISMATCH);
  CHECK(get_text(c, "c/one", text, sizeof text));
  CHECK_OK(mqstore_vdel(c, S("c/one"), S("hello"), NULL, &deleted));
  CHECK(deleted.outcome == MQSTORE_DELETED);
  CHECK(!get_text(c, "c/one", text, sizeof text));
  CHECK_OK(mqstore_del(c, S("c/one"), NULL, &deleted));
  CHECK(deleted.outcome == MQSTORE_DELETE_ABSENT);
  CHECK_OK(mqstore_del(c, key, sizeof key, NULL, &deleted));
  CHECK(deleted.outcome == MQSTORE_DELETED);
  mqstore_client_free(c);
}

static void scan_returns_every_matching_key(void) {
  mqstore_client *c = connect_main();
  char key[32];
  for (int i = 0; i < 25; i++) {
    snprintf(key, sizeof key, "c-scan/%02d", i);
    CHECK_OK(mqstore_set(c, S(key), S("x"), NULL, NULL));
  }
  CHECK_OK(mqstore_set(c, S("c-other/1"), S("x"), NULL, NULL));
  mqstore_keys *keys = NULL;
  CHECK_OK(mqstore_scan(c, S("c-scan/*"), &keys));
  CHECK(keys->count == 25);
  int seen[25] = {0};
  for (size_t i = 0; i < keys->count; i++) {
    CHECK(keys->keys[i].len == 9);
    CHECK(memcmp(keys->keys[i].data, "c-scan/", 7) == 0);
    seen[(keys->keys[i].data[7] - '0') * 10 + (keys->keys[i].data[8] - '0')]++;
  }
  for (int i = 0; i < 25; i++) CHECK(seen[i] == 1);
  mqstore_keys_free(keys);
  CHECK_OK(mqstore_scan(c, S("c-nothing-*"), &keys));
  CHECK(keys->count == 0);
  mqstore_keys_free(keys);
  mqstore_client_free(c);
}

/* The next event within 20 s (a change that never comes fails the test). */
static mqstore_event *next_change(mqstore_client *c) {
  mqstore_event *event = NULL;
  CHECK_OK(mqstore_next_event(c, 20000, &event));
  if (event == NULL) FAIL("no change within 20 s");
  CHECK(event->kind == MQSTORE_EVENT_CHANGED);
  return event;
}

static void observe_delivers_changes_by_polling(void) {
  mqstore_client *c = connect_main();
  mqstore_client *writer = connect_main();
  CHECK_OK(mqstore_observe(c, S("c/watched")));
  mqstore_event *none = (mqstore_event *)1;
  CHECK_OK(mqstore_next_event(c, 0, &none));
  CHECK(none == NULL);

  mqstore_set_result set;
  CHECK_OK(mqstore_set(writer, S("c/watched"), S("v1"), NULL, &set));
  mqstore_event *event = next_change(c);
  CHECK_BYTES(event->key, event->key_len, "c/watched", 9);
  CHECK_BYTES(event->value, event->value_len, "v1", 2);
  CHECK(!event->synthetic);
  CHECK(!event->gap);
  CHECK(event->has_version);
  int order = 1;
  CHECK_OK(mqstore_hlc_compare(&event->version, &set.version, &order));
  CHECK(order == 0);
  mqstore_event_free(event);

  CHECK_OK(mqstore_del(writer, S("c/watched"), NULL, NULL));
  event = next_change(c);
  CHECK(event->value == NULL);
  CHECK(event->value_len == 0);
  mqstore_event_free(event);

  /* A key that expires is reported deleted when it does. */
  mqstore_set_options px = {0};
  px.expires_ms = 200;
  CHECK_OK(mqstore_set(writer, S("c/watched"), S("brief"), &px, NULL));
  event = next_change(c);
  CHECK_BYTES(event->value, event->value_len, "brief", 5);
  mqstore_event_free(event);
  event = next_change(c);
  CHECK(event->value == NULL);
  mqstore_event_free(event);

  /* Observing twice is one observation: one event per change. */
  CHECK_OK(mqstore_observe(c, S("c/watched")));
  CHECK_OK(mqstore_set(writer, S("c/watched"), S("v2"), NULL, NULL));
  event = next_change(c);
  CHECK_BYTES(event->value, event->value_len, "v2", 2);
  mqstore_event_free(event);

  CHECK_OK(mqstore_unobserve(c, S("c/watched")));
  CHECK_OK(mqstore_set(writer, S("c/watched"), S("v3"), NULL, NULL));
  /* A later change of another observed key comes alone: v3 was not delivered. */
  CHECK_OK(mqstore_observe(c, S("c/marker")));
  CHECK_OK(mqstore_set(writer, S("c/marker"), S("m"), NULL, NULL));
  event = next_change(c);
  CHECK_BYTES(event->key, event->key_len, "c/marker", 8);
  mqstore_event_free(event);

  /* Events left unread are freed with the client. */
  CHECK_OK(mqstore_set(writer, S("c/marker"), S("unread"), NULL, NULL));
  mqstore_client_free(writer);
  mqstore_client_free(c);
}

typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t changed;
  int count;
  char values[4][16];
  pthread_t thread;
  mqstore_client *client;
  int call_status;
} callback_state;

static void on_event(const mqstore_event *event, void *user_data) {
  callback_state *state = user_data;
  /* Calls from inside the callback work; freeing the client from here does not. */
  state->call_status = mqstore_set(state->client, S("c/from-callback"), S("x"), NULL, NULL);
  mqstore_client_free(state->client);
  pthread_mutex_lock(&state->lock);
  if (state->count < 4 && event->value != NULL && event->value_len < 16) {
    memcpy(state->values[state->count], event->value, event->value_len);
    state->values[state->count][event->value_len] = '\0';
  }
  state->count++;
  state->thread = pthread_self();
  pthread_cond_broadcast(&state->changed);
  pthread_mutex_unlock(&state->lock);
}

static void wait_for_count(callback_state *state, int count) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 20;
  pthread_mutex_lock(&state->lock);
  while (state->count < count)
    if (pthread_cond_timedwait(&state->changed, &state->lock, &deadline) != 0) break;
  int got = state->count;
  pthread_mutex_unlock(&state->lock);
  if (got < count) FAIL("the callback ran %d times, expected %d within 20 s", got, count);
}

static void observe_delivers_changes_to_a_callback_on_its_own_thread(void) {
  mqstore_client *c = connect_main();
  callback_state state = {.lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER, .client = c};
  CHECK_OK(mqstore_set_event_callback(c, on_event, &state));
  CHECK_OK(mqstore_observe(c, S("c/called")));
  CHECK_OK(mqstore_set(c, S("c/called"), S("a"), NULL, NULL));
  CHECK_OK(mqstore_set(c, S("c/called"), S("b"), NULL, NULL));
  wait_for_count(&state, 2);
  CHECK(strcmp(state.values[0], "a") == 0);
  CHECK(strcmp(state.values[1], "b") == 0);
  CHECK(!pthread_equal(state.thread, pthread_self()));
  CHECK(state.call_status == MQSTORE_OK);

  /* While a callback is set, polling has nothing to give. */
  mqstore_event *event = NULL;
  CHECK_STATUS(mqstore_next_event(c, 0, &event), MQSTORE_ERR_CALLBACK_SET);
  CHECK_OK(mqstore_set_event_callback(c, NULL, NULL));
  CHECK_OK(mqstore_set(c, S("c/called"), S("polled"), NULL, NULL));
  event = next_change(c);
  CHECK_BYTES(event->value, event->value_len, "polled", 6);
  mqstore_event_free(event);
  CHECK(state.count == 2);
  /* The client freed from inside the callback was refused, and still works. */
  char text[16];
  CHECK(get_text(c, "c/from-callback", text, sizeof text));
  mqstore_client_free(c);
}

/* Runs this binary as a second process: `--contend PORT KEY MODE`; its exit status says what
 * it saw (0: as expected). */
static int contend(const char *key, const char *mode) {
  char port[16];
  snprintf(port, sizeof port, "%u", port_from("MQSTORE_TEST_PORT"));
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    execl(self_path, self_path, "--contend", port, key, mode, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  return WEXITSTATUS(status);
}

static int contender_main(const char *port, const char *key, const char *mode) {
  mqstore_client *c = connect_to((uint16_t)atoi(port), "c-contender");
  mqstore_lease *lease = NULL;
  int wait_ms = strcmp(mode, "refused") == 0 ? 0 : 20000;
  CHECK_OK(mqstore_lease_acquire(c, S(key), 5000, (uint32_t)wait_ms, &lease));
  int result = strcmp(mode, "refused") == 0 ? (lease == NULL ? 0 : 1) : (lease != NULL ? 0 : 2);
  if (lease != NULL) CHECK(mqstore_lease_is_held(lease));
  mqstore_lease_free(lease);
  mqstore_client_free(c);
  return result;
}

static void a_lease_held_by_one_process_is_refused_to_another(void) {
  mqstore_client *c = connect_to(port_from("MQSTORE_TEST_PORT"), "c-holder");
  mqstore_lease *lease = NULL;
  CHECK_OK(mqstore_lease_acquire(c, S("c/lease"), 5000, 0, &lease));
  CHECK(lease != NULL);
  CHECK(mqstore_lease_is_held(lease));
  mqstore_hlc token;
  CHECK_OK(mqstore_lease_fencing_token(lease, &token));

  CHECK(contend("c/lease", "refused") == 0);

  /* Writes to what the lease guards carry its token; without one, or with an older one, the
   * server refuses them. */
  mqstore_set_options fenced = {0};
  fenced.fencing_token = &token;
  CHECK_OK(mqstore_set(c, S("c/guarded"), S("v1"), &fenced, NULL));
  CHECK_STATUS(mqstore_set(c, S("c/guarded"), S("v2"), NULL, NULL), MQSTORE_ERR_FENCING_TOKEN_REQUIRED);
  CHECK(strcmp(mqstore_last_error(), "the state store refused the request: a fencing token is required for this request") == 0);
  mqstore_hlc older = token;
  older.wall_ms -= 1000;
  fenced.fencing_token = &older;
  CHECK_STATUS(mqstore_set(c, S("c/guarded"), S("v2"), &fenced, NULL), MQSTORE_ERR_FENCING_TOKEN_LOWER_VERSION);
  mqstore_hlc future = token;
  future.wall_ms += 3600 * 1000;
  fenced.fencing_token = &future;
  CHECK_STATUS(mqstore_set(c, S("c/guarded"), S("v2"), &fenced, NULL), MQSTORE_ERR_FENCING_TOKEN_SKEW);
  CHECK_STATUS(mqstore_del(c, S("c/guarded"), NULL, NULL), MQSTORE_ERR_FENCING_TOKEN_REQUIRED);
  char text[16];
  CHECK(get_text(c, "c/guarded", text, sizeof text));
  CHECK(strcmp(text, "v1") == 0);
  CHECK_OK(mqstore_del(c, S("c/guarded"), &token, NULL));

  /* Released, the other process takes it (it waits for the release). */
  bool released = false;
  CHECK_OK(mqstore_lease_release(lease, &released));
  CHECK(released);
  CHECK(!mqstore_lease_is_held(lease));
  CHECK_STATUS(mqstore_lease_fencing_token(lease, &token), MQSTORE_ERR_INVALID_ARGUMENT);
  mqstore_lease_free(lease);
  CHECK(contend("c/lease", "acquired") == 0);
  mqstore_client_free(c);
}


static void jobs_flow_from_creation_to_success(void) {
  mqstore_client *c = connect_main();
  char thing[32], job_id[32];
  snprintf(thing, sizeof thing, "c-thing-%d", (int)getpid());
  snprintf(job_id, sizeof job_id, "c-job-%d", (int)getpid());
  mqstore_jobs *jobs = NULL;
  CHECK_OK(mqstore_jobs_open(c, thing, &jobs));
  const char *targets[] = {thing};
  CHECK_OK(mqstore_job_create(c, job_id, targets, 1, "{\"op\": \"reboot\"}", 0, 0));
  CHECK_STATUS(mqstore_job_create(c, job_id, targets, 1, "{}", 0, 0), MQSTORE_ERR_JOBS);
  CHECK_STATUS(mqstore_job_create(c, "c-bad-doc", targets, 1, "{not json", 0, 0), MQSTORE_ERR_INVALID_ARGUMENT);

  /* The thing hears of its new job. */
  char *json = NULL;
  for (int i = 0; i < 10 && (json == NULL || strstr(json, job_id) == NULL); i++) {
    mqstore_string_free(json);
    CHECK_OK(mqstore_jobs_next_notification(jobs, 20000, &json));
    CHECK(json != NULL);
  }
  CHECK(strstr(json, job_id) != NULL);
  mqstore_string_free(json);
  CHECK_OK(mqstore_jobs_pending(jobs, &json));
  CHECK(strstr(json, "\"queuedJobs\"") != NULL && strstr(json, job_id) != NULL);
  mqstore_string_free(json);

  CHECK_OK(mqstore_jobs_start_next(jobs, "{\"step\": \"downloading\"}", &json));
  CHECK(json != NULL);
  CHECK(strstr(json, "\"IN_PROGRESS\"") != NULL);
  CHECK(strstr(json, "\"reboot\"") != NULL); /* the job document */
  mqstore_string_free(json);
  CHECK_STATUS(mqstore_jobs_update(jobs, job_id, "DONE", NULL, -1, NULL), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_jobs_update(jobs, job_id, "SUCCEEDED", NULL, 99, NULL), MQSTORE_ERR_JOBS);
  CHECK_ERROR_SAYS("VersionMismatch");
  CHECK_OK(mqstore_jobs_update(jobs, job_id, "SUCCEEDED", "{\"result\": \"ok\"}", -1, &json));
  CHECK(strstr(json, "\"SUCCEEDED\"") != NULL);
  mqstore_string_free(json);
  CHECK_OK(mqstore_jobs_start_next(jobs, NULL, &json));
  CHECK(json == NULL); /* nothing left */
  CHECK_OK(mqstore_job_describe(c, job_id, &json));
  CHECK(strstr(json, job_id) != NULL);
  mqstore_string_free(json);

  /* Every other operator call, as AWS's JSON: a job with a rate and an abort, changed,
   * listed a page at a time, canceled with a reason and deleted. */
  CHECK_OK(mqstore_jobs_operate(c,
                                "{\"op\": \"createJob\", \"jobId\": \"c-rollout\", \"targets\": [\"c-r1\", \"c-r2\"], "
                                "\"document\": {}, \"jobExecutionsRolloutConfig\": {\"maximumPerMinute\": 100}, "
                                "\"abortConfig\": {\"criteriaList\": [{\"failureType\": \"ALL\", \"action\": \"CANCEL\", "
                                "\"thresholdPercentage\": 50, \"minNumberOfExecutedThings\": 1}]}}",
                                NULL));
  CHECK_OK(mqstore_jobs_operate(c, "{\"op\": \"updateJob\", \"jobId\": \"c-rollout\", \"description\": \"gateway\"}", NULL));
  CHECK_OK(mqstore_jobs_operate(c, "{\"op\": \"describeJob\", \"jobId\": \"c-rollout\"}", &json));
  CHECK(strstr(json, "\"description\":\"gateway\"") != NULL);
  CHECK(strstr(json, "\"maximumPerMinute\":100") != NULL);
  mqstore_string_free(json);
  CHECK_OK(mqstore_jobs_operate(c, "{\"op\": \"listJobs\", \"maxResults\": 1}", &json));
  CHECK(strstr(json, "\"nextToken\"") != NULL); /* two jobs, one a page */
  mqstore_string_free(json);
  CHECK_STATUS(mqstore_jobs_operate(c, "{\"op\": \"updateJob\", \"jobId\": \"c-rollout\", "
                                       "\"jobExecutionsRolloutConfig\": {\"maximumPerMinute\": 5000}}", NULL),
               MQSTORE_ERR_JOBS);
  CHECK_ERROR_SAYS("maximumPerMinute");
  CHECK_STATUS(mqstore_jobs_operate(c, "{\"op\": \"dropTables\"}", &json), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK(json == NULL);
  CHECK_OK(mqstore_jobs_operate(c, "{\"op\": \"cancelJob\", \"jobId\": \"c-rollout\", \"reasonCode\": \"C_TEST\"}", NULL));
  CHECK_OK(mqstore_jobs_operate(c, "{\"op\": \"deleteJob\", \"jobId\": \"c-rollout\"}", NULL));
  CHECK_STATUS(mqstore_jobs_operate(c, "{\"op\": \"describeJob\", \"jobId\": \"c-rollout\"}", &json), MQSTORE_ERR_JOBS);
  CHECK_ERROR_SAYS("ResourceNotFound");

  /* Thing groups and templates are operator calls like the others: a continuous job from a
   * template on a group reaches a thing added later. */
  CHECK_OK(mqstore_jobs_operate(c, "{\"op\": \"createThingGroup\", \"thingGroupName\": \"c-fleet\"}", NULL));
  CHECK_OK(mqstore_jobs_operate(c, "{\"op\": \"addThingToThingGroup\", \"thingGroupName\": \"c-fleet\", "
                                   "\"thingName\": \"c-g1\"}", NULL));
  CHECK_OK(mqstore_jobs_operate(c, "{\"op\": \"createJobTemplate\", \"jobTemplateId\": \"c-fw\", "
                                   "\"document\": {\"v\": \"${aws:iot:parameter:v}\"}}", NULL));
  CHECK_OK(mqstore_jobs_operate(c, "{\"op\": \"createJob\", \"jobId\": \"c-cont\", \"targets\": [\"thinggroup/c-fleet\"], "
                                   "\"targetSelection\": \"CONTINUOUS\", \"jobTemplateArn\": \"c-fw\", "
                                   "\"documentParameters\": {\"v\": \"7\"}}", NULL));
  CHECK_OK(mqstore_jobs_operate(c, "{\"op\": \"addThingToThingGroup\", \"thingGroupName\": \"c-fleet\", "
                                   "\"thingName\": \"c-g2\"}", NULL));
  CHECK_OK(mqstore_jobs_operate(c, "{\"op\": \"describeJobExecution\", \"jobId\": \"c-cont\", \"thingName\": \"c-g2\"}", &json));
  CHECK(strstr(json, "\"status\":\"QUEUED\"") != NULL);
  CHECK(strstr(json, "\"v\":\"7\"") != NULL);
  mqstore_string_free(json);
  CHECK_OK(mqstore_jobs_operate(c, "{\"op\": \"listThingsInThingGroup\", \"thingGroupName\": \"c-fleet\"}", &json));
  CHECK(strstr(json, "\"things\":[\"c-g1\",\"c-g2\"]") != NULL);
  mqstore_string_free(json);
  CHECK_STATUS(mqstore_jobs_operate(c, "{\"op\": \"createThingGroup\", \"thingGroupName\": \"c-fleet\"}", NULL),
               MQSTORE_ERR_JOBS);
  CHECK_ERROR_SAYS("ResourceAlreadyExists");
  CHECK_OK(mqstore_jobs_operate(c, "{\"op\": \"cancelJob\", \"jobId\": \"c-cont\"}", NULL));
  CHECK_OK(mqstore_jobs_operate(c, "{\"op\": \"deleteThingGroup\", \"thingGroupName\": \"c-fleet\"}", NULL));

  mqstore_jobs_free(jobs);
  mqstore_jobs *nameless = NULL;
  CHECK_STATUS(mqstore_jobs_open(c, NULL, &nameless), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK(nameless == NULL);
  mqstore_jobs_free(nameless);
  mqstore_client_free(c);
}

static void shadows_desired_reported_and_refusals(void) {
  mqstore_client *c = connect_main();
  char thing[32];
  snprintf(thing, sizeof thing, "c-lamp-%d", (int)getpid());
  mqstore_shadow *lamp = NULL;
  CHECK_OK(mqstore_shadow_open(c, thing, NULL, &lamp));
  char *json = NULL;
  CHECK_STATUS(mqstore_shadow_get(lamp, &json), MQSTORE_ERR_STATUS);
  CHECK(json == NULL);
  CHECK_ERROR_SAYS("404: No shadow exists with name");

  CHECK_OK(mqstore_shadow_update(lamp, "{\"desired\": {\"on\": true, \"level\": 3}}", -1, &json));
  CHECK(strstr(json, "\"version\":1") != NULL);
  mqstore_string_free(json);
  /* The delta, then the update's documents. */
  CHECK_OK(mqstore_shadow_next_notification(lamp, 20000, &json));
  CHECK(json != NULL && strstr(json, "\"stream\":\"delta\"") != NULL);
  CHECK(strstr(json, "\"level\":3") != NULL);
  mqstore_string_free(json);
  CHECK_OK(mqstore_shadow_next_notification(lamp, 20000, &json));
  CHECK(json != NULL && strstr(json, "\"stream\":\"documents\"") != NULL);
  mqstore_string_free(json);

  CHECK_OK(mqstore_shadow_update(lamp, "{\"reported\": {\"on\": true, \"level\": 1}}", 1, NULL));
  CHECK_OK(mqstore_shadow_get(lamp, &json));
  CHECK(strstr(json, "\"delta\":{\"level\":3}") != NULL);
  CHECK(strstr(json, "\"version\":2") != NULL);
  mqstore_string_free(json);
  CHECK_STATUS(mqstore_shadow_update(lamp, "{\"desired\": {\"level\": 1}}", 1, NULL), MQSTORE_ERR_STATUS);
  CHECK_ERROR_SAYS("409: Version conflict");
  CHECK_STATUS(mqstore_shadow_update(lamp, "{\"desired\": [1]}", -1, NULL), MQSTORE_ERR_STATUS);
  CHECK_ERROR_SAYS("400: Desired node must be an object");
  CHECK_STATUS(mqstore_shadow_update(lamp, "{not json", -1, &json), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK(json == NULL);
  CHECK_OK(mqstore_shadow_get(lamp, &json));
  CHECK(strstr(json, "\"version\":2") != NULL); /* the refusals changed nothing */
  mqstore_string_free(json);

  /* A named shadow is a document of its own. */
  mqstore_shadow *config = NULL;
  CHECK_OK(mqstore_shadow_open(c, thing, "config", &config));
  CHECK_OK(mqstore_shadow_update(config, "{\"reported\": {\"fw\": \"1.0\"}}", -1, &json));
  CHECK(strstr(json, "\"version\":1") != NULL);
  mqstore_string_free(json);
  CHECK_OK(mqstore_shadow_delete(lamp, &json));
  CHECK(strstr(json, "\"version\":2") != NULL);
  mqstore_string_free(json);
  CHECK_STATUS(mqstore_shadow_delete(lamp, NULL), MQSTORE_ERR_STATUS);
  CHECK_OK(mqstore_shadow_get(config, &json));
  CHECK(strstr(json, "\"fw\":\"1.0\"") != NULL);
  mqstore_string_free(json);
  mqstore_shadow_free(config);
  mqstore_shadow_free(lamp);

  /* Names AWS refuses, and bad arguments: nothing sent. */
  mqstore_shadow *bad = NULL;
  CHECK_STATUS(mqstore_shadow_open(c, "c/lamp", NULL, &bad), MQSTORE_ERR_STATUS);
  CHECK(bad == NULL);
  CHECK_STATUS(mqstore_shadow_open(c, NULL, NULL, &bad), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_shadow_get(lamp, &json), MQSTORE_ERR_INVALID_ARGUMENT); /* freed */
  mqstore_client_free(c);
}

/* A device on libmosquitto: answers "<payload>" on devices/c-dev/commands with "done: <payload>",
 * "fail" with an application error, and "ignore" not at all. */
static void device_answer(struct mosquitto *mosq, void *obj, const struct mosquitto_message *m,
                          const mosquitto_property *props) {
  (void)obj;
  if (m->payloadlen == 6 && memcmp(m->payload, "ignore", 6) == 0) return;
  char *response_topic = NULL;
  void *correlation = NULL;
  uint16_t correlation_len = 0;
  mosquitto_property_read_string(props, MQTT_PROP_RESPONSE_TOPIC, &response_topic, false);
  mosquitto_property_read_binary(props, MQTT_PROP_CORRELATION_DATA, &correlation, &correlation_len, false);
  mosquitto_property *answer_props = NULL;
  mosquitto_property_add_binary(&answer_props, MQTT_PROP_CORRELATION_DATA, correlation, correlation_len);
  if (m->payloadlen == 4 && memcmp(m->payload, "fail", 4) == 0)
    mosquitto_property_add_string_pair(&answer_props, MQTT_PROP_USER_PROPERTY, "AppErrCode", "overheated");
  char answer[64];
  int len = snprintf(answer, sizeof answer, "done: %.*s", m->payloadlen, (const char *)m->payload);
  if (response_topic != NULL) mosquitto_publish_v5(mosq, NULL, response_topic, len, answer, 1, false, answer_props);
  mosquitto_property_free_all(&answer_props);
  free(response_topic);
  free(correlation);
}

static int device_subscribed;
static void device_on_subscribe(struct mosquitto *m, void *o, int mid, int n, const int *q, const mosquitto_property *p) {
  (void)m, (void)o, (void)mid, (void)n, (void)q, (void)p;
  __atomic_store_n(&device_subscribed, 1, __ATOMIC_SEQ_CST);
}

static void commands_reach_a_device_and_bring_its_answer(void) {
  mosquitto_lib_init();
  struct mosquitto *device = mosquitto_new("c-dev", true, NULL);
  CHECK(device != NULL);
  mosquitto_int_option(device, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V5);
  mosquitto_message_v5_callback_set(device, device_answer);
  mosquitto_subscribe_v5_callback_set(device, device_on_subscribe);
  CHECK(mosquitto_connect_bind_v5(device, "127.0.0.1", port_from("MQSTORE_TEST_PORT"), 30, NULL, NULL) == MOSQ_ERR_SUCCESS);
  CHECK(mosquitto_subscribe_v5(device, NULL, "devices/c-dev/commands", 1, 0, NULL) == MOSQ_ERR_SUCCESS);
  CHECK(mosquitto_loop_start(device) == MOSQ_ERR_SUCCESS);
  for (int i = 0; i < 200 && !__atomic_load_n(&device_subscribed, __ATOMIC_SEQ_CST); i++) sleep_ms(50);
  CHECK(__atomic_load_n(&device_subscribed, __ATOMIC_SEQ_CST));

  mqstore_client *c = connect_main();
  mqstore_command_reply *reply = NULL;
  CHECK_OK(mqstore_command(c, "devices/c-dev/commands", S("reboot"), NULL, &reply));
  CHECK(strcmp(reply->status, "SUCCEEDED") == 0);
  CHECK_BYTES(reply->payload, reply->payload_len, "done: reboot", 12);
  CHECK(reply->has_device_status && reply->device_status == 200);
  char *json = NULL;
  CHECK_OK(mqstore_command_status(c, reply->id, &json));
  CHECK(strstr(json, "\"SUCCEEDED\"") != NULL);
  mqstore_string_free(json);
  mqstore_command_reply_free(reply);

  CHECK_STATUS(mqstore_command(c, "devices/c-dev/commands", S("fail"), NULL, &reply), MQSTORE_ERR_COMMAND_FAILED);
  CHECK_ERROR_SAYS("overheated");
  CHECK(reply == NULL);
  mqstore_command_options quick = {0};
  quick.timeout_ms = 300;
  CHECK_STATUS(mqstore_command(c, "devices/c-dev/commands", S("ignore"), &quick, &reply), MQSTORE_ERR_COMMAND_TIMEOUT);

  mqstore_command_options one_way = {0};
  one_way.mode = MQSTORE_COMMAND_ONE_WAY;
  CHECK_OK(mqstore_command(c, "devices/c-dev/commands", S("blink"), &one_way, &reply));
  CHECK(strcmp(reply->status, "DELIVERED") == 0);
  CHECK(reply->payload_len == 0);
  mqstore_command_reply_free(reply);

  mqstore_command_options detached = {0};
  detached.mode = MQSTORE_COMMAND_DETACHED;
  CHECK_OK(mqstore_command(c, "devices/c-dev/commands", S("update"), &detached, &reply));
  CHECK(strcmp(reply->status, "SENT") == 0);
  /* Its answer lands in its status record. */
  int succeeded = 0;
  for (int i = 0; i < 200 && !succeeded; i++) {
    CHECK_OK(mqstore_command_status(c, reply->id, &json));
    succeeded = strstr(json, "\"SUCCEEDED\"") != NULL;
    mqstore_string_free(json);
    if (!succeeded) sleep_ms(50);
  }
  CHECK(succeeded);
  mqstore_command_reply_free(reply);
  detached.mode = 7;
  CHECK_STATUS(mqstore_command(c, "devices/c-dev/commands", S("x"), &detached, &reply), MQSTORE_ERR_INVALID_ARGUMENT);
  mqstore_client_free(c);

  mosquitto_disconnect(device);
  mosquitto_loop_stop(device, false);
  mosquitto_destroy(device);
  mosquitto_lib_cleanup();
}

/* Whether `bytes` holds `text`. */
static int holds(const uint8_t *bytes, size_t len, const char *text) {
  size_t n = strlen(text);
  for (size_t i = 0; i + n <= len; i++)
    if (memcmp(bytes + i, text, n) == 0) return 1;
  return 0;
}

/* A device written for AWS IoT commands: thing c-robot answers each execution's request with
 * SUCCEEDED and the request's payload as its result. */
static void aws_device_answer(struct mosquitto *mosq, void *obj, const struct mosquitto_message *m,
                              const mosquitto_property *props) {
  (void)obj, (void)props;
  /* $aws/commands/things/c-robot/executions/{id}/request/json */
  const char *prefix = "$aws/commands/things/c-robot/executions/";
  size_t prefix_len = strlen(prefix);
  if (strncmp(m->topic, prefix, prefix_len) != 0) return;
  const char *id = m->topic + prefix_len;
  const char *end = strchr(id, '/');
  if (end == NULL || strcmp(end, "/request/json") != 0) return;
  char topic[256], update[256];
  snprintf(topic, sizeof topic, "%s%.*s/response/json", prefix, (int)(end - id), id);
  /* The payload is {"to": N}: the result is N's digits. */
  char digits[32];
  size_t n = 0;
  for (int i = 0; i < m->payloadlen && n + 1 < sizeof digits; i++) {
    char ch = ((const char *)m->payload)[i];
    if (ch >= '0' && ch <= '9') digits[n++] = ch;
  }
  digits[n] = '\0';
  int len = snprintf(update, sizeof update, "{\"status\":\"SUCCEEDED\",\"result\":{\"sent\":{\"s\":\"%s\"}}}", digits);
  mosquitto_publish_v5(mosq, NULL, topic, len, update, 1, false, NULL);
}

static void stored_commands_start_by_id_on_an_aws_device(void) {
  mosquitto_lib_init();
  struct mosquitto *device = mosquitto_new("c-robot", true, NULL);
  CHECK(device != NULL);
  mosquitto_int_option(device, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V5);
  mosquitto_message_v5_callback_set(device, aws_device_answer);
  __atomic_store_n(&device_subscribed, 0, __ATOMIC_SEQ_CST);
  mosquitto_subscribe_v5_callback_set(device, device_on_subscribe);
  CHECK(mosquitto_connect_bind_v5(device, "127.0.0.1", port_from("MQSTORE_TEST_PORT"), 30, NULL, NULL) == MOSQ_ERR_SUCCESS);
  CHECK(mosquitto_subscribe_v5(device, NULL, "$aws/commands/things/c-robot/executions/+/request/json", 1, 0, NULL) == MOSQ_ERR_SUCCESS);
  CHECK(mosquitto_loop_start(device) == MOSQ_ERR_SUCCESS);
  for (int i = 0; i < 200 && !__atomic_load_n(&device_subscribed, __ATOMIC_SEQ_CST); i++) sleep_ms(50);
  CHECK(__atomic_load_n(&device_subscribed, __ATOMIC_SEQ_CST));

  mqstore_client *c = connect_main();
  const char *define =
      "{\"op\": \"create\", \"command\": {\"commandId\": \"c-heat\", "
      "\"payloadTemplate\": \"{\\\"to\\\": ${aws:iot:commandexecution::parameter:temp}}\", "
      "\"mandatoryParameters\": [{\"name\": \"temp\", \"defaultValue\": {\"I\": 20}}]}}";
  char *json = NULL;
  CHECK_OK(mqstore_command_definitions(c, define, &json));
  CHECK(strstr(json, "\"c-heat\"") != NULL && strstr(json, "\"createdMs\"") != NULL);
  mqstore_string_free(json);
  CHECK_STATUS(mqstore_command_definitions(c, define, &json), MQSTORE_ERR_STATUS);
  CHECK_ERROR_SAYS("exists");
  CHECK(json == NULL);
  CHECK_OK(mqstore_command_definitions(c, "{\"op\": \"list\"}", &json));
  CHECK(strstr(json, "\"commands\"") != NULL && strstr(json, "\"c-heat\"") != NULL);
  mqstore_string_free(json);

  mqstore_command_reply *reply = NULL;
  CHECK_OK(mqstore_command_start(c, "c-heat", "thing/c-robot", "{\"temp\": 80}", NULL, &reply));
  CHECK(strcmp(reply->status, "SUCCEEDED") == 0);
  CHECK(reply->payload_len > 0 && holds(reply->payload, reply->payload_len, "\"80\""));
  CHECK_OK(mqstore_command_status(c, reply->id, &json));
  CHECK(strstr(json, "\"command\":\"c-heat\"") != NULL);
  mqstore_string_free(json);
  mqstore_command_reply_free(reply);
  /* The default fills the template when no parameter is given. */
  CHECK_OK(mqstore_command_start(c, "c-heat", "c-robot", NULL, NULL, &reply));
  CHECK(holds(reply->payload, reply->payload_len, "\"20\""));
  mqstore_command_reply_free(reply);
  /* What cannot start sends nothing. */
  CHECK_STATUS(mqstore_command_start(c, "c-cool", "c-robot", NULL, NULL, &reply), MQSTORE_ERR_STATUS);
  CHECK_ERROR_SAYS("c-cool");
  CHECK(reply == NULL);
  CHECK_STATUS(mqstore_command_start(c, "c-heat", "c-robot", "[1]", NULL, &reply), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_command_start(c, "c-heat", "c-robot", "{\"fan\": 1}", NULL, &reply), MQSTORE_ERR_STATUS);
  CHECK_STATUS(mqstore_command_definitions(c, "not json", &json), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_OK(mqstore_command_definitions(c, "{\"op\": \"delete\", \"commandId\": \"c-heat\"}", &json));
  CHECK(strstr(json, "true") != NULL);
  mqstore_string_free(json);
  mqstore_client_free(c);

  mosquitto_disconnect(device);
  mosquitto_loop_stop(device, false);
  mosquitto_destroy(device);
  mosquitto_lib_cleanup();
}

static void errors_have_their_codes_and_change_nothing(void) {
  mqstore_client *c = connect_main();
  /* A notification topic longer than MQTT allows: refused by the server. */
  size_t long_len = 40000;
  uint8_t *long_key = malloc(long_len);
  CHECK(long_key != NULL);
  memset(long_key, 'k', long_len);
  CHECK_STATUS(mqstore_observe(c, long_key, long_len), MQSTORE_ERR_NOTIFICATION_TOPIC_TOO_LONG);
  free(long_key);
  mqstore_client_free(c);

  /* Quota and access rules (the limited server: --max-keys 3, keys under readonly/ read-only). */
  mqstore_client *limited = connect_to(port_from("MQSTORE_TEST_LIMITED_PORT"), NULL);
  char key[16];
  for (int i = 0; i < 3; i++) {
    snprintf(key, sizeof key, "k%d", i);
    CHECK_OK(mqstore_set(limited, S(key), S("v"), NULL, NULL));
  }
  CHECK_STATUS(mqstore_set(limited, S("k3"), S("v"), NULL, NULL), MQSTORE_ERR_QUOTA_EXCEEDED);
  CHECK_ERROR_SAYS("the quota has been exceeded");
  CHECK_STATUS(mqstore_set(limited, S("readonly/x"), S("v"), NULL, NULL), MQSTORE_ERR_NOT_AUTHORIZED);
  CHECK_ERROR_SAYS("not authorized");
  char text[16];
  CHECK(!get_text(limited, "k3", text, sizeof text));
  mqstore_client_free(limited);

  /* A broker with no server: no answer in time; a request over its packet limit is not sent. */
  mqstore_options options = mqstore_options_default();
  options.port = port_from("MQSTORE_TEST_BARE_PORT");
  options.timeout_ms = 300;
  mqstore_client *bare = NULL;
  CHECK_OK(mqstore_connect(&options, &bare));
  bool found = true;
  size_t len = 0;
  CHECK_STATUS(mqstore_get(bare, S("k"), NULL, 0, &len, &found, NULL), MQSTORE_ERR_REQUEST_TIMEOUT);
  CHECK(!found);
  CHECK_ERROR_SAYS("is `mqstore serve` running");
  mqstore_set_options quick = {0};
  quick.timeout_ms = 100;
  CHECK_STATUS(mqstore_set(bare, S("k"), S("v"), &quick, NULL), MQSTORE_ERR_REQUEST_TIMEOUT);
  static uint8_t big[5000];
  CHECK_STATUS(mqstore_set(bare, S("k"), big, sizeof big, NULL, NULL), MQSTORE_ERR_REQUEST_TOO_LARGE);
  CHECK_ERROR_SAYS("not sent");
  mqstore_client_free(bare);

  /* Nothing listens. */
  options = mqstore_options_default();
  options.port = port_from("MQSTORE_TEST_CLOSED_PORT");
  options.timeout_ms = 2000;
  mqstore_client *none = (mqstore_client *)1;
  CHECK_STATUS(mqstore_connect(&options, &none), MQSTORE_ERR_BROKER_UNREACHABLE);
  CHECK(none == NULL);
  CHECK_ERROR_SAYS("cannot reach the MQTT broker");
}


static void credentials_and_tls_to_the_broker(void) {
  mqstore_options options = mqstore_options_default();
  options.port = port_from("MQSTORE_TEST_SECURE_PORT");
  options.username = "fleet";
  options.password = "wrong";
  mqstore_client *c = NULL;
  CHECK_STATUS(mqstore_connect(&options, &c), MQSTORE_ERR_BROKER_REFUSED);
  CHECK_ERROR_SAYS("refused the connection");
  CHECK(c == NULL);
  options.password = NULL;
  CHECK_STATUS(mqstore_connect(&options, &c), MQSTORE_ERR_BROKER_REFUSED);
  options.password = "s3cret";
  CHECK_OK(mqstore_connect(&options, &c));
  mqstore_client_free(c);

  /* TLS: the broker's certificate checked against the CA file. */
  options.port = port_from("MQSTORE_TEST_TLS_PORT");
  options.ca_file = getenv("MQSTORE_TEST_CA_FILE");
  CHECK(options.ca_file != NULL);
  CHECK_OK(mqstore_connect(&options, &c));
  mqstore_client_free(c);
  /* options.tls without a CA file: the system's CAs, here the test CA as SSL_CERT_FILE. */
  const char *ca = options.ca_file;
  options.ca_file = NULL;
  options.tls = true;
  CHECK(setenv("SSL_CERT_FILE", ca, 1) == 0);
  CHECK_OK(mqstore_connect(&options, &c));
  mqstore_client_free(c);
  CHECK(setenv("SSL_CERT_FILE", getenv("MQSTORE_TEST_WRONG_CA_FILE"), 1) == 0);
  CHECK_STATUS(mqstore_connect(&options, &c), MQSTORE_ERR_BROKER_UNREACHABLE);
  CHECK(unsetenv("SSL_CERT_FILE") == 0);
  options.tls = false;
  options.ca_file = getenv("MQSTORE_TEST_WRONG_CA_FILE"); /* did not sign it */
  CHECK_STATUS(mqstore_connect(&options, &c), MQSTORE_ERR_BROKER_UNREACHABLE);
  CHECK_ERROR_SAYS("cannot reach the MQTT broker");
  options.ca_file = NULL; /* plain MQTT to a TLS listener */
  options.timeout_ms = 2000;
  CHECK(mqstore_connect(&options, &c) != MQSTORE_OK);
  CHECK(c == NULL);

  /* A listener that asks for a client certificate: ours, its key encrypted with a password
   * by openssl pkcs8 -topk8. */
  options.port = port_from("MQSTORE_TEST_CLIENT_CERT_PORT");
  options.ca_file = getenv("MQSTORE_TEST_CA_FILE");
  options.cert_file = getenv("MQSTORE_TEST_CLIENT_CERT_FILE");
  options.key_file = getenv("MQSTORE_TEST_CLIENT_KEY_FILE");
  CHECK(options.cert_file != NULL && options.key_file != NULL);
  CHECK_STATUS(mqstore_connect(&options, &c), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_ERROR_SAYS("is encrypted: give its password");
  options.key_password = "fleet-key-2";
  CHECK_STATUS(mqstore_connect(&options, &c), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_ERROR_SAYS("the key password is wrong");
  options.key_password = "fleet-key-1";
  CHECK_OK(mqstore_connect(&options, &c));
  mqstore_client_free(c);
  /* Without a certificate that listener refuses the connection. */
  options.cert_file = NULL;
  options.key_file = NULL;
  options.key_password = NULL;
  CHECK(mqstore_connect(&options, &c) != MQSTORE_OK);
  CHECK(c == NULL);
}

static void bad_arguments_and_freed_handles_are_errors_not_crashes(void) {
  uint8_t buf[8];
  size_t len;
  bool found;
  CHECK_STATUS(mqstore_set(NULL, S("k"), S("v"), NULL, NULL), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_ERROR_SAYS("client is NULL");
  CHECK_STATUS(mqstore_connect(NULL, NULL), MQSTORE_ERR_INVALID_ARGUMENT);
  mqstore_options options = mqstore_options_default();
  options.client_id = "has:colon";
  mqstore_client *client = NULL;
  CHECK_STATUS(mqstore_connect(&options, &client), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_ERROR_SAYS("contains ':'");
  options = mqstore_options_default();
  options.cert_file = "client.pem";
  CHECK_STATUS(mqstore_connect(&options, &client), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_ERROR_SAYS("go together");
  options.key_file = "client.key";
  CHECK_STATUS(mqstore_connect(&options, &client), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_ERROR_SAYS("are for TLS: set options.tls");
  options.ca_file = "/nonexistent/ca.pem";
  CHECK_STATUS(mqstore_connect(&options, &client), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_ERROR_SAYS("/nonexistent/ca.pem");

  mqstore_client *c = connect_main();
  CHECK(strncmp(mqstore_client_id(c), "mqstore-c-", 10) == 0);
  CHECK_STATUS(mqstore_set(c, NULL, 1, S("v"), NULL, NULL), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_set(c, S(""), S("v"), NULL, NULL), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_ERROR_SAYS("keys are at least one byte");
  CHECK_STATUS(mqstore_set(c, S("k"), NULL, 3, NULL, NULL), MQSTORE_ERR_INVALID_ARGUMENT);
  mqstore_set_options bad = {0};
  bad.condition = 9;
  CHECK_STATUS(mqstore_set(c, S("c/bad"), S("v"), &bad, NULL), MQSTORE_ERR_INVALID_ARGUMENT);
  mqstore_hlc token;
  memset(&token, 0, sizeof token);
  strcpy(token.node, "a:b");
  bad.condition = 0;
  bad.fencing_token = &token;
  CHECK_STATUS(mqstore_set(c, S("c/bad"), S("v"), &bad, NULL), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_get(c, S("k"), buf, sizeof buf, &len, NULL, NULL), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_get(c, S("k"), buf, sizeof buf, NULL, &found, NULL), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_scan(c, S("*"), NULL), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_next_event(c, 0, NULL), MQSTORE_ERR_INVALID_ARGUMENT);
  mqstore_lease *lease = NULL;
  CHECK_STATUS(mqstore_lease_acquire(c, S("c/l"), 0, 0, &lease), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_lease_fencing_token(NULL, &token), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK(!mqstore_lease_is_held(NULL));
  /* Nothing above reached the server. */
  char text[8];
  CHECK(!get_text(c, "c/bad", text, sizeof text));
  mqstore_client_free(c);

  /* The freed client: every call is refused, a second free too. */
  CHECK_STATUS(mqstore_set(c, S("k"), S("v"), NULL, NULL), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_ERROR_SAYS("not a live mqstore object");
  CHECK(mqstore_client_id(c) == NULL);
  mqstore_client_free(c);
  CHECK_ERROR_SAYS("not a live mqstore object");
  mqstore_client_free(NULL);
  mqstore_lease_free(NULL);
  mqstore_keys_free(NULL);
  mqstore_jobs_free(NULL);
  mqstore_command_reply_free(NULL);
  mqstore_string_free(NULL);
  CHECK(mqstore_has_client());
}

int main(int argc, char **argv) {
  self_path = argv[0];
  if (argc == 5 && strcmp(argv[1], "--contend") == 0) return contender_main(argv[2], argv[3], argv[4]);
  RUN(set_get_del_vdel_with_versions);
  RUN(scan_returns_every_matching_key);
  RUN(observe_delivers_changes_by_polling);
  RUN(observe_delivers_changes_to_a_callback_on_its_own_thread);
  RUN(a_lease_held_by_one_process_is_refused_to_another);
  RUN(jobs_flow_from_creation_to_success);
  RUN(shadows_desired_reported_and_refusals);
  RUN(commands_reach_a_device_and_bring_its_answer);
  RUN(stored_commands_start_by_id_on_an_aws_device);
  RUN(errors_have_their_codes_and_change_nothing);
  RUN(credentials_and_tls_to_the_broker);
  RUN(bad_arguments_and_freed_handles_are_errors_not_crashes);
  SUMMARY();
  return 0;
}
