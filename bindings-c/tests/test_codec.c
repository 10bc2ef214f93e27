/* The shared wire vectors (testdata/state-store.json) through the C codec and HLC, and the
 * codec's answers to bad arguments. Needs no broker. */
#include <stdint.h>

#include "test.h"
#include "vectors.h"

static int op_of(const char *op) {
  static const char *const ops[] = {"SET", "GET", "DEL", "VDEL", "KEYNOTIFY", "SCAN"};
  for (int i = 0; i < 6; i++)
    if (strcmp(op, ops[i]) == 0) return i + 1; /* MQSTORE_OP_SET is 1 */
  FAIL("unknown op %s in the vectors", op);
}

static mqstore_request request_of(const request_vector *v) {
  mqstore_request r;
  memset(&r, 0, sizeof r);
  r.op = op_of(v->op);
  r.key = (const uint8_t *)v->key;
  r.key_len = v->key_len;
  r.value = (const uint8_t *)v->value;
  r.value_len = v->value_len;
  r.condition = v->condition == NULL              ? MQSTORE_SET_ALWAYS
                : strcmp(v->condition, "NX") == 0 ? MQSTORE_SET_NX
                                                  : MQSTORE_SET_NEX;
  r.px_ms = v->px_ms;
  r.stop = v->stop;
  r.scan_token = (const uint8_t *)v->token;
  r.scan_token_len = v->token_len;
  return r;
}

/* A decoded request equals the vector's command. */
static void check_request(const mqstore_request *got, const request_vector *v) {
  mqstore_request want = request_of(v);
  CHECK(got->op == want.op);
  CHECK_BYTES(got->key, got->key_len, want.key, want.key_len);
  CHECK_BYTES(got->value, got->value_len, want.value, want.value_len);
  CHECK(got->condition == want.condition);
  CHECK(got->px_ms == want.px_ms);
  CHECK(got->stop == want.stop);
  CHECK((got->scan_token == NULL) == (want.scan_token == NULL));
  CHECK_BYTES(got->scan_token, got->scan_token_len, want.scan_token, want.scan_token_len);
}

static void requests_encode_to_the_vector_bytes_and_decode_back(void) {
  for (size_t i = 0; i < COUNT(REQUESTS); i++) {
    const request_vector *v = &REQUESTS[i];
    mqstore_request r = request_of(v);
    uint8_t buf[256];
    size_t len = 0;
    CHECK_OK(mqstore_encode_request(&r, buf, sizeof buf, &len));
    CHECK_BYTES(buf, len, v->bytes, v->bytes_len);

    mqstore_request *decoded = NULL;
    CHECK_OK(mqstore_decode_request((const uint8_t *)v->bytes, v->bytes_len, &decoded));
    check_request(decoded, v);
    mqstore_request_free(decoded);
  }
}

static void a_buffer_too_small_gets_the_length_needed_and_nothing_written(void) {
  mqstore_request r = request_of(&REQUESTS[0]);
  uint8_t buf[8];
  memset(buf, 0xAA, sizeof buf);
  size_t len = 0;
  CHECK_STATUS(mqstore_encode_request(&r, buf, sizeof buf, &len), MQSTORE_ERR_BUFFER_TOO_SMALL);
  CHECK(len == REQUESTS[0].bytes_len);
  for (size_t i = 0; i < sizeof buf; i++) CHECK(buf[i] == 0xAA);
  CHECK(mqstore_last_error_code() == MQSTORE_ERR_BUFFER_TOO_SMALL);
  CHECK_ERROR_SAYS("are needed");
}

static void requests_the_engine_alone_accepts_decode_like_their_twin(void) {
  for (size_t i = 0; i < COUNT(ALIASES); i++) {
    const request_vector *twin = NULL;
    for (size_t j = 0; j < COUNT(REQUESTS); j++)
      if (strcmp(REQUESTS[j].name, ALIASES[i].same_as) == 0) twin = &REQUESTS[j];
    CHECK(twin != NULL);
    mqstore_request *decoded = NULL;
    CHECK_OK(mqstore_decode_request((const uint8_t *)ALIASES[i].bytes, ALIASES[i].bytes_len, &decoded));
    check_request(decoded, twin);
    mqstore_request_free(decoded);
  }
}

