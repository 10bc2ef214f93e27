/* Glue between mqstore's layer 2 (bring your own MQTT) and libmosquitto: an mqstore_publish
 * becomes mosquitto_publish_v5 with its MQTT 5 properties, and a received message with its
 * properties becomes an mqstore_publish for mqstore_core_handle. Header-only; used by
 * byo-mosquitto.c and by the C tests (bindings-c/tests/test_byo.c). Copy it into your
 * firmware, or write the same ~80 lines for your MQTT client. */
#ifndef MQSTORE_MOSQUITTO_GLUE_H
#define MQSTORE_MOSQUITTO_GLUE_H

#include <mosquitto.h>
#include <mqtt_protocol.h>
#include <stdlib.h>

#include "mqstore.h"

/* Publishes `p` (from mqstore_core_next_publish) with every property it carries. Returns a
 * MOSQ_ERR_* code. */
static int glue_publish(struct mosquitto *mosq, const mqstore_publish *p) {
  mosquitto_property *props = NULL;
  int rc = MOSQ_ERR_SUCCESS;
  if (p->response_topic != NULL)
    rc = mosquitto_property_add_string(&props, MQTT_PROP_RESPONSE_TOPIC, p->response_topic);
  if (rc == MOSQ_ERR_SUCCESS && p->correlation_data != NULL)
    rc = mosquitto_property_add_binary(&props, MQTT_PROP_CORRELATION_DATA, p->correlation_data,
                                       (uint16_t)p->correlation_data_len);
  if (rc == MOSQ_ERR_SUCCESS && p->content_type != NULL)
    rc = mosquitto_property_add_string(&props, MQTT_PROP_CONTENT_TYPE, p->content_type);
  if (rc == MOSQ_ERR_SUCCESS && p->message_expiry_interval > 0)
    rc = mosquitto_property_add_int32(&props, MQTT_PROP_MESSAGE_EXPIRY_INTERVAL, p->message_expiry_interval);
  if (rc == MOSQ_ERR_SUCCESS)
    rc = mosquitto_property_add_byte(&props, MQTT_PROP_PAYLOAD_FORMAT_INDICATOR, p->payload_format_indicator);
  for (size_t i = 0; rc == MOSQ_ERR_SUCCESS && i < p->user_property_count; i++)
    rc = mosquitto_property_add_string_pair(&props, MQTT_PROP_USER_PROPERTY, p->user_properties[i].name,
                                            p->user_properties[i].value);
  if (rc == MOSQ_ERR_SUCCESS)
    rc = mosquitto_publish_v5(mosq, NULL, p->topic, (int)p->payload_len, p->payload, p->qos, false, props);
  mosquitto_property_free_all(&props);
  return rc;
}

/* Publishes everything the state machine has to send, in order. */
static int glue_flush(struct mosquitto *mosq, mqstore_core *core) {
  for (;;) {
    mqstore_publish *p = NULL;
    int status = mqstore_core_next_publish(core, &p);
    if (status != MQSTORE_OK) return status;
    if (p == NULL) return MQSTORE_OK;
    int rc = glue_publish(mosq, p);
    mqstore_publish_free(p);
    if (rc != MOSQ_ERR_SUCCESS) return -rc;
  }
}

/* Feeds a message from libmosquitto's on_message_v5 to the state machine. */
static int glue_handle(mqstore_core *core, const struct mosquitto_message *m, const mosquitto_property *props,
                       uint64_t now_ms) {
  char *response_topic = NULL, *content_type = NULL;
  void *correlation = NULL;
  uint16_t correlation_len = 0;
  uint8_t format = 0;
  uint32_t expiry = 0;
  mosquitto_property_read_string(props, MQTT_PROP_RESPONSE_TOPIC, &response_topic, false);
  mosquitto_property_read_string(props, MQTT_PROP_CONTENT_TYPE, &content_type, false);
  mosquitto_property_read_binary(props, MQTT_PROP_CORRELATION_DATA, &correlation, &correlation_len, false);
  mosquitto_property_read_byte(props, MQTT_PROP_PAYLOAD_FORMAT_INDICATOR, &format, false);
  mosquitto_property_read_int32(props, MQTT_PROP_MESSAGE_EXPIRY_INTERVAL, &expiry, false);

  size_t count = 0;
  for (const mosquitto_property *p = props; p != NULL; p = mosquitto_property_next(p))
    if (mosquitto_property_identifier(p) == MQTT_PROP_USER_PROPERTY) count++;
  mqstore_user_property *user = calloc(count > 0 ? count : 1, sizeof *user);
  size_t n = 0;
  for (const mosquitto_property *p = props; p != NULL && user != NULL; p = mosquitto_property_next(p)) {
    if (mosquitto_property_identifier(p) != MQTT_PROP_USER_PROPERTY) continue;
    char *name = NULL, *value = NULL;
    mosquitto_property_read_string_pair(p, MQTT_PROP_USER_PROPERTY, &name, &value, false);
    user[n].name = name;
    user[n].value = value;
    n++;
  }

  mqstore_publish in = {
      .topic = m->topic,
      .payload = m->payload,
      .payload_len = (size_t)m->payloadlen,
      .qos = (uint8_t)m->qos,
      .payload_format_indicator = format,
      .message_expiry_interval = expiry,
      .content_type = content_type,
      .response_topic = response_topic,
      .correlation_data = correlation,
      .correlation_data_len = correlation_len,
      .user_properties = user,
      .user_property_count = n,
  };
  int status = user == NULL ? MQSTORE_ERR_INTERNAL : mqstore_core_handle(core, &in, now_ms);
  for (size_t i = 0; i < n; i++) {
    free((char *)user[i].name);
    free((char *)user[i].value);
  }
  free(user);
  free(response_topic);
  free(content_type);
  free(correlation);
  return status;
}

#endif
