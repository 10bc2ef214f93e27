/* A device agent on layer 2 of libmqstore (bring your own MQTT) with libmosquitto: it runs the
 * jobs mqstore queues for its thing (AWS IoT Jobs: start-next, progress, SUCCEEDED) and answers
 * the commands sent to it (MQTT 5 request/response). One thread, the firmware's own loop;
 * mosquitto_glue.h converts messages.
 *
 *   byo-jobs [HOST [PORT]]          runs jobs and answers commands until Ctrl-C
 *   byo-jobs --demo [HOST [PORT]]   also acts as the operator: queues itself a job and sends
 *                                   itself a command, and exits once both are done */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "mosquitto_glue.h"

#define THING "byo-pump-1"
/* Where this device takes commands (any topic: the caller names it). */
#define COMMAND_TOPIC "devices/" THING "/commands"

static volatile sig_atomic_t stop;
static int connected, subscribed;
static int job_done, command_done; /* demo: what is left to see */
/* The job being run, the step it is at (0: none, 1: starting, 2: flashing, 3: reporting), the
 * call it waits for, and whether a notification said a job waits while one was running. */
static char job_id[65];
static int step;
static uint64_t waiting_for;
static int another_waits;

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

static uint64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

static void on_connect(struct mosquitto *m, void *core, int rc, int flags, const mosquitto_property *p) {
  (void)m, (void)core, (void)flags, (void)p;
  connected = rc == 0 ? 1 : -1;
}

static void on_subscribe(struct mosquitto *m, void *core, int mid, int n, const int *granted, const mosquitto_property *p) {
  (void)m, (void)core, (void)mid, (void)granted, (void)p;
  subscribed += n;
}

/* A command for this device: do it, and answer to its response topic with its correlation
 * data (the MQTT 5 request/response pattern the command service's default profile speaks). */
static void answer_command(struct mosquitto *mosq, const struct mosquitto_message *msg, const mosquitto_property *p) {
  char *response_topic = NULL;
  void *correlation = NULL;
  uint16_t correlation_len = 0;
  mosquitto_property_read_string(p, MQTT_PROP_RESPONSE_TOPIC, &response_topic, false);
  mosquitto_property_read_binary(p, MQTT_PROP_CORRELATION_DATA, &correlation, &correlation_len, false);
  printf("byo-jobs: command %.*s\n", msg->payloadlen, (const char *)msg->payload);
  if (response_topic != NULL) {
    mosquitto_property *reply = NULL;
    if (correlation != NULL) mosquitto_property_add_binary(&reply, MQTT_PROP_CORRELATION_DATA, correlation, correlation_len);
    mosquitto_publish_v5(mosq, NULL, response_topic, 4, "done", 1, false, reply);
    mosquitto_property_free_all(&reply);
  }
  free(response_topic);
  free(correlation);
}

static void on_message(struct mosquitto *m, void *core, const struct mosquitto_message *msg, const mosquitto_property *p) {
  if (strcmp(msg->topic, COMMAND_TOPIC) == 0) {
    answer_command(m, msg, p);
  } else if (glue_handle(core, msg, p, now_ms()) != MQSTORE_OK) {
    fprintf(stderr, "byo-jobs: %s\n", mqstore_last_error());
  }
}

/* Takes the next queued job, if any (AWS's start-next: it becomes IN_PROGRESS). */
static void start_next(mqstore_core *core) {
  another_waits = 0;
  if (mqstore_core_jobs_device(core, THING, "start-next", "{\"statusDetails\":{\"step\":\"download\"}}", now_ms(),
                               &waiting_for) == MQSTORE_OK)
    step = 1;
  else
    fprintf(stderr, "byo-jobs: start-next: %s\n", mqstore_last_error());
}

/* Reports the job's progress, or its end, as the thing. */
static void update(mqstore_core *core, const char *body, int next_step) {
  char api[80];
  snprintf(api, sizeof api, "%s/update", job_id);
  if (mqstore_core_jobs_device(core, THING, api, body, now_ms(), &waiting_for) == MQSTORE_OK) {
    step = next_step;
  } else {
    fprintf(stderr, "byo-jobs: update: %s\n", mqstore_last_error());
    step = 0;
  }
}

/* Reads the string `"name":"..."` out of JSON mqstore wrote (no spaces in it), into `out`. */
static int json_string(const char *json, const char *name, char *out, size_t size) {
  char pattern[64];
  snprintf(pattern, sizeof pattern, "\"%s\":\"", name);
  const char *start = json == NULL ? NULL : strstr(json, pattern);
  if (start == NULL) return 0;
  start += strlen(pattern);
  const char *end = strchr(start, '"');
  if (end == NULL || (size_t)(end - start) >= size) return 0;
  memcpy(out, start, (size_t)(end - start));
  out[end - start] = '\0';
  return 1;
}