static void bad_requests_fail_with_the_state_store_error_text(void) {
  for (size_t i = 0; i < COUNT(BAD_REQUESTS); i++) {
    const bad_request_vector *v = &BAD_REQUESTS[i];
    mqstore_request *decoded = (mqstore_request *)1; /* must be reset to NULL */
    int status = mqstore_decode_request((const uint8_t *)v->bytes, v->bytes_len, &decoded);
    CHECK(status >= 101 && status <= 199);
    CHECK(decoded == NULL);
    if (strcmp(mqstore_last_error(), v->error) != 0)
      FAIL("bad request %zu: error \"%s\", expected \"%s\"", i, mqstore_last_error(), v->error);
  }
}

static mqstore_response_kind kind_of(const char *kind) {
  static const char *const kinds[] = {"ok", "not_applied", "deleted", "value", "absent", "keys", "error"};
  for (int i = 0; i < 7; i++)
    if (strcmp(kind, kinds[i]) == 0) return (mqstore_response_kind)i;
  FAIL("unknown response kind %s in the vectors", kind);
}

static void responses_decode_to_the_vector_values(void) {
  for (size_t i = 0; i < COUNT(RESPONSES); i++) {
    const response_vector *v = &RESPONSES[i];
    mqstore_response *r = NULL;
    CHECK_OK(mqstore_decode_response((const uint8_t *)v->bytes, v->bytes_len, &r));
    CHECK(r->kind == kind_of(v->kind));
    CHECK(r->count == v->count);
    if (r->kind == MQSTORE_RESPONSE_VALUE) CHECK_BYTES(r->value, r->value_len, v->value, v->value_len);
    if (r->kind == MQSTORE_RESPONSE_ERROR) {
      CHECK(strcmp(r->error_text, v->text) == 0);
      CHECK(r->error_status == MQSTORE_ERR_REQUEST_SYNTAX);
    }
    CHECK(r->key_count == v->key_count);
    for (size_t k = 0; k < v->key_count; k++)
      CHECK_BYTES(r->keys[k].data, r->keys[k].len, v->keys[k], v->key_lens[k]);
    CHECK((r->scan_token == NULL) == (v->token == NULL));
    CHECK_BYTES(r->scan_token, r->scan_token_len, v->token, v->token_len);
    mqstore_response_free(r);
  }
}

static void notifications_decode_in_place(void) {
  for (size_t i = 0; i < COUNT(NOTIFICATIONS); i++) {
    const notification_vector *v = &NOTIFICATIONS[i];
    mqstore_notification n;
    CHECK_OK(mqstore_decode_notification((const uint8_t *)v->bytes, v->bytes_len, &n));
    CHECK(n.deleted == (strcmp(v->op, "DELETE") == 0));
    if (!n.deleted) {
      CHECK_BYTES(n.value, n.value_len, v->value, v->value_len);
      /* The value points into the bytes decoded: nothing copied, nothing to free. */
      CHECK(n.value >= (const uint8_t *)v->bytes && n.value < (const uint8_t *)v->bytes + v->bytes_len);
    }
  }
  mqstore_notification n;
  CHECK_STATUS(mqstore_decode_notification(S("*1\r\n$6\r\nNOTIFY\r\n"), &n), MQSTORE_ERR_MALFORMED_ANSWER);
  mqstore_response *r = NULL;
  CHECK_STATUS(mqstore_decode_response(S("+OK"), &r), MQSTORE_ERR_MALFORMED_ANSWER);
  CHECK(r == NULL);
}

