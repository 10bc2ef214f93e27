//! A pipelined connection to one Redis server that one task owns and drives from its own loop:
//! commands are written into a buffer as they come ([`Pipe::command`]), go out together on the
//! task's next wait, and their replies come back in order ([`Pipe::reply`]). No task, channel
//! or timer per call, where the shared client (`redis::aio`) has all three: the command host's
//! hot path on a single Redis server (see docs/performance.md).
//!
//! It speaks to a `redis://` server over TCP and to a `rediss://` one over TLS, trusting what
//! the shared client trusts ([`RedisTls`]). What it does not do: `rediss://…#insecure`,
//! Cluster, finding the primary (on Sentinel it is opened to the one the store follows),
//! reconnecting; a `WAIT` for replicas is one more command its user sends. A host uses it only
//! for one server it serves and falls back to the shared client otherwise; a pipe that fails
//! (the connection dropped, a reply is late, the server is no primary any more) is dropped and
//! opened again.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::RedisTls;

/// A reply, as far as a pipe's users read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `:n`
    Int(i64),
    /// `+OK` and other simple strings.
    Status(String),
    /// `$n …` (`None`: the nil bulk string).
    Bulk(Option<Vec<u8>>),
    /// `*n …` (`None`: the nil array).
    Array(Option<Vec<Reply>>),
    /// `-ERR …`: the message, its code first (`NOSCRIPT …`).
    Error(String),
}

/// How long a pipe waits for its connection and for the replies of `AUTH`, `SELECT` and
/// `CLIENT SETNAME`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A pipe's connection: TCP, or TLS over it.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

/// One connection to one Redis server, for pipelined commands.
pub(crate) struct Pipe {
    stream: Stream,
    /// Commands written by [`Pipe::command`], not yet (all) sent.
    out: Vec<u8>,
    /// How much of `out` has been sent.
    sent: usize,
    /// Whether what was sent may still wait in the stream (TLS holds the records a write made
    /// when the socket would block) and must be flushed before waiting for replies.
    unflushed: bool,
    /// Bytes read, not yet parsed.
    input: BytesMut,
    /// Commands queued or sent whose replies have not been read yet.
    awaiting: usize,
}

