//! # mqstore
//!
//! The protocol core of mqstore: the state store's codec, hybrid logical clocks, the RPC
//! envelope, topic names and the engine, without network I/O. Bytes, messages and the current
//! time go in; bytes, messages and the next deadline come out. Drivers (the tokio server and
//! client, the mosquitto plugin, the WebAssembly, Python and C bindings) move them to and from
//! the network. The one exception is [`disk`], a data directory's log: it reads, writes and
//! syncs files with `std::fs` (a host runs each sync where it wants, [`disk::Sync`]).
//!
//! See `docs/core.md` for a tour aimed at binding authors.
//!
//! Two kinds of users, two parts of the API, both kept stable as the crate's version says
//! (`api/mqstore-core.txt` lists every item):
//!
//! | for | modules |
//! |---|---|
//! | clients and bindings | [`session`] (the sans-IO client), [`client`], [`codec`], [`envelope`], [`hlc`], [`lease`], [`topics`], the wire types of [`jobs`] and [`commands`] |
//! | hosts of a server node (`mqstore serve`, the mosquitto plugin) | [`server`] (the sans-IO node), [`engine`], [`store`], [`disk`], [`presence`] |
//!
//! ```
//! use bytes::Bytes;
//! use mqstore_core::codec::{Request, Response, SetRequest, decode_request};
//! use mqstore_core::engine::{Engine, RequestContext};
//!
//! let mut engine = Engine::in_memory("node-1").unwrap();
//! let now_ms = 1_700_000_000_000;
//! let set = Request::Set(SetRequest::new("greeting", "hello"));
//! let wire = set.to_bytes();
//! assert_eq!(&wire[..], b"*3\r\n$3\r\nSET\r\n$8\r\ngreeting\r\n$5\r\nhello\r\n");
//!
//! let context = RequestContext {
//!     client_id: Some("client-1"),
//!     timestamp: Some("1700000000000:0:client-1"),
//!     ..RequestContext::default()
//! };
//! let mut notifications = Vec::new();
//! let reply = engine.execute(decode_request(&wire).unwrap(), context, now_ms, &mut notifications);
//! assert_eq!(reply.response, Response::Ok);
//! assert_eq!(reply.version.unwrap().to_string(), "001700000000000:00001:node-1");
//!
//! let get = Request::Get { key: Bytes::from_static(b"greeting") };
//! let reply = engine.execute(get, context, now_ms, &mut notifications);
//! assert_eq!(reply.response.to_bytes(), Bytes::from_static(b"$5\r\nhello\r\n"));
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]
// What is public is reachable from outside: internal entry points are `pub(crate)`.
#![deny(unreachable_pub)]

pub mod client;
pub mod codec;
pub mod commands;
pub mod disk;
pub mod engine;
pub mod envelope;
mod error;
pub mod hlc;
pub mod jobs;
pub mod lease;
pub mod presence;
mod reason;
pub mod server;
pub mod session;
pub mod shadow;
pub mod store;
pub mod topics;
#[cfg(test)]
mod wire_types;

pub use error::{ErrorKind, ServiceError};
