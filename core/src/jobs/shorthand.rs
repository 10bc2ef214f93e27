//! Operator calls as the client libraries' methods take them: AWS's request fields, plus a
//! few shorthands for the settings people give most (a thing, a group, a timeout in minutes,
//! a retry count, a rate). Every binding hands its method's arguments here, so the rules that
//! turn `maxRetries: 2` into AWS's retry criteria are written once (docs/protocol/jobs.md,
//! "Shorthands").

use serde_json::{Map, Value};

use super::wire::{RetryConfig, check_operator_call};

/// The operator call `op` with `args` (a JSON object of AWS's request fields and the
/// shorthands below, or `null`) as the wire's request: the shorthands written out in AWS's
/// fields, `op` set, and the call checked as [`check_operator_call`] does (the service checks
/// the rest). An error names the argument that does not fit.
///
/// | shorthand | AWS's field |
/// |---|---|
/// | `thing` | `thingName` |
/// | `group` | `thingGroupName` |
/// | `inProgressTimeoutMinutes` | `timeoutConfig.inProgressTimeoutInMinutes` |
/// | `maxRetries` (above 0) | `jobExecutionsRetryConfig`: that many retries of any failure |
/// | `maxPerMinute` | `jobExecutionsRolloutConfig.maximumPerMinute` |
/// | `rollout` | `jobExecutionsRolloutConfig` |
/// | `abort` (a list) | `abortConfig.criteriaList` |
/// | `retry` (a list) | `jobExecutionsRetryConfig.criteriaList` (before `maxRetries`) |
/// | `continuous: true` | `targetSelection: "CONTINUOUS"` |
/// | `scheduling` | `schedulingConfig` |
/// | `template` | `jobTemplateArn` |
/// | `parameters` | `documentParameters` |
/// | `description` of `createThingGroup` | `thingGroupProperties.thingGroupDescription` |
///
/// A shorthand given beside the field it stands for is refused; a `null` argument is absent.
/// The fields every call names by (`jobId`, `thingName`, ...) must be strings, `targets` a
/// list of them and `document` an object, so that a caller's slip is refused before anything
/// is sent.
pub fn operator_call(op: &str, args: Value) -> Result<Value, String> {
    let args = match args {
        Value::Null => Map::new(),
        Value::Object(args) => args,
        _ => return Err(format!("the arguments of {op} must be an object")),
    };
    let mut request = Request::default();
    let mut retry_criteria = None;
    let mut retries = 0;
    for (name, value) in args {
        if value.is_null() {
            continue; // Absent.
        }
        let (field, value) = match name.as_str() {
            "thing" => ("thingName", text(&name, value)?),
            "group" => ("thingGroupName", text(&name, value)?),
            "inProgressTimeoutMinutes" => (
                "timeoutConfig",
                object("inProgressTimeoutInMinutes", count(&name, &value)?.into()),
            ),
            "maxRetries" => {
                retries = count(&name, &value)?;
                continue;
            }
            // The call's name again, as a request written whole carries it.
            "op" if value.as_str() == Some(op) => continue,
            "op" => return Err(format!("op is {op} here, not {value}")),
            "maxPerMinute" => (
                "jobExecutionsRolloutConfig",
                object("maximumPerMinute", count(&name, &value)?.into()),
            ),
            "rollout" => ("jobExecutionsRolloutConfig", value),
            "abort" => ("abortConfig", object("criteriaList", list(&name, value)?)),
            "retry" => {
                retry_criteria = Some(list(&name, value)?);
                continue;
            }
            "continuous" => match value {
                Value::Bool(true) => ("targetSelection", Value::from("CONTINUOUS")),
                Value::Bool(false) => continue,
                _ => return Err("continuous must be true or false".into()),
            },
            "scheduling" => ("schedulingConfig", value),
            "template" => ("jobTemplateArn", text(&name, value)?),
            "parameters" => ("documentParameters", value),
            "description" if op == "createThingGroup" => (
                "thingGroupProperties",
                object("thingGroupDescription", text(&name, value)?),
            ),
            "jobId" | "thingName" | "thingGroupName" | "jobTemplateId" | "jobTemplateArn"
            | "description" | "nextToken" | "status" => {
                let value = text(&name, value)?;
                request.put(&name, value, &name)?;
                continue;
            }
            "targets" => match &value {
                Value::Array(targets) if targets.iter().all(Value::is_string) => ("targets", value),
                _ => return Err("targets must be a list of thing names".into()),
            },
            "document" => match value {
                Value::Object(_) => ("document", value),
                _ => return Err("document must be an object (the job document)".into()),
            },
            _ => {
                request.put(&name, value, &name)?;
                continue;
            }
        };
        request.put(field, value, &name)?;
    }
    let retry = match retry_criteria {
        Some(criteria) => Some((object("criteriaList", criteria), "retry")),
        None if retries > 0 => serde_json::to_value(RetryConfig::all(retries))
            .ok()
            .map(|retry| (retry, "maxRetries")),
        None => None,
    };
    if let Some((retry, given)) = retry {
        request.put("jobExecutionsRetryConfig", retry, given)?;
    }
    let mut fields = request.fields;
    fields.insert("op".into(), Value::String(op.into()));
    let request = Value::Object(fields);
    check_operator_call(&request)?;
    Ok(request)
}