impl Pipe {
    /// Connects to the `redis://` or `rediss://` server `url` names (over TLS with `tls`'s
    /// files, as the shared client), with its user, password and database, and names the
    /// connection `name` (Redis's `CLIENT LIST` shows it). `None` for a URL a pipe does not
    /// serve (`#insecure`; the store takes no Unix socket either).
    pub(crate) async fn connect(
        url: &str,
        name: &str,
        tls: Option<&RedisTls>,
    ) -> Option<io::Result<Pipe>> {
        let info = redis::IntoConnectionInfo::into_connection_info(url).ok()?;
        let (host, port, secure) = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) => (host.clone(), *port, None),
            redis::ConnectionAddr::TcpTls {
                host,
                port,
                insecure: false,
                ..
            } => {
                let config = match RedisTls::rustls_config(tls) {
                    Ok(config) => config,
                    Err(e) => return Some(Err(e)),
                };
                (host.clone(), *port, Some(Arc::new(config)))
            }
            _ => return None,
        };
        let opened = tokio::time::timeout(CONNECT_TIMEOUT, async {
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let stream = match secure {
                None => Stream::Plain(tcp),
                Some(config) => {
                    let server = rustls::pki_types::ServerName::try_from(host.clone())
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                    let connector = tokio_rustls::TlsConnector::from(config);
                    Stream::Tls(Box::new(connector.connect(server, tcp).await?))
                }
            };
            let mut pipe = Pipe {
                stream,
                out: Vec::new(),
                sent: 0,
                unflushed: false,
                input: BytesMut::with_capacity(16 * 1024),
                awaiting: 0,
            };
            let settings = info.redis_settings();
            let mut expected = 0;
            if let Some(password) = settings.password() {
                match settings.username() {
                    Some(user) => pipe.command(&[b"AUTH", user.as_bytes(), password.as_bytes()]),
                    None => pipe.command(&[b"AUTH", password.as_bytes()]),
                }
                expected += 1;
            }
            if settings.db() != 0 {
                pipe.command(&[b"SELECT", settings.db().to_string().as_bytes()]);
                expected += 1;
            }
            for _ in 0..expected {
                if let Reply::Error(e) = pipe.reply().await? {
                    return Err(io::Error::other(format!(
                        "Redis refused the connection: {e}"
                    )));
                }
            }
            // Only a name for `CLIENT LIST`: a user whose ACL forbids it still gets its pipe.
            pipe.command(&[b"CLIENT", b"SETNAME", name.as_bytes()]);
            pipe.reply().await?;
            Ok(pipe)
        })
        .await;
        Some(opened.unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no connection to Redis within {CONNECT_TIMEOUT:?}"),
            ))
        }))
    }

    /// Fails unless the server answers `ROLE` as a primary: the sentinels may name one a moment
    /// before it is one, and a deposed primary answers every write `READONLY`.
    pub(crate) async fn check_primary(&mut self) -> io::Result<()> {
        self.command(&[b"ROLE"]);
        match self.reply().await? {
            Reply::Array(Some(role))
                if role.first() == Some(&Reply::Bulk(Some(b"master".into()))) =>
            {
                Ok(())
            }
            other => Err(io::Error::other(format!(
                "the server the sentinels name is not a primary (ROLE {other:?})"
            ))),
        }
    }

    /// Queues a command (its name and arguments): it goes out on the next [`Pipe::reply`].
    pub(crate) fn command(&mut self, args: &[&[u8]]) {
        encode(&mut self.out, args);
        self.awaiting += 1;
    }

    /// How many commands queued or sent have replies not read yet.
    pub(crate) fn awaiting(&self) -> usize {
        self.awaiting
    }

    /// Queues the `count` commands [`encode`]d into `commands` (left empty).
    pub(crate) fn take(&mut self, commands: &mut Vec<u8>, count: usize) {
        self.awaiting += count;
        if self.out.is_empty() {
            std::mem::swap(&mut self.out, commands);
        } else {
            self.out.append(commands);
        }
    }

    /// The next reply, in the order the commands were queued, sending what is queued first.
    /// Cancellation safe: a cancelled call loses nothing (what was sent and read stays
    /// counted).
    pub(crate) async fn reply(&mut self) -> io::Result<Reply> {
        loop {
            if self.sent < self.out.len() {
                self.sent += self.stream.write(&self.out[self.sent..]).await?;
                if self.sent == self.out.len() {
                    self.out.clear();
                    self.sent = 0;
                }
                self.unflushed = true;
                continue;
            }
            if self.unflushed {
                self.stream.flush().await?;
                self.unflushed = false;
            }
            if let Some(reply) = parse(&mut self.input)? {
                self.awaiting = self.awaiting.saturating_sub(1);
                return Ok(reply);
            }
            if self.stream.read_buf(&mut self.input).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "Redis closed the connection",
                ));
            }
        }
    }
}

/// Writes a command (its name and arguments) into `out`, as Redis reads it.
pub(crate) fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    write_len(out, b'*', args.len());
    for arg in args {
        write_len(out, b'$', arg.len());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

fn write_len(out: &mut Vec<u8>, kind: u8, len: usize) {
    use std::io::Write as _;
    // Writing into a Vec cannot fail.
    let _ = write!(out, "{}{len}\r\n", kind as char);
}

/// One whole reply from the front of `input` (taken off it), `None` while it is incomplete.
fn parse(input: &mut BytesMut) -> io::Result<Option<Reply>> {
    let mut at = 0;
    let Some(reply) = parse_at(input, &mut at, 0)? else {
        return Ok(None);
    };
    input.advance(at);
    Ok(Some(reply))
}

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// The line starting at `*at` (without its CRLF), moving `*at` past it.
fn line<'a>(input: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let rest = &input[*at..];
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    *at += end + 2;
    Some(&rest[..end])
}

fn number(text: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| bad(format!("not a number in a Redis reply: {text:?}")))
}

/// Arrays in arrays deeper than this are not a reply of the commands a pipe sends.
const MAX_DEPTH: usize = 8;

