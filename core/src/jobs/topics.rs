//! Every topic of the jobs service, in one place: AWS IoT Jobs' device API
//! (`$aws/things/{thing}/jobs/...`), which the service and the device clients share, and
//! mqstore's operator API.

/// Where operator requests go.
pub const OPERATOR: &str = "mqstore/jobs/v1/command/invoke";

/// Every thing's device API topics: the service subscribes to its requests here. Its own
/// replies and notifications match too: a host subscribes with No Local (MQTT 5) so that the
/// broker does not send them back; other nodes' still come, and are ignored.
pub const DEVICE_FILTER: &str = "$aws/things/+/jobs/#";

/// Where the jobs events go (`$aws/events/job/…`, `$aws/events/jobExecution/…`).
pub const EVENTS: &str = "$aws/events/";

/// Whether a publish of the service is an event (not a reply or a thing's notification).
pub fn is_event(topic: &str) -> bool {
    topic.starts_with(EVENTS)
}

const THINGS: &str = "$aws/things/";
const JOBS: &str = "/jobs/";

/// Where a client's operator answers come.
pub fn operator_response(client_id: &str) -> String {
    format!("clients/{client_id}/mqstore/jobs/v1/response")
}

/// `thing`'s device API topic for `api`: `get`, `start-next`, `{jobId}/get`,
/// `{jobId}/update`, `notify`, `notify-next`, or a request's with `/accepted` or `/rejected`.
pub fn device(thing: &str, api: &str) -> String {
    let mut topic = String::with_capacity(THINGS.len() + thing.len() + JOBS.len() + api.len());
    topic.push_str(THINGS);
    topic.push_str(thing);
    topic.push_str(JOBS);
    topic.push_str(api);
    topic
}

/// The thing and the API of a device API topic (`None` for any other topic).
pub fn parse_device(topic: &str) -> Option<(&str, &str)> {
    topic.strip_prefix(THINGS)?.split_once(JOBS)
}

/// Whether `topic` is one of the jobs service's: the device API's or the operator's.
pub fn is_jobs(topic: &str) -> bool {
    topic == OPERATOR || topic.starts_with(THINGS)
}

/// What a device client subscribes to before acting as `thing`: its notifications and the
/// replies to its requests. (AWS delivers replies without a subscription; a standard broker
/// needs one.)
pub fn device_subscriptions(thing: &str) -> Vec<String> {
    [
        "notify",
        "notify-next",
        "+/accepted",
        "+/rejected",
        "+/+/accepted",
        "+/+/rejected",
    ]
    .iter()
    .map(|api| device(thing, api))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_topics_are_built_and_read_back() {
        let topic = device("t-1", "j1/update");
        assert_eq!(topic, "$aws/things/t-1/jobs/j1/update");
        assert_eq!(parse_device(&topic), Some(("t-1", "j1/update")));
        assert_eq!(parse_device("$aws/things/t-1/shadow/get"), None);
        assert_eq!(parse_device(OPERATOR), None);
        assert!(is_jobs(&topic) && is_jobs(OPERATOR));
        assert!(!is_jobs("clients/x/mqstore/jobs/v1/response"));
        assert_eq!(device_subscriptions("t")[0], "$aws/things/t/jobs/notify");
    }
}