static void hlc_formats_parses_and_orders_as_the_vectors_say(void) {
  for (size_t i = 0; i < COUNT(HLC_FORMAT); i++) {
    mqstore_hlc h;
    memset(&h, 0, sizeof h);
    h.wall_ms = HLC_FORMAT[i].wall_ms;
    h.counter = HLC_FORMAT[i].counter;
    strcpy(h.node, HLC_FORMAT[i].node);
    char text[300];
    size_t len = 0;
    CHECK_OK(mqstore_hlc_format(&h, text, sizeof text, &len));
    CHECK(strcmp(text, HLC_FORMAT[i].text) == 0);
    CHECK(len == strlen(HLC_FORMAT[i].text));
    char small[4];
    CHECK_STATUS(mqstore_hlc_format(&h, small, sizeof small, &len), MQSTORE_ERR_BUFFER_TOO_SMALL);
    CHECK(len == strlen(HLC_FORMAT[i].text));
  }
  for (size_t i = 0; i < COUNT(HLC_PARSE_OK); i++) {
    mqstore_hlc h;
    CHECK_OK(mqstore_hlc_parse(HLC_PARSE_OK[i].text, &h));
    CHECK(h.wall_ms == HLC_PARSE_OK[i].wall_ms);
    CHECK(h.counter == HLC_PARSE_OK[i].counter);
    CHECK(strcmp(h.node, HLC_PARSE_OK[i].node) == 0);
  }
  for (size_t i = 0; i < COUNT(HLC_PARSE_ERR); i++) {
    mqstore_hlc h;
    CHECK_STATUS(mqstore_hlc_parse(HLC_PARSE_ERR[i], &h), MQSTORE_ERR_INVALID_ARGUMENT);
  }
  for (size_t i = 0; i < COUNT(HLC_ORDER); i++) {
    mqstore_hlc older, newer;
    int order = 0;
    CHECK_OK(mqstore_hlc_parse(HLC_ORDER[i].older, &older));
    CHECK_OK(mqstore_hlc_parse(HLC_ORDER[i].newer, &newer));
    CHECK_OK(mqstore_hlc_compare(&older, &newer, &order));
    CHECK(order == -1);
    CHECK_OK(mqstore_hlc_compare(&newer, &older, &order));
    CHECK(order == 1);
    CHECK_OK(mqstore_hlc_compare(&newer, &newer, &order));
    CHECK(order == 0);
  }
}

static void topics_are_the_vector_topics(void) {
  CHECK(strcmp(mqstore_invoke_topic(), INVOKE_TOPIC) == 0);
  char topic[256];
  size_t len = 0;
  CHECK_OK(mqstore_notify_topic(NOTIFY_CLIENT, S(NOTIFY_KEY), topic, sizeof topic, &len));
  CHECK(strcmp(topic, NOTIFY_TOPIC) == 0);
  CHECK(len == strlen(NOTIFY_TOPIC));
}

