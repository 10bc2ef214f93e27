/* mosquitto 2.0.11's plugin headers, in the order they need (mosquitto_plugin.h uses
 * mosquitto_plugin_id_t from mosquitto_broker.h without including it before 2.0.13). */
#include <stdbool.h>
#include <stdint.h>
#include <mosquitto_broker.h>
#include <mosquitto_plugin.h>
#include <mosquitto.h>
#include <mqtt_protocol.h>