/// The request's fields, and which argument gave each.
#[derive(Default)]
struct Request {
    fields: Map<String, Value>,
    given: Vec<(String, String)>,
}

impl Request {
    /// Sets `field` from argument `given`, refusing a second value for it (a shorthand beside
    /// its field, or two shorthands for one field).
    fn put(&mut self, field: &str, value: Value, given: &str) -> Result<(), String> {
        if self.fields.insert(field.into(), value).is_none() {
            self.given.push((field.into(), given.into()));
            return Ok(());
        }
        let first = self
            .given
            .iter()
            .find(|(f, _)| f == field)
            .map_or(field, |(_, g)| g);
        // One order whatever the arguments' order: a shorthand before AWS's field, two
        // shorthands alphabetically.
        let (a, b) = if first == field || (given != field && given < first) {
            (given, first)
        } else {
            (first, given)
        };
        Err(format!("give {a} or {b}, not both"))
    }
}

/// `{field: value}` (one function for every nested shorthand: smaller than a `json!` each).
fn object(field: &str, value: Value) -> Value {
    let mut object = Map::new();
    object.insert(field.into(), value);
    Value::Object(object)
}

fn text(name: &str, value: Value) -> Result<Value, String> {
    match value {
        Value::String(_) => Ok(value),
        _ => Err(format!("{name} must be a string")),
    }
}

fn count(name: &str, value: &Value) -> Result<u32, String> {
    value
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| format!("{name} must be a whole number from 0 to {}", u32::MAX))
}

