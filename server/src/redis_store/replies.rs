//! Reading Redis's replies to the store's scripts (versions, clients, expired keys, service
//! errors) into the core's types.

use super::*;

/// A reply as the type a caller expects.
pub(super) fn parsed<T: redis::FromRedisValue>(value: Value) -> Result<T> {
    redis::from_redis_value(value).map_err(|e| RedisStoreError::Reply(e.to_string()))
}

/// A ZRANGEBYLEX bound: `(` exclusive or `[` inclusive, then the key.
pub(super) fn lex_bound(kind: u8, key: &[u8]) -> Vec<u8> {
    let mut bound = Vec::with_capacity(key.len() + 1);
    bound.push(kind);
    bound.extend_from_slice(key);
    bound
}

/// The fencing token argument ('' for none), in the padded form the scripts compare.
pub(super) fn token_arg(token: Option<&Hlc>) -> String {
    token.map(Hlc::to_string).unwrap_or_default()
}

/// Splits a key script's reply into the key it found expired (first element) and the rest.
pub(super) fn split_expired(key: &Bytes, reply: Value) -> Result<(Option<Expired>, Vec<Value>)> {
    let Value::Array(mut items) = reply else {
        return Err(unexpected("a key script", &[reply]));
    };
    if items.is_empty() {
        return Err(RedisStoreError::Reply("an empty reply".into()));
    }
    let rest = items.split_off(1);
    let expired = match items.pop() {
        Some(Value::Array(parts)) => {
            let (version, replaced, watchers) = versions_and_clients(&parts)?;
            Some(Expired {
                key: key.clone(),
                watchers,
                version,
                replaced: replaced.ok_or_else(|| unexpected("an expired key", &parts))?,
            })
        }
        _ => None,
    };
    Ok((expired, rest))
}

/// `[version, replaced version or "", client, client, …]`: a change's version, the version of
/// the value it replaced (none when a SET made the key), and the clients to notify.
pub(super) fn versions_and_clients(items: &[Value]) -> Result<(Hlc, Option<Hlc>, Vec<ClientId>)> {
    let [
        Value::BulkString(version),
        Value::BulkString(replaced),
        clients @ ..,
    ] = items
    else {
        return Err(unexpected("a version, the replaced one and clients", items));
    };
    let replaced = match replaced.is_empty() {
        true => None,
        false => Some(hlc(replaced)?),
    };
    let clients = clients
        .iter()
        .map(|c| match c {
            Value::BulkString(c) => Ok(ClientId::from(String::from_utf8_lossy(c).as_ref())),
            other => Err(unexpected("a client id", std::slice::from_ref(other))),
        })
        .collect::<Result<_>>()?;
    Ok((hlc(version)?, replaced, clients))
}

pub(super) fn hlc(text: &[u8]) -> Result<Hlc> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| Hlc::parse(t).ok())
        .ok_or_else(|| {
            RedisStoreError::Reply(format!(
                "a malformed version {:?}",
                String::from_utf8_lossy(text)
            ))
        })
}

pub(super) fn service_error(name: &[u8]) -> Result<ServiceError> {
    Ok(match name {
        b"FencingTokenRequired" => ServiceError::FencingTokenRequired,
        b"FencingTokenLowerVersion" => ServiceError::FencingTokenLowerVersion,
        b"QuotaExceeded" => ServiceError::QuotaExceeded,
        other => {
            return Err(RedisStoreError::Reply(format!(
                "an unknown error {:?}",
                String::from_utf8_lossy(other)
            )));
        }
    })
}

pub(super) fn unexpected(what: &str, values: &[Value]) -> RedisStoreError {
    RedisStoreError::Reply(format!("{what}: {values:?}"))
}
