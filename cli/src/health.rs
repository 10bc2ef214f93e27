//! `mqstore health`: the server's probe, asked over HTTP with the standard library alone (the
//! container image has no shell and no curl to ask it with).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

/// Long enough for a loaded node, short enough for a container runtime's health-check timeout.
const TIMEOUT: Duration = Duration::from_secs(3);

pub(crate) fn check(metrics: &str, live: bool) -> ExitCode {
    let path = if live { "/healthz" } else { "/readyz" };
    let address = match local_address(metrics) {
        Ok(address) => address,
        Err(e) => {
            eprintln!("error: --metrics {metrics}: {e}");
            return ExitCode::from(2);
        }
    };
    match ask(address, path) {
        Ok((200, _)) => {
            println!("{} at {address}", if live { "live" } else { "ready" });
            ExitCode::SUCCESS
        }
        Ok((status, body)) => {
            eprintln!(
                "not {}: {status} {}",
                if live { "live" } else { "ready" },
                body.trim()
            );
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!(
                "error: nothing answers at {address}{path}: {e} (is `mqstore serve --metrics {metrics}` running?)"
            );
            ExitCode::from(4)
        }
    }
}

/// Where to ask a server that listens on `metrics`: an unspecified address (0.0.0.0, [::]) is
/// this machine's loopback.
fn local_address(metrics: &str) -> Result<SocketAddr, String> {
    let mut address = metrics
        .to_socket_addrs()
        .map_err(|e| e.to_string())?
        .next()
        .ok_or("no such address")?;
    if address.ip().is_unspecified() {
        address.set_ip(match address {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    Ok(address)
}

/// The status code and body of `GET path`.
fn ask(address: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&address, TIMEOUT)?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    // One write, as HTTP clients send a request.
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "not an HTTP answer");
    let status = response
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(bad)?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Ok((status, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::local_address;

    #[test]
    fn an_unspecified_address_is_asked_on_loopback() {
        assert_eq!(
            local_address("0.0.0.0:9464").unwrap().to_string(),
            "127.0.0.1:9464"
        );
        assert_eq!(
            local_address("[::]:9464").unwrap().to_string(),
            "[::1]:9464"
        );
        assert_eq!(
            local_address("10.1.2.3:80").unwrap().to_string(),
            "10.1.2.3:80"
        );
        assert!(local_address("no-port").is_err());
    }
}