fn list(name: &str, value: Value) -> Result<Value, String> {
    match value {
        Value::Array(_) => Ok(value),
        _ => Err(format!("{name} must be a list (of AWS's criteria objects)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::JobSpec;
    use crate::jobs::wire::OperatorRequest;
    use serde_json::json;

    #[test]
    fn shorthands_become_aws_fields() {
        let request = operator_call(
            "createJob",
            json!({
                "jobId": "fw", "targets": ["t"], "document": {"v": 1},
                "inProgressTimeoutMinutes": 5, "maxRetries": 2, "maxPerMinute": 10,
                "abort": [{"failureType": "FAILED", "action": "CANCEL",
                           "thresholdPercentage": 50.0, "minNumberOfExecutedThings": 1}],
                "continuous": false, "template": null,
            }),
        )
        .unwrap();
        assert_eq!(
            request,
            json!({
                "op": "createJob", "jobId": "fw", "targets": ["t"], "document": {"v": 1},
                "timeoutConfig": {"inProgressTimeoutInMinutes": 5},
                "jobExecutionsRetryConfig": {"criteriaList": [{"failureType": "ALL", "numberOfRetries": 2}]},
                "jobExecutionsRolloutConfig": {"maximumPerMinute": 10},
                "abortConfig": {"criteriaList": [{"failureType": "FAILED", "action": "CANCEL",
                    "thresholdPercentage": 50.0, "minNumberOfExecutedThings": 1}]},
            })
        );
        // The same request as the Rust client's typed spec writes it.
        let typed = JobSpec::new("fw", vec!["t".into()], json!({"v": 1}))
            .in_progress_timeout(Some(5))
            .retries(2);
        let parsed: OperatorRequest = serde_json::from_value(request).unwrap();
        let OperatorRequest::CreateJob(spec) = parsed else {
            panic!("createJob")
        };
        assert_eq!(spec.config.timeout_config, typed.config.timeout_config);
        assert_eq!(
            spec.config.job_executions_retry_config,
            typed.config.job_executions_retry_config
        );
    }

    #[test]
    fn names_and_groups_and_lists() {
        assert_eq!(
            operator_call("addThingToThingGroup", json!({"group": "g", "thing": "t"})).unwrap(),
            json!({"op": "addThingToThingGroup", "thingGroupName": "g", "thingName": "t"})
        );
        assert_eq!(
            operator_call(
                "createThingGroup",
                json!({"group": "g", "description": "d"})
            )
            .unwrap(),
            json!({"op": "createThingGroup", "thingGroupName": "g",
                   "thingGroupProperties": {"thingGroupDescription": "d"}})
        );
        assert_eq!(
            operator_call("listJobs", Value::Null).unwrap(),
            json!({"op": "listJobs"})
        );
        // AWS's fields pass as they are; a retry list wins over the count.
        assert_eq!(
            operator_call(
                "createJob",
                json!({"jobId": "j", "thingName": "x", "maxRetries": 3,
                       "retry": [{"failureType": "FAILED", "numberOfRetries": 1}],
                       "continuous": true, "template": "tpl", "parameters": {"a": "b"}})
            )
            .unwrap(),
            json!({"op": "createJob", "jobId": "j", "thingName": "x",
                   "jobExecutionsRetryConfig": {"criteriaList": [{"failureType": "FAILED", "numberOfRetries": 1}]},
                   "targetSelection": "CONTINUOUS", "jobTemplateArn": "tpl",
                   "documentParameters": {"a": "b"}})
        );
    }

    #[test]
    fn wrong_arguments_are_refused_by_name() {
        let refused = |op: &str, args: Value| operator_call(op, args).unwrap_err();
        assert_eq!(
            refused(
                "deleteJobExecution",
                json!({"thing": "a", "thingName": "b"})
            ),
            "give thing or thingName, not both"
        );
        assert_eq!(
            refused("createJob", json!({"maxPerMinute": 1, "rollout": {}})),
            "give maxPerMinute or rollout, not both"
        );
        // The same words whichever argument comes first.
        assert_eq!(
            refused("createJob", json!({"rollout": {}, "maxPerMinute": 1})),
            "give maxPerMinute or rollout, not both"
        );
        assert_eq!(
            refused(
                "deleteJobExecution",
                json!({"thingName": "b", "thing": "a"})
            ),
            "give thing or thingName, not both"
        );
        assert_eq!(
            refused(
                "createJob",
                json!({"maxRetries": 1, "jobExecutionsRetryConfig": {}})
            ),
            "give maxRetries or jobExecutionsRetryConfig, not both"
        );
        assert!(refused("createJob", json!({"maxRetries": -1})).contains("maxRetries must be"));
        assert!(refused("createJob", json!({"maxRetries": 1.5})).contains("maxRetries must be"));
        assert_eq!(
            refused("createJob", json!({"thing": 4})),
            "thing must be a string"
        );
        assert!(refused("createJob", json!({"abort": {}})).contains("abort must be a list"));
        assert!(refused("createJob", json!({"continuous": "yes"})).contains("true or false"));
        assert!(refused("createJob", json!([1])).contains("must be an object"));
        assert!(refused("createJob", json!({"targets": "t"})).contains("targets must be a list"));
        assert!(refused("createJob", json!({"targets": [1]})).contains("targets must be a list"));
        assert!(
            refused("createJob", json!({"document": []})).contains("document must be an object")
        );
        assert_eq!(
            refused("describeJob", json!({"jobId": 7})),
            "jobId must be a string"
        );
        assert!(refused("noSuchCall", json!({})).contains("fits no operator call"));
        assert_eq!(
            refused("listJobs", json!({"op": "deleteJob"})),
            "op is listJobs here, not \"deleteJob\""
        );
        assert!(operator_call("listJobs", json!({"op": "listJobs"})).is_ok());
    }
}