static void bad_arguments_get_an_error_and_a_message(void) {
  size_t len = 0;
  uint8_t buf[64];
  CHECK_STATUS(mqstore_encode_request(NULL, buf, sizeof buf, &len), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_ERROR_SAYS("request is NULL");
  mqstore_request r;
  memset(&r, 0, sizeof r);
  r.op = MQSTORE_OP_GET;
  r.key = NULL;
  r.key_len = 3;
  CHECK_STATUS(mqstore_encode_request(&r, buf, sizeof buf, &len), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_ERROR_SAYS("request.key is NULL with a length of 3");
  r.key = (const uint8_t *)"k";
  r.key_len = 0;
  CHECK_STATUS(mqstore_encode_request(&r, buf, sizeof buf, &len), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_ERROR_SAYS("empty");
  r.key_len = 1;
  r.op = 42;
  CHECK_STATUS(mqstore_encode_request(&r, buf, sizeof buf, &len), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_ERROR_SAYS("not 42");
  r.op = MQSTORE_OP_SET;
  r.condition = 7;
  CHECK_STATUS(mqstore_encode_request(&r, buf, sizeof buf, &len), MQSTORE_ERR_INVALID_ARGUMENT);
  r.condition = MQSTORE_SET_ALWAYS;
  CHECK_STATUS(mqstore_encode_request(&r, buf, sizeof buf, NULL), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_encode_request(&r, NULL, 64, &len), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_decode_request(NULL, 4, NULL), MQSTORE_ERR_INVALID_ARGUMENT);
  mqstore_request *decoded = NULL;
  CHECK_STATUS(mqstore_decode_request(NULL, 4, &decoded), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_hlc_parse(NULL, NULL), MQSTORE_ERR_INVALID_ARGUMENT);
  mqstore_hlc h;
  memset(&h, 'x', sizeof h); /* a node without its NUL */
  char text[512];
  CHECK_STATUS(mqstore_hlc_format(&h, text, sizeof text, &len), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_ERROR_SAYS("not NUL-terminated");
  CHECK_STATUS(mqstore_hlc_parse("1:2:a:b", &h), MQSTORE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mqstore_notify_topic("client", NULL, 0, text, sizeof text, &len), MQSTORE_ERR_INVALID_ARGUMENT);

  /* A freed object used again: detected, not a crash; a double free is recorded. */
  CHECK_OK(mqstore_decode_request((const uint8_t *)REQUESTS[0].bytes, REQUESTS[0].bytes_len, &decoded));
  mqstore_request_free(decoded);
  mqstore_request_free(decoded);
  CHECK_ERROR_SAYS("not a live mqstore object");
  mqstore_request_free(NULL); /* NULL-safe */
  mqstore_response_free(NULL);
  mqstore_event_free(NULL);
  mqstore_publish_free(NULL);

  /* Another kind of object where a request is expected. */
  mqstore_response *response = NULL;
  CHECK_OK(mqstore_decode_response(S("+OK\r\n"), &response));
  mqstore_request_free((mqstore_request *)response);
  CHECK_ERROR_SAYS("another kind of mqstore object");
  mqstore_response_free(response);

  /* Every status has its name in the header: the library's own and the shared kinds. */
#define NAMED(status) CHECK(strcmp(mqstore_status_name(status), #status) == 0)
  NAMED(MQSTORE_OK);
  NAMED(MQSTORE_ERR_INVALID_ARGUMENT);
  NAMED(MQSTORE_ERR_UNSUPPORTED);
  NAMED(MQSTORE_ERR_TIMESTAMP_SKEW);
  NAMED(MQSTORE_ERR_FENCING_TOKEN_LOWER_VERSION);
  NAMED(MQSTORE_ERR_REQUEST_SYNTAX);
  NAMED(MQSTORE_ERR_UNKNOWN_SERVICE);
  NAMED(MQSTORE_ERR_REQUEST_TIMEOUT);
  NAMED(MQSTORE_ERR_CONNECTION_LOST);
  NAMED(MQSTORE_ERR_BROKER_UNREACHABLE);
  NAMED(MQSTORE_ERR_REQUEST_TOO_LARGE);
  NAMED(MQSTORE_ERR_COMMAND_TIMEOUT);
  NAMED(MQSTORE_ERR_PUBLISH_REFUSED);
#undef NAMED
  CHECK(strcmp(mqstore_status_name(12345), "unknown status") == 0);
}

static void the_version_is_the_library_version(void) {
  const char *version = mqstore_version();
  CHECK(version != NULL);
  CHECK(strcmp(version, MQSTORE_EXPECTED_VERSION) == 0);
}

int main(void) {
  RUN(requests_encode_to_the_vector_bytes_and_decode_back);
  RUN(a_buffer_too_small_gets_the_length_needed_and_nothing_written);
  RUN(requests_the_engine_alone_accepts_decode_like_their_twin);
  RUN(bad_requests_fail_with_the_state_store_error_text);
  RUN(responses_decode_to_the_vector_values);
  RUN(notifications_decode_in_place);
  RUN(hlc_formats_parses_and_orders_as_the_vectors_say);
  RUN(topics_are_the_vector_topics);
  RUN(bad_arguments_get_an_error_and_a_message);
  RUN(the_version_is_the_library_version);
  SUMMARY();
  return 0;
}