static void on_event(mqstore_core *core, const mqstore_event *event) {
  if (event->kind == MQSTORE_EVENT_JOBS) {
    /* notify-next with an execution: a job waits. Take it now, or once this one is done. */
    if (strstr(event->json, "\"notify-next\"") != NULL && strstr(event->json, "\"execution\":{") != NULL) {
      if (step == 0)
        start_next(core);
      else
        another_waits = 1;
    }
    return;
  }
  if (event->kind != MQSTORE_EVENT_COMPLETED) return;
  if (event->status != MQSTORE_OK) {
    fprintf(stderr, "byo-jobs: call %llu failed: %s\n", (unsigned long long)event->call, event->error);
    if (event->call == waiting_for) step = 0;
    return;
  }
  if (event->op == MQSTORE_OP_COMMAND) {
    printf("byo-jobs: the command was answered: %.*s\n", (int)event->value_len, (const char *)event->value);
    command_done = 1;
    return;
  }
  if (event->call != waiting_for || step == 0) return; /* e.g. the demo's createJob */
  switch (step) {
  case 1: /* start-next's answer: the execution, now IN_PROGRESS; null when none was queued */
    if (!json_string(event->json, "jobId", job_id, sizeof job_id)) {
      step = 0;
      if (another_waits) start_next(core);
      return;
    }
    printf("byo-jobs: running job %s\n", job_id);
    update(core, "{\"status\":\"IN_PROGRESS\",\"statusDetails\":{\"step\":\"flash\"}}", 2);
    break;
  case 2:
    update(core, "{\"status\":\"SUCCEEDED\",\"statusDetails\":{\"step\":\"done\"}}", 3);
    break;
  default:
    printf("byo-jobs: job %s SUCCEEDED\n", job_id);
    job_done = 1;
    start_next(core); /* another may be queued */
  }
}

int main(int argc, char **argv) {
  int demo = argc > 1 && strcmp(argv[1], "--demo") == 0;
  const char *host = argc > 1 + demo ? argv[1 + demo] : "127.0.0.1";
  int port = argc > 2 + demo ? atoi(argv[2 + demo]) : 1883;

  mqstore_core *core = NULL;
  if (mqstore_core_new(THING, now_ms() ^ (uint64_t)clock(), 0, &core) != MQSTORE_OK ||
      mqstore_core_act_as(core, THING) != MQSTORE_OK) {
    fprintf(stderr, "byo-jobs: %s\n", mqstore_last_error());
    mqstore_core_free(core);
    return 1;
  }
  mosquitto_lib_init();
  struct mosquitto *mosq = mosquitto_new(THING, true, core);
  mosquitto_int_option(mosq, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V5);
  mosquitto_will_set_v5(mosq, mqstore_core_presence_topic(core), 4, "gone", 1, false, NULL);
  mosquitto_connect_v5_callback_set(mosq, on_connect);
  mosquitto_subscribe_v5_callback_set(mosq, on_subscribe);
  mosquitto_message_v5_callback_set(mosq, on_message);
  int exit_code = 1;
  if (mosquitto_connect_bind_v5(mosq, host, port, 30, NULL, NULL) != MOSQ_ERR_SUCCESS) {
    fprintf(stderr, "byo-jobs: cannot reach the broker at %s:%d\n", host, port);
    goto done;
  }
  while (connected == 0 && mosquitto_loop(mosq, 100, 1) == MOSQ_ERR_SUCCESS) {}
  /* The session's filters (its thing's jobs topics included), and the command topic. */
  size_t filters = mqstore_core_subscription_count(core);
  for (size_t i = 0; i < filters; i++) mosquitto_subscribe_v5(mosq, NULL, mqstore_core_subscription(core, i), 1, 0, NULL);
  mosquitto_subscribe_v5(mosq, NULL, COMMAND_TOPIC, 1, 0, NULL);
  while (subscribed < (int)filters + 1 && mosquitto_loop(mosq, 100, 1) == MOSQ_ERR_SUCCESS) {}
  if (connected != 1) goto done;
  printf("byo-jobs: %s takes jobs and commands on %s\n", THING, COMMAND_TOPIC);

  /* A job may be waiting already. */
  start_next(core);
  if (demo) {
    char request[256];
    snprintf(request, sizeof request,
             "{\"op\":\"createJob\",\"jobId\":\"demo-%llu\",\"targets\":[\"" THING "\"],"
             "\"document\":{\"operation\":\"firmware\",\"version\":\"2.1\"}}",
             (unsigned long long)now_ms());
    mqstore_core_jobs_operate(core, request, now_ms(), NULL);
    mqstore_core_command(core, COMMAND_TOPIC, (const uint8_t *)"reboot", 6, NULL, now_ms(), NULL);
  }

  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  exit_code = 0;
  uint64_t demo_deadline = now_ms() + 60000;
  while (!stop && !(demo && job_done && command_done)) {
    if (demo && now_ms() > demo_deadline) {
      fprintf(stderr, "byo-jobs: the demo's job or command did not finish within 60 s\n");
      exit_code = 1;
      break;
    }
    glue_flush(mosq, core);
    uint64_t deadline = 0, now = now_ms();
    mqstore_core_next_deadline(core, &deadline);
    int wait = deadline == MQSTORE_NO_DEADLINE || deadline > now + 500 ? 500 : deadline > now ? (int)(deadline - now) : 0;
    int rc = mosquitto_loop(mosq, wait, 1);
    if (rc != MOSQ_ERR_SUCCESS) {
      /* Reconnecting means: mqstore_core_connection_lost, connect, subscribe to every
       * mqstore_core_subscription again, mqstore_core_resume (not shown: this example stops). */
      mqstore_core_connection_lost(core);
      fprintf(stderr, "byo-jobs: connection lost: %s\n", mosquitto_strerror(rc));
      exit_code = 1;
      break;
    }
    mqstore_core_expire(core, now_ms());
    mqstore_event *event = NULL;
    while (mqstore_core_next_event(core, &event) == MQSTORE_OK && event != NULL) {
      on_event(core, event);
      mqstore_event_free(event);
    }
  }
  glue_flush(mosq, core);
  for (int i = 0; i < 10; i++) mosquitto_loop(mosq, 50, 1);
  mosquitto_disconnect_v5(mosq, 0, NULL);
done:
  mosquitto_destroy(mosq);
  mosquitto_lib_cleanup();
  mqstore_core_free(core);
  return exit_code;
}
