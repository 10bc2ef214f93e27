/* A gateway loop on layer 1 of libmqstore: it keeps its devices' state in the store, takes the
 * lease that makes it the one gateway in charge, and reacts when an operator changes a
 * device's desired configuration (a key it observes).
 *
 *   gateway [HOST [PORT]]            runs until Ctrl-C
 *   gateway --demo [HOST [PORT]]     changes one device's configuration itself, reacts once, exits
 *
 * Keys, under sites/north/: devices/<id>/state (written by the gateway), devices/<id>/desired
 * (written by operators, observed), devices/<id>/applied (written back once the device took
 * it), leader (the lease; every write carries its fencing token, so a gateway that lost the
 * lease cannot overwrite its successor's writes). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqstore.h"

#define DEVICES 3
/* This gateway's part of the store: every key it writes is under its site. */
#define SITE "sites/north/"
#define DEVICE_PREFIX SITE "devices/"
static const char *const device_ids[DEVICES] = {"pump-1", "valve-7", "meter-12"};
static volatile sig_atomic_t stop;

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

/* Prints what failed and why; returns the status so callers can bail out. */
static int check(int status, const char *what) {
  if (status != MQSTORE_OK) fprintf(stderr, "gateway: %s: %s (%s)\n", what, mqstore_last_error(), mqstore_status_name(status));
  return status;
}

static int put(mqstore_client *client, const mqstore_hlc *token, const char *key, const char *value) {
  mqstore_set_options options = {0};
  options.fencing_token = token;
  return check(mqstore_set(client, (const uint8_t *)key, strlen(key), (const uint8_t *)value, strlen(value), &options, NULL), key);
}

int main(int argc, char **argv) {
  int demo = argc > 1 && strcmp(argv[1], "--demo") == 0;
  mqstore_options options = mqstore_options_default();
  if (argc > 1 + demo) options.host = argv[1 + demo];
  if (argc > 2 + demo) options.port = (uint16_t)atoi(argv[2 + demo]);
  options.client_id = demo ? "gateway-demo" : "gateway-1";

  mqstore_client *client = NULL;
  if (check(mqstore_connect(&options, &client), "connect") != MQSTORE_OK) return 1;
  int exit_code = 1;
  mqstore_lease *leader = NULL;
  printf("gateway: connected as %s (libmqstore %s); waiting to lead\n", mqstore_client_id(client), mqstore_version());
  if (check(mqstore_lease_acquire(client, (const uint8_t *)SITE "leader", strlen(SITE "leader"), 10000, 30000, &leader), "lease") != MQSTORE_OK ||
      leader == NULL) {
    fprintf(stderr, "gateway: another gateway leads\n");
    goto done;
  }
  mqstore_hlc token;
  check(mqstore_lease_fencing_token(leader, &token), "fencing token");

  char key[96];
  for (int i = 0; i < DEVICES; i++) {
    snprintf(key, sizeof key, DEVICE_PREFIX "%s/state", device_ids[i]);
    if (put(client, &token, key, "online") != MQSTORE_OK) goto done;
    snprintf(key, sizeof key, DEVICE_PREFIX "%s/desired", device_ids[i]);
    if (check(mqstore_observe(client, (const uint8_t *)key, strlen(key)), "observe") != MQSTORE_OK) goto done;
  }
  printf("gateway: leading; %d devices online, watching their desired configuration\n", DEVICES);
  if (demo) put(client, NULL, DEVICE_PREFIX "valve-7/desired", "{\"open\": 40}");

  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  while (!stop && mqstore_lease_is_held(leader)) {
    mqstore_event *event = NULL;
    if (check(mqstore_next_event(client, 500, &event), "next event") != MQSTORE_OK) goto done;
    if (event == NULL) continue;
    /* devices/<id>/desired -> devices/<id>/applied */
    /* DEVICE_PREFIX <id> /desired */
    const char *id = (const char *)event->key + strlen(DEVICE_PREFIX);
    int id_len = (int)event->key_len - (int)strlen(DEVICE_PREFIX) - (int)strlen("/desired");
    if (event->value != NULL && id_len > 0) {
      printf("gateway: %.*s wants %.*s%s\n", id_len, id, (int)event->value_len,
             (const char *)event->value, event->synthetic ? " (missed while away)" : "");
      snprintf(key, sizeof key, DEVICE_PREFIX "%.*s/applied", id_len, id);
      char value[256];
      snprintf(value, sizeof value, "%.*s", (int)event->value_len, (const char *)event->value);
      put(client, &token, key, value);
      if (demo) stop = 1;
    }
    mqstore_event_free(event);
  }
  exit_code = 0;
  if (!mqstore_lease_is_held(leader)) {
    fprintf(stderr, "gateway: lost the lease\n");
    exit_code = 1;
  }
done:
  mqstore_lease_free(leader); /* releases it: the next gateway takes over at once */
  mqstore_client_free(client);
  return exit_code;
}
