/* The gateway loop of gateway.c on layer 2 of libmqstore, with libmosquitto as the MQTT
 * client: the firmware owns the connection and the loop; mqstore turns calls into publishes
 * and received messages into results and changes (mosquitto_glue.h does the conversion).
 * One thread, no threads of mqstore's.
 *
 *   byo-mosquitto [HOST [PORT]]          runs until Ctrl-C
 *   byo-mosquitto --demo [HOST [PORT]]   changes one device's configuration itself, reacts, exits */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "mosquitto_glue.h"

#define DEVICES 3
/* This gateway's part of the store: every key it writes is under its site. */
#define SITE "sites/south/"
#define DEVICE_PREFIX SITE "devices/"
static const char *const device_ids[DEVICES] = {"pump-1", "valve-7", "meter-12"};
static volatile sig_atomic_t stop;
static int connected, subscribed;

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

/* The clock mqstore's versions and timeouts use: milliseconds since the Unix epoch. */
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

static void on_message(struct mosquitto *m, void *core, const struct mosquitto_message *msg, const mosquitto_property *p) {
  (void)m;
  if (glue_handle(core, msg, p, now_ms()) != MQSTORE_OK) fprintf(stderr, "byo: %s\n", mqstore_last_error());
}

static void set(mqstore_core *core, const char *key, const char *value) {
  if (mqstore_core_set(core, (const uint8_t *)key, strlen(key), (const uint8_t *)value, strlen(value), NULL, now_ms(), NULL) != MQSTORE_OK)
    fprintf(stderr, "byo: set %s: %s\n", key, mqstore_last_error());
}

int main(int argc, char **argv) {
  int demo = argc > 1 && strcmp(argv[1], "--demo") == 0;
  const char *host = argc > 1 + demo ? argv[1 + demo] : "127.0.0.1";
  int port = argc > 2 + demo ? atoi(argv[2 + demo]) : 1883;
  const char *client_id = demo ? "byo-gateway-demo" : "byo-gateway-1";

  mqstore_core *core = NULL;
  if (mqstore_core_new(client_id, now_ms() ^ (uint64_t)clock(), 0, &core) != MQSTORE_OK) {
    fprintf(stderr, "byo: %s\n", mqstore_last_error());
    return 1;
  }
  mosquitto_lib_init();
  struct mosquitto *mosq = mosquitto_new(client_id, true, core);
  mosquitto_int_option(mosq, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V5);
  /* The server forgets this client's registrations when it vanishes. */
  mosquitto_will_set_v5(mosq, mqstore_core_presence_topic(core), 4, "gone", 1, false, NULL);
  mosquitto_connect_v5_callback_set(mosq, on_connect);
  mosquitto_subscribe_v5_callback_set(mosq, on_subscribe);
  mosquitto_message_v5_callback_set(mosq, on_message);
  int exit_code = 1;
  if (mosquitto_connect_bind_v5(mosq, host, port, 30, NULL, NULL) != MOSQ_ERR_SUCCESS) {
    fprintf(stderr, "byo: cannot reach the broker at %s:%d\n", host, port);
    goto done;
  }
  while (connected == 0 && mosquitto_loop(mosq, 100, 1) == MOSQ_ERR_SUCCESS) {}
  int filters = 0;
  for (const char *filter; (filter = mqstore_core_subscription(core, (size_t)filters)) != NULL; filters++)
    mosquitto_subscribe_v5(mosq, NULL, filter, 1, 0, NULL);
  while (subscribed < filters && mosquitto_loop(mosq, 100, 1) == MOSQ_ERR_SUCCESS) {}
  if (connected != 1) goto done;

  char key[96];
  for (int i = 0; i < DEVICES; i++) {
    snprintf(key, sizeof key, DEVICE_PREFIX "%s/state", device_ids[i]);
    set(core, key, "online");
    snprintf(key, sizeof key, DEVICE_PREFIX "%s/desired", device_ids[i]);
    mqstore_core_observe(core, (const uint8_t *)key, strlen(key), now_ms(), NULL);
  }
  printf("byo: connected as %s; %d devices online, watching their desired configuration\n", client_id, DEVICES);
  if (demo) set(core, DEVICE_PREFIX "valve-7/desired", "{\"open\": 40}");

  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  exit_code = 0;
  while (!stop) {
    glue_flush(mosq, core);
    uint64_t deadline = 0, now = now_ms();
    mqstore_core_next_deadline(core, &deadline);
    int wait = deadline == MQSTORE_NO_DEADLINE || deadline > now + 500 ? 500 : deadline > now ? (int)(deadline - now) : 0;
    int rc = mosquitto_loop(mosq, wait, 1);
    if (rc != MOSQ_ERR_SUCCESS) {
      /* Calls in flight fail; after reconnecting and subscribing again, mqstore_core_resume
       * registers the observed keys again (not shown: this example stops instead). */
      mqstore_core_connection_lost(core);
      fprintf(stderr, "byo: connection lost: %s\n", mosquitto_strerror(rc));
      exit_code = 1;
      break;
    }
    mqstore_core_expire(core, now_ms());
    mqstore_event *event = NULL;
    while (mqstore_core_next_event(core, &event) == MQSTORE_OK && event != NULL) {
      if (event->kind == MQSTORE_EVENT_COMPLETED && event->status != MQSTORE_OK) {
        fprintf(stderr, "byo: call %llu failed: %s\n", (unsigned long long)event->call, event->error);
      } else if (event->kind == MQSTORE_EVENT_CHANGED && event->value != NULL &&
                 event->key_len > strlen(DEVICE_PREFIX "/desired")) {
        /* DEVICE_PREFIX <id> /desired */
        const char *id = (const char *)event->key + strlen(DEVICE_PREFIX);
        int id_len = (int)(event->key_len - strlen(DEVICE_PREFIX "/desired"));
        printf("byo: %.*s wants %.*s\n", id_len, id, (int)event->value_len, (const char *)event->value);
        snprintf(key, sizeof key, DEVICE_PREFIX "%.*s/applied", id_len, id);
        char value[256];
        snprintf(value, sizeof value, "%.*s", (int)event->value_len, (const char *)event->value);
        set(core, key, value);
        if (demo) stop = 1;
      }
      mqstore_event_free(event);
    }
  }
  /* Send what is queued (the last write) before leaving. */
  glue_flush(mosq, core);
  for (int i = 0; i < 10; i++) mosquitto_loop(mosq, 50, 1);
  mosquitto_disconnect_v5(mosq, 0, NULL);
done:
  mosquitto_destroy(mosq);
  mosquitto_lib_cleanup();
  mqstore_core_free(core);
  return exit_code;
}