fn parse_at(input: &[u8], at: &mut usize, depth: usize) -> io::Result<Option<Reply>> {
    let Some(&kind) = input.get(*at) else {
        return Ok(None);
    };
    *at += 1;
    let Some(text) = line(input, at) else {
        return Ok(None);
    };
    let text_string = || String::from_utf8_lossy(text).into_owned();
    Ok(Some(match kind {
        b':' => Reply::Int(number(text)?),
        b'+' => Reply::Status(text_string()),
        b'-' => Reply::Error(text_string()),
        b'$' => match usize::try_from(number(text)?) {
            Err(_) => Reply::Bulk(None),
            Ok(len) => {
                if input.len() < *at + len + 2 {
                    return Ok(None);
                }
                let value = input[*at..*at + len].to_vec();
                *at += len + 2;
                Reply::Bulk(Some(value))
            }
        },
        b'*' if depth == MAX_DEPTH => return Err(bad("Redis reply nested too deep")),
        b'*' => match usize::try_from(number(text)?) {
            Err(_) => Reply::Array(None),
            Ok(len) => {
                let mut items = Vec::with_capacity(len.min(1024));
                for _ in 0..len {
                    match parse_at(input, at, depth + 1)? {
                        Some(item) => items.push(item),
                        None => return Ok(None),
                    }
                }
                Reply::Array(Some(items))
            }
        },
        other => return Err(bad(format!("not a RESP2 reply: type byte {other:#04x}"))),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(bytes: &[u8]) -> io::Result<Option<Reply>> {
        parse(&mut BytesMut::from(bytes))
    }

    #[test]
    fn every_reply_kind_reads() {
        assert_eq!(parsed(b":1\r\n").unwrap(), Some(Reply::Int(1)));
        assert_eq!(parsed(b":-7\r\n").unwrap(), Some(Reply::Int(-7)));
        assert_eq!(
            parsed(b"+OK\r\n").unwrap(),
            Some(Reply::Status("OK".into()))
        );
        assert_eq!(
            parsed(b"-NOSCRIPT No matching script\r\n").unwrap(),
            Some(Reply::Error("NOSCRIPT No matching script".into()))
        );
        assert_eq!(
            parsed(b"$5\r\na\r\nbc\r\n").unwrap(),
            Some(Reply::Bulk(Some(b"a\r\nbc".to_vec()))),
            "a bulk string is read by its length, CRLF inside and all"
        );
        assert_eq!(parsed(b"$-1\r\n").unwrap(), Some(Reply::Bulk(None)));
        assert_eq!(parsed(b"*-1\r\n").unwrap(), Some(Reply::Array(None)));
        assert_eq!(
            parsed(b"*2\r\n$1\r\n7\r\n*1\r\n:0\r\n").unwrap(),
            Some(Reply::Array(Some(vec![
                Reply::Bulk(Some(b"7".to_vec())),
                Reply::Array(Some(vec![Reply::Int(0)])),
            ])))
        );
    }

    #[test]
    fn a_reply_read_in_pieces_is_taken_whole_and_only_once() {
        let whole: &[u8] = b"*2\r\n$3\r\nabc\r\n:42\r\n:1\r\n";
        let mut input = BytesMut::new();
        let mut replies = Vec::new();
        for (n, byte) in whole.iter().enumerate() {
            input.extend_from_slice(&[*byte]);
            let before = input.len();
            match parse(&mut input).unwrap() {
                Some(reply) => replies.push((n + 1, reply)),
                None => assert_eq!(input.len(), before, "nothing taken off a partial reply"),
            }
        }
        let array = Reply::Array(Some(vec![
            Reply::Bulk(Some(b"abc".to_vec())),
            Reply::Int(42),
        ]));
        assert_eq!(
            replies,
            [(whole.len() - 4, array), (whole.len(), Reply::Int(1))]
        );
        assert!(input.is_empty());
    }

    #[test]
    fn what_is_not_a_reply_is_an_error() {
        assert!(parsed(b"?1\r\n").is_err());
        assert!(parsed(b":x\r\n").is_err());
        assert!(parsed(b"$y\r\n").is_err());
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1) + ":1\r\n";
        assert!(parsed(deep.as_bytes()).is_err(), "nested too deep");
        let deepest = "*1\r\n".repeat(MAX_DEPTH) + ":1\r\n";
        assert!(parsed(deepest.as_bytes()).unwrap().is_some());
    }

    #[test]
    fn a_command_is_written_as_redis_reads_it() {
        let mut out = Vec::new();
        encode(&mut out, &[b"SET", b"k", b""]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    }
}
