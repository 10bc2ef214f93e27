/* The C client's round trip: `in_flight` threads share one mqstore_client and make blocking
 * calls (SET and GET alternately over 1,000 keys, 64-byte values, as `mqstore bench` does)
 * for `seconds`; prints the calls per second. Driven by bench.py, which compares it with the
 * Rust client in the same run.
 *
 *   bench PORT IN_FLIGHT SECONDS */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mqstore.h"

static mqstore_client *client;
static atomic_int running = 1;

typedef struct {
  int worker, in_flight;
  long done;
} worker_state;

static void *worker(void *arg) {
  worker_state *w = arg;
  static const char value[64] = {'v'};
  char key[32];
  uint8_t buf[128];
  for (long i = w->worker; running; i += w->in_flight) {
    int len = snprintf(key, sizeof key, "bench/%ld", i % 1000);
    int status;
    if (i % 2 == 0) {
      status = mqstore_set(client, (const uint8_t *)key, (size_t)len, (const uint8_t *)value, sizeof value, NULL, NULL);
    } else {
      size_t value_len;
      bool found;
      status = mqstore_get(client, (const uint8_t *)key, (size_t)len, buf, sizeof buf, &value_len, &found, NULL);
    }
    if (status != MQSTORE_OK) {
      fprintf(stderr, "bench: %s\n", mqstore_last_error());
      exit(1);
    }
    w->done++;
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: bench PORT IN_FLIGHT SECONDS\n");
    return 2;
  }
  int in_flight = atoi(argv[2]);
  double seconds = atof(argv[3]);
  mqstore_options options = mqstore_options_default();
  options.port = (uint16_t)atoi(argv[1]);
  if (mqstore_connect(&options, &client) != MQSTORE_OK) {
    fprintf(stderr, "bench: %s\n", mqstore_last_error());
    return 1;
  }
  worker_state *workers = calloc((size_t)in_flight, sizeof *workers);
  pthread_t *threads = calloc((size_t)in_flight, sizeof *threads);
  struct timespec start, end;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (int i = 0; i < in_flight; i++) {
    workers[i] = (worker_state){i, in_flight, 0};
    pthread_create(&threads[i], NULL, worker, &workers[i]);
  }
  struct timespec pause = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  nanosleep(&pause, NULL);
  running = 0;
  long total = 0;
  for (int i = 0; i < in_flight; i++) {
    pthread_join(threads[i], NULL);
    total += workers[i].done;
  }
  clock_gettime(CLOCK_MONOTONIC, &end);
  double elapsed = (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) / 1e9;
  printf("%.0f\n", (double)total / elapsed);
  free(workers);
  free(threads);
  mqstore_client_free(client);
  return 0;
}
